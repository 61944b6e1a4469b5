// SdNotifier and as_server's notify protocol, with this test playing systemd: it binds the
// datagram socket named by $NOTIFY_SOCKET and reads what arrives.
#include "sd_notify.h"
#include "server_process.h"

#include <catch2/catch.hpp>

#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <optional>
#include <random>

using namespace agentd::test;
using agentd::detail::SdNotifier;

namespace {

// A bound AF_UNIX datagram socket: a path, or an abstract name given with a leading '@'.
class NotifySocket {
 public:
  explicit NotifySocket(std::string name) : name_(std::move(name)) {
    fd_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    REQUIRE(fd_ >= 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, name_.data(), name_.size());
    socklen_t len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + name_.size());
    if (name_[0] == '@') addr.sun_path[0] = '\0';
    else ++len;
    REQUIRE(::bind(fd_, reinterpret_cast<sockaddr*>(&addr), len) == 0);
  }
  ~NotifySocket() {
    ::close(fd_);
    if (name_[0] == '/') ::unlink(name_.c_str());
  }
  const std::string& name() const { return name_; }

  // The next datagram, or nothing when none arrives within timeout.
  std::optional<std::string> receive(std::chrono::milliseconds timeout) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(timeout.count())) != 1) return std::nullopt;
    char buf[4096];
    auto n = ::recv(fd_, buf, sizeof buf, 0);
    if (n < 0) return std::nullopt;
    return std::string(buf, static_cast<std::size_t>(n));
  }

  // Reads datagrams until one contains what (returned), collecting the others into seen.
  std::optional<std::string> receive_until(const std::string& what, std::vector<std::string>& seen,
                                           std::chrono::milliseconds timeout) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return std::nullopt;
      auto m = receive(left);
      if (!m) return std::nullopt;
      if (m->find(what) != std::string::npos) return m;
      seen.push_back(*m);
    }
  }

 private:
  std::string name_;
  int fd_ = -1;
};

std::string unique_suffix() {
  std::random_device rd;
  return std::to_string(::getpid()) + "-" + std::to_string(rd());
}

bool contains(const std::vector<std::string>& msgs, const std::string& what) {
  for (const auto& m : msgs)
    if (m.find(what) != std::string::npos) return true;
  return false;
}

// Sets environment variables for the scope (the tests run on one thread).
class ScopedEnv {
 public:
  ScopedEnv(std::initializer_list<std::pair<std::string, std::string>> vars) {
    for (const auto& [k, v] : vars) {
      const char* old = std::getenv(k.c_str());
      saved_.emplace_back(k, old ? std::optional<std::string>(old) : std::nullopt);
      ::setenv(k.c_str(), v.c_str(), 1);
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;
  ~ScopedEnv() {
    for (auto& [k, v] : saved_) {
      if (v) ::setenv(k.c_str(), v->c_str(), 1);
      else ::unsetenv(k.c_str());
    }
  }

 private:
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

}  // namespace

TEST_CASE("SdNotifier sends one datagram per notification to a path socket", "[sd_notify]") {
  TempDir dir;
  NotifySocket sock(dir.path() + "/notify");
  SdNotifier n(sock.name());
  REQUIRE(n.enabled());
  CHECK(n.notify("READY=1\nSTATUS=serving"));
  CHECK(sock.receive(std::chrono::seconds(5)) == "READY=1\nSTATUS=serving");
  CHECK(n.notify("STOPPING=1"));
  CHECK(sock.receive(std::chrono::seconds(5)) == "STOPPING=1");
}

TEST_CASE("SdNotifier reaches an abstract socket named with '@'", "[sd_notify]") {
  NotifySocket sock("@agentd-test-notify-" + unique_suffix());
  SdNotifier n(sock.name());
  CHECK(n.notify("WATCHDOG=1"));
  CHECK(sock.receive(std::chrono::seconds(5)) == "WATCHDOG=1");
}

TEST_CASE("SdNotifier reads NOTIFY_SOCKET, WATCHDOG_USEC and WATCHDOG_PID", "[sd_notify]") {
  SECTION("nothing set: disabled, notify is a no-op") {
    ScopedEnv env{{"NOTIFY_SOCKET", ""}, {"WATCHDOG_USEC", ""}};
    auto n = SdNotifier::from_environment();
    CHECK_FALSE(n.enabled());
    CHECK(n.watchdog_timeout().count() == 0);
    CHECK_FALSE(n.notify("READY=1"));
  }
  SECTION("a relative socket name is not a notification socket") {
    ScopedEnv env{{"NOTIFY_SOCKET", "relative/notify"}};
    CHECK_FALSE(SdNotifier::from_environment().enabled());
  }
  SECTION("the watchdog applies to this process") {
    ScopedEnv env{{"NOTIFY_SOCKET", "@x"}, {"WATCHDOG_USEC", "500000"},
                   {"WATCHDOG_PID", std::to_string(::getpid())}};
    auto n = SdNotifier::from_environment();
    CHECK(n.enabled());
    CHECK(n.watchdog_timeout() == std::chrono::milliseconds(500));
  }
  SECTION("the watchdog is for another process") {
    ScopedEnv env{{"NOTIFY_SOCKET", "@x"}, {"WATCHDOG_USEC", "500000"},
                   {"WATCHDOG_PID", std::to_string(::getpid() + 1)}};
    CHECK(SdNotifier::from_environment().watchdog_timeout().count() == 0);
  }
  SECTION("a malformed WATCHDOG_USEC is ignored") {
    ScopedEnv env{{"NOTIFY_SOCKET", "@x"}, {"WATCHDOG_USEC", "soon"}, {"WATCHDOG_PID", ""}};
    CHECK(SdNotifier::from_environment().watchdog_timeout().count() == 0);
  }
}

TEST_CASE("as_server notifies READY once listening, WATCHDOG while serving, RELOADING on SIGHUP "
          "and STOPPING on SIGTERM",
          "[sd_notify][process]") {
  NotifySocket sock("@agentd-test-as-server-" + unique_suffix());
  std::unique_ptr<ServerProcess> server;
  {
    // 400 ms watchdog: as_server pings every 200 ms.
    ScopedEnv env{{"NOTIFY_SOCKET", sock.name()}, {"WATCHDOG_USEC", "400000"}, {"WATCHDOG_PID", ""}};
    ::unsetenv("WATCHDOG_PID");
    server = ServerProcess::start(standard_args());
  }
  std::vector<std::string> before_ready;
  auto ready = sock.receive_until("READY=1", before_ready, std::chrono::seconds(30));
  REQUIRE(ready);
  CHECK(ready->find("STATUS=serving on ") != std::string::npos);
  // Ready means listening: a connection is accepted right now.
  CHECK(can_connect(server->port()));
  CHECK_FALSE(contains(before_ready, "STOPPING=1"));

  // The event loop keeps pinging.
  std::vector<std::string> serving;
  for (int i = 0; i < 3; ++i) {
    auto ping = sock.receive_until("WATCHDOG=1", serving, std::chrono::seconds(10));
    REQUIRE(ping);
    CHECK(ping->find("STATUS=serving: 0 agent(s)") != std::string::npos);
  }
  CHECK_FALSE(contains(serving, "STOPPING=1"));

  // STATUS follows the work the server does.
  {
    auto client = server->connect();
    client.create_agent("EchoAgent", "e1");
    auto ping = sock.receive_until("WATCHDOG=1", serving, std::chrono::seconds(10));
    REQUIRE(ping);
    CHECK(ping->find("1 agent(s)") != std::string::npos);
  }

  // A reload is bracketed by RELOADING=1 and READY=1.
  ::kill(server->pid(), SIGHUP);
  std::vector<std::string> reloading;
  auto r1 = sock.receive_until("RELOADING=1", reloading, std::chrono::seconds(10));
  REQUIRE(r1);
  CHECK(r1->find("MONOTONIC_USEC=") != std::string::npos);
  auto r2 = sock.receive_until("READY=1", reloading, std::chrono::seconds(10));
  REQUIRE(r2);
  CHECK_FALSE(contains(reloading, "STOPPING=1"));

  auto exit = server->signal_and_wait(SIGTERM);
  CHECK(exit.exit_code == 0);
  std::vector<std::string> stopping;
  auto stop = sock.receive_until("STOPPING=1", stopping, std::chrono::seconds(5));
  REQUIRE(stop);
  // Nothing after STOPPING claims readiness again.
  std::vector<std::string> after;  // the process has exited: everything it sent is queued
  while (auto m = sock.receive(std::chrono::milliseconds(0))) after.push_back(*m);
  CHECK_FALSE(contains(after, "READY=1"));
}

TEST_CASE("as_server without NOTIFY_SOCKET runs as before", "[sd_notify][process]") {
  ScopedEnv env{{"NOTIFY_SOCKET", ""}};
  auto server = ServerProcess::start(standard_args());
  CHECK(can_connect(server->port()));
  auto exit = server->signal_and_wait(SIGTERM);
  INFO("signal " << exit.term_signal << "; stderr: " << exit.err);
  CHECK(exit.exit_code == 0);
}

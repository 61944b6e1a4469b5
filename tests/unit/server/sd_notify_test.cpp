// SdNotifier (sd_notify.h) on its own, with this test playing systemd: it binds the datagram
// socket a notifier is given (or that $NOTIFY_SOCKET names) and reads what arrives. A real
// as_server speaking the protocol is tested in tests/systemd.
#include "sd_notify.h"

#include "notify_socket.h"
#include "scoped_env.h"
#include "server_process.h"

#include <catch2/catch.hpp>

#include <unistd.h>

#include <chrono>
#include <string>

using namespace agentd::test;
using agentd::detail::SdNotifier;

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
    ScopedEnv env{
        {"NOTIFY_SOCKET", "@x"}, {"WATCHDOG_USEC", "500000"}, {"WATCHDOG_PID", std::to_string(::getpid())}};
    auto n = SdNotifier::from_environment();
    CHECK(n.enabled());
    CHECK(n.watchdog_timeout() == std::chrono::milliseconds(500));
  }
  SECTION("the watchdog is for another process") {
    ScopedEnv env{{"NOTIFY_SOCKET", "@x"},
                  {"WATCHDOG_USEC", "500000"},
                  {"WATCHDOG_PID", std::to_string(::getpid() + 1)}};
    CHECK(SdNotifier::from_environment().watchdog_timeout().count() == 0);
  }
  SECTION("a malformed WATCHDOG_USEC is ignored") {
    ScopedEnv env{{"NOTIFY_SOCKET", "@x"}, {"WATCHDOG_USEC", "soon"}, {"WATCHDOG_PID", ""}};
    CHECK(SdNotifier::from_environment().watchdog_timeout().count() == 0);
  }
}

// Subprocess: starting programs with redirected streams, waiting for them, stopping them, and
// the wait status as text. Runs small system programs (sh, cat, sleep) found on $PATH.
#include "subprocess.h"

#include "server_process.h"  // TempDir, process_alive

#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <fstream>
#include <sstream>
#include <string>

using agentd::detail::describe_wait_status;
using agentd::detail::Redirect;
using agentd::detail::SpawnError;
using agentd::detail::SpawnOptions;
using agentd::detail::Subprocess;
using namespace std::chrono_literals;

namespace {

SpawnOptions command(std::vector<std::string> argv) {
  SpawnOptions o;
  o.argv = std::move(argv);
  return o;
}

SpawnOptions shell(const std::string& script) { return command({"sh", "-c", script}); }

// Everything readable from fd until EOF.
std::string read_all(int fd) {
  std::string out;
  char chunk[512];
  ssize_t got;
  while ((got = ::read(fd, chunk, sizeof chunk)) > 0) out.append(chunk, static_cast<std::size_t>(got));
  return out;
}

// One line from fd (blocking), without its newline.
std::string read_line(int fd) {
  std::string line;
  char c;
  while (::read(fd, &c, 1) == 1 && c != '\n') line += c;
  return line;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// The value of field ("SigBlk:", ...) in /proc/<pid>/status text.
std::string status_field(const std::string& text, const std::string& field) {
  auto at = text.find(field);
  if (at == std::string::npos) return {};
  auto start = text.find_first_not_of(" \t", at + field.size());
  return text.substr(start, text.find('\n', start) - start);
}

// The session id in a /proc/<pid>/stat line (the fourth field after the command name), the
// first line of text.
long stat_session(const std::string& text) {
  auto line = text.substr(0, text.find('\n'));
  std::istringstream rest(line.substr(line.rfind(')') + 1));
  std::string state;
  long ppid = 0, pgrp = 0, session = -1;
  rest >> state >> ppid >> pgrp >> session;
  return session;
}

}  // namespace

TEST_CASE("a pipe each way: what goes into stdin comes back on stdout", "[subprocess]") {
  auto o = command({"cat"});  // no '/': found on $PATH
  o.in = Redirect::pipe();
  o.out = Redirect::pipe();
  auto p = Subprocess::spawn(o);
  REQUIRE(p.pid() > 0);
  REQUIRE(p.stdin_pipe().get() >= 0);
  REQUIRE(p.stdout_pipe().get() >= 0);
  CHECK(p.stderr_pipe().get() == -1);
  std::string text = "hello\nsubprocess\n";
  REQUIRE(::write(p.stdin_pipe().get(), text.data(), text.size()) == static_cast<ssize_t>(text.size()));
  p.stdin_pipe() = nullptr;  // EOF: cat ends
  CHECK(read_all(p.stdout_pipe().get()) == text);
  int status = p.wait();
  CHECK(p.reaped());
  CHECK(p.status() == status);
  CHECK(describe_wait_status(status) == "exited with status 0");
}

TEST_CASE("stderr can be a pipe of its own or go where stdout goes", "[subprocess]") {
  auto o = shell("echo out; echo err >&2");
  o.out = Redirect::pipe();
  o.err = Redirect::pipe();
  auto p = Subprocess::spawn(o);
  CHECK(read_all(p.stdout_pipe().get()) == "out\n");
  CHECK(read_all(p.stderr_pipe().get()) == "err\n");
  CHECK(p.wait() == 0);

  o.err = Redirect::to_stdout();
  auto q = Subprocess::spawn(o);
  CHECK(q.stderr_pipe().get() == -1);
  CHECK(read_all(q.stdout_pipe().get()) == "out\nerr\n");
  CHECK(q.wait() == 0);
}

TEST_CASE("output appended to a file, created 0600 when missing", "[subprocess]") {
  agentd::test::TempDir dir;
  auto existing = dir.write("existing.log", "before\n");
  auto o = shell("echo out; echo err >&2");
  o.in = Redirect::null();
  o.out = Redirect::append_to(existing);
  o.err = Redirect::to_stdout();
  CHECK(Subprocess::spawn(o).wait() == 0);
  CHECK(slurp(existing) == "before\nout\nerr\n");

  auto fresh = dir.path() + "/fresh.log";
  o.out = Redirect::null();
  o.err = Redirect::append_to(fresh);
  CHECK(Subprocess::spawn(o).wait() == 0);
  CHECK(slurp(fresh) == "err\n");
  struct stat st {};
  REQUIRE(::stat(fresh.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);

  // stdin from /dev/null: an immediate EOF.
  auto c = command({"cat"});
  c.in = Redirect::null();
  c.out = Redirect::pipe();
  auto p = Subprocess::spawn(c);
  CHECK(read_all(p.stdout_pipe().get()).empty());
  CHECK(p.wait() == 0);
}

TEST_CASE("the environment is ours unless given", "[subprocess]") {
  ::setenv("AGENTD_SUBPROCESS_TEST", "ours", 1);
  auto env = agentd::detail::current_environment();
  CHECK(std::find(env.begin(), env.end(), "AGENTD_SUBPROCESS_TEST=ours") != env.end());

  auto o = shell("echo \"$AGENTD_SUBPROCESS_TEST:${HOME:-unset}\"");
  o.out = Redirect::pipe();
  auto inherited = Subprocess::spawn(o);
  CHECK(read_all(inherited.stdout_pipe().get()).starts_with("ours:"));
  inherited.wait();

  o.env = std::vector<std::string>{"AGENTD_SUBPROCESS_TEST=given"};
  auto given = Subprocess::spawn(o);  // sh still found on our $PATH
  CHECK(read_all(given.stdout_pipe().get()) == "given:unset\n");
  given.wait();
  ::unsetenv("AGENTD_SUBPROCESS_TEST");
}

TEST_CASE("a new session, a cleared signal mask", "[subprocess]") {
  // cat prints its own /proc stat (with its session) and status (with SigBlk, blocked signals).
  auto o = command({"cat", "/proc/self/stat", "/proc/self/status"});
  o.out = Redirect::pipe();
  sigset_t usr1, before;
  sigemptyset(&usr1);
  sigaddset(&usr1, SIGUSR1);
  REQUIRE(::pthread_sigmask(SIG_BLOCK, &usr1, &before) == 0);

  auto same = Subprocess::spawn(o);
  auto same_status = read_all(same.stdout_pipe().get());
  same.wait();
  o.new_session = true;
  o.clear_signal_mask = true;
  auto own = Subprocess::spawn(o);
  auto own_status = read_all(own.stdout_pipe().get());
  own.wait();
  ::pthread_sigmask(SIG_SETMASK, &before, nullptr);

  CHECK(stat_session(same_status) == ::getsid(0));
  CHECK(stat_session(own_status) == own.pid());
  // SIGUSR1 is signal 10: bit 9 of the mask, 0x200.
  CHECK((std::stoull(status_field(same_status, "SigBlk:"), nullptr, 16) & 0x200) != 0);
  CHECK(std::stoull(status_field(own_status, "SigBlk:"), nullptr, 16) == 0);
}

TEST_CASE("a program that cannot be started is named in the error", "[subprocess]") {
  for (std::string missing : {"agentd-no-such-program", "/nonexistent/agentd-program"}) {
    try {
      Subprocess::spawn(command({missing, "--flag"}));
      FAIL("expected SpawnError for " << missing);
    } catch (const SpawnError& e) {
      CHECK(e.program() == missing);
      CHECK(e.error() == ENOENT);
      CHECK(std::string(e.what()) == "cannot start '" + missing + "': No such file or directory");
    }
  }
  CHECK_THROWS_AS(Subprocess::spawn(SpawnOptions{}), std::invalid_argument);
  auto bad = command({"true"});
  bad.in = Redirect::to_stdout();
  CHECK_THROWS_AS(Subprocess::spawn(bad), std::invalid_argument);
}

TEST_CASE("exit statuses and signals as text", "[subprocess]") {
  CHECK(describe_wait_status(Subprocess::spawn(shell("exit 3")).wait()) == "exited with status 3");
  CHECK(describe_wait_status(Subprocess::spawn(shell("kill -9 $$")).wait()) == "was killed by signal 9");
  CHECK(describe_wait_status(Subprocess::spawn(shell("kill -TERM $$")).wait()) == "was killed by signal 15");
  CHECK(describe_wait_status(0x137f) == "stopped");  // WIFSTOPPED by SIGSTOP
}

TEST_CASE("try_wait and wait_for do not block past their time", "[subprocess]") {
  auto p = Subprocess::spawn(command({"sleep", "30"}));
  CHECK_FALSE(p.try_wait());
  CHECK_FALSE(p.wait_for(20ms));
  CHECK_FALSE(p.reaped());
  CHECK(p.signal(SIGTERM));
  auto status = p.wait_for(30s);
  REQUIRE(status);
  CHECK(describe_wait_status(*status) == "was killed by signal 15");
  CHECK(p.try_wait() == status);   // once reaped, the same answer
  CHECK_FALSE(p.signal(SIGKILL));  // never to a reaped (maybe reused) pid
}

TEST_CASE("terminate: SIGTERM, and SIGKILL after the grace when that is ignored", "[subprocess]") {
  auto polite = Subprocess::spawn(command({"sleep", "30"}));
  CHECK(describe_wait_status(polite.terminate(10s)) == "was killed by signal 15");
  CHECK(polite.terminate(10s) == *polite.status());  // idempotent

  auto o = shell("trap '' TERM; echo ready; exec sleep 30");
  o.out = Redirect::pipe();
  auto stubborn = Subprocess::spawn(o);
  REQUIRE(read_line(stubborn.stdout_pipe().get()) == "ready");  // the trap is set
  auto start = std::chrono::steady_clock::now();
  CHECK(describe_wait_status(stubborn.terminate(200ms)) == "was killed by signal 9");
  CHECK(std::chrono::steady_clock::now() - start >= 200ms);  // it waited the grace out first
}

TEST_CASE("destruction kills and reaps, and release leaves the process running", "[subprocess]") {
  pid_t killed;
  {
    auto p = Subprocess::spawn(command({"sleep", "30"}));
    killed = p.pid();
    CHECK(agentd::test::process_alive(killed));
  }
  CHECK(::kill(killed, 0) != 0);  // gone and reaped, not a zombie

  pid_t kept;
  {
    auto p = Subprocess::spawn(command({"sleep", "30"}));
    kept = p.release();
    CHECK(kept == p.pid());
    CHECK_FALSE(p.signal(SIGTERM));
    CHECK_THROWS_AS(p.wait(), std::logic_error);
  }
  CHECK(agentd::test::process_alive(kept));
  ::kill(kept, SIGKILL);
  int status = 0;
  CHECK(::waitpid(kept, &status, 0) == kept);

  // A move carries the process; the moved-from object holds none.
  auto a = Subprocess::spawn(command({"sleep", "30"}));
  pid_t pid = a.pid();
  Subprocess b = std::move(a);
  CHECK(a.pid() == -1);
  CHECK(b.pid() == pid);
  CHECK(describe_wait_status(b.terminate(10s)) == "was killed by signal 15");
}

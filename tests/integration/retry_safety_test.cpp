// "Safe to retry" kept under faults (README "What a client sees during a restart", "Durability"):
// a client paused across a restart is never told not_applied for calls the server ran and then
// forgot; a call that crashes the server is reported interrupted (with the signal), never as
// safe to retry; an interrupted bulk creation reports what is stored; a state dir whose lock,
// database or write-ahead log was tampered with refuses to start, naming what is missing; a
// stalled disk is logged and does not hold SIGTERM past --shutdown-grace. Real servers, real
// sockets, no fixed sleeps.
#include "server_process.h"

#include <agentd/client.h>

#include <catch2/catch.hpp>
#include <error_of.h>
#include <fmt/format.h>

#include <fcntl.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

using namespace agentd;
using namespace agentd::test;
using Catch::Contains;
namespace fs = std::filesystem;

namespace {

std::vector<std::string> state_args(const TempDir& dir, std::vector<std::string> extra = {}) {
  extra.insert(extra.begin(), {"--state-dir", dir.path() + "/state"});
  return extra;
}

ClientOptions reconnecting() {
  ClientOptions o;
  o.reconnect_initial = 20ms;
  o.reconnect_max = 200ms;
  o.reconnect_deadline = 30s;
  o.timeout = 60s;
  return o;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// What `sqlite3 db sql` prints (the CLI reads a live WAL database as any reader does).
std::string sqlite(const std::string& db, const std::string& sql) {
  const std::string out = db + ".query";
  const std::string cmd = fmt::format("sqlite3 '{}' \"{}\" > '{}' 2>&1", db, sql, out);
  if (std::system(cmd.c_str()) != 0) return "(error) " + read_file(out);
  std::string r = read_file(out);
  while (!r.empty() && (r.back() == '\n' || r.back() == '\r')) r.pop_back();
  return r;
}

bool has_raw_bytes(const std::string& s) {
  for (unsigned char ch : s)
    if ((ch < 0x20 && ch != '\n' && ch != '\t') || ch >= 0x7f) return true;
  return false;
}

}  // namespace

TEST_CASE("a client paused across a restart is never told not_applied for calls that ran",
          "[retry][durability][fault]") {
  // The client sends its calls and stops (SIGSTOP: a GC pause, a laptop lid) before their
  // answers arrive; the server runs and commits them all, trims its results to
  // --max-pool-size, and restarts; the client wakes and asks for each call by id.
  TempDir dir;
  const int kCalls = 3000;
  auto server = ServerProcess::start(standard_args(state_args(dir, {"--max-pool-size", "500"})));
  const auto port = server->port();
  std::vector<std::string> ids;
  {
    Client c = server->connect();
    // 10 ms a call, as slow as a small tool: most calls are still queued when the client stops.
    for (int i = 0; i < 20; ++i)
      ids.push_back(c.create_agent("EchoAgent", fmt::format("e{}", i), Value{{"sleep_ms", 10}}).id());
  }
  const std::string out = dir.path() + "/client.out";
  detail::SpawnOptions so;
  so.argv = {AGENTD_LOST_CALLS_CLIENT, std::to_string(port), std::to_string(kCalls)};
  so.argv.insert(so.argv.end(), ids.begin(), ids.end());
  so.out = detail::Redirect::append_to(out);
  auto client = detail::Subprocess::spawn(so);
  REQUIRE(wait_until([&] { return read_file(out).find("sent\n") != std::string::npos; }, 60s));
  REQUIRE(client.signal(SIGSTOP));
  const std::string db = dir.path() + "/state/agentd.db";
  {
    Client c = server->connect();
    // Every call ran and was committed; then the store trimmed its results to the pool's size.
    REQUIRE(wait_until([&] { return c.info().calls_completed >= static_cast<std::uint64_t>(kCalls); }, 60s));
    REQUIRE(wait_until([&] { return sqlite(db, "SELECT count(*) FROM results") == "500"; }, 30s));
  }
  server->kill_now();
  server = restart_on(port, state_args(dir, {"--max-pool-size", "500"}));
  REQUIRE(client.signal(SIGCONT));
  REQUIRE(wait_until([&] { return read_file(out).find("done\n") != std::string::npos; }, 90s));
  client.wait_for(10s);

  std::map<std::string, int> codes;
  std::istringstream lines(read_file(out));
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream words(line);
    std::string call, index, what, code;
    words >> call >> index >> what >> code;
    if (call != "call") continue;
    ++codes[what == "ok" ? "ok" : code];
    if (what != "ok" && code != "expired") UNSCOPED_INFO(line);
  }
  INFO("outcomes: ok " << codes["ok"] << ", expired " << codes["expired"] << ", not_applied "
                       << codes["not_applied"]);
  std::cerr << fmt::format(
      "paused client across a restart: {} calls, {} ok, {} expired, {} "
      "not_applied\n",
      kCalls, codes["ok"], codes["expired"], codes["not_applied"]);
  CHECK(codes["not_applied"] == 0);
  CHECK(codes["ok"] + codes["expired"] == kCalls);
  CHECK(codes["expired"] > 0);  // some answers were lost and their results forgotten
  // And every one of them is in its agent's memory, once.
  Client c = server->connect();
  std::size_t in_memory = 0;
  for (const auto& id : ids) in_memory += c.agent(id).memory().size() / 2;
  CHECK(in_memory == static_cast<std::size_t>(kCalls));
}

TEST_CASE("a call that crashes the server is reported interrupted, never safe to retry",
          "[retry][durability][fault]") {
  TempDir dir;
  auto server = ServerProcess::start(standard_args(state_args(dir)));
  const auto port = server->port();
  Client c = server->connect(reconnecting());
  auto crasher = c.create_agent("CrashAgent", "crasher");
  const std::string started = dir.path() + "/started";
  auto slow = c.create_agent(
      "BlockAgent", "slow",
      Value{{"release_file", dir.path() + "/never"}, {"max_ms", 60000}, {"started_file", started}});
  CHECK(crasher.reply(Msg("user", "fine")).get().content == "fine");
  Placeholder running = slow.reply(Msg("user", "running"));
  Placeholder queued = slow.reply(Msg("user", "queued"));
  // One runs agent code (handed to a worker is not enough: a call whose worker has not begun it
  // when the server dies never started, and is rightly not_applied), one waits.
  REQUIRE(wait_until([&] { return std::filesystem::exists(started) && c.info().calls_queued >= 2; }, 10s));
  Placeholder crash = crasher.reply(Msg("user", "abort"));
  const ExitResult died = server->wait_exit(30s);
  CHECK(died.term_signal == SIGABRT);
  // The dying server names the call that killed it.
  CHECK_THAT(died.err, Contains("fatal signal 6 (SIGABRT) while running call " + crash.call_id() +
                                " of agent " + crasher.id() + " (CrashAgent)"));

  server = restart_on(port, state_args(dir));  // what systemd's Restart=on-failure does
  CHECK_THAT(server->stderr_text(), Contains("while running call " + crash.call_id()));
  Error e = error_of([&] { crash.get(); });
  CHECK(e.code() == ErrorCode::interrupted);
  CHECK_FALSE(e.retryable());
  CHECK_THAT(e.message(), Contains("signal 6") && Contains("crashed the server"));
  Error r = error_of([&] { running.get(); });
  CHECK(r.code() == ErrorCode::interrupted);
  CHECK_FALSE(r.retryable());
  // Queued behind it, never started: the one kind that is safe to retry.
  Error q = error_of([&] { queued.get(); });
  CHECK(q.code() == ErrorCode::not_applied);
  CHECK(q.retryable());
  // The agents are back and usable; the crashing call left nothing in memory.
  CHECK(crasher.memory().size() == 1);  // "fine" (the agent adds its inputs)
  CHECK(crasher.reply(Msg("user", "again")).get().content == "again");
}

TEST_CASE("a bulk creation cut by kill -9 reports what is stored", "[retry][durability][fault]") {
  TempDir dir;
  auto server = ServerProcess::start(standard_args(state_args(dir)));
  const auto port = server->port();
  Client c = server->connect(reconnecting());
  std::optional<Error> failed;
  std::size_t made = 0;
  std::thread creator([&] {
    try {
      made = c.create_agents("PickyAgent", 4000, Value{{"slow_ms", 1}}, "bulk").size();
    } catch (const Error& e) {
      failed = e;
    }
  });
  {
    Client watcher = server->connect();
    REQUIRE(wait_until([&] { return watcher.info().agent_count >= 1; }, 30s));
  }
  server->kill_now();
  server = restart_on(port, state_args(dir));
  creator.join();
  Client check = server->connect();
  const auto stored = check.list_agents().size();
  if (failed) {
    INFO(failed->message());
    // All or nothing, and the message says what happened to what was made.
    CHECK(stored == 0);
    CHECK_THAT(failed->message(), Contains("were made and deleted again"));
    CHECK_THAT(failed->message(), !Contains("could not be deleted"));
  } else {
    CHECK(made == 4000);
    CHECK(stored == 4000);
  }
}

TEST_CASE("a tampered state dir refuses to start, naming what is missing", "[retry][durability]") {
  TempDir dir;
  const std::string state = dir.path() + "/state";
  const std::string db = state + "/agentd.db";
  std::string id;
  {
    auto server = ServerProcess::start(standard_args(state_args(dir)));
    Client c = server->connect();
    auto a = c.create_agent("EchoAgent", "kept");
    id = a.id();
    for (int i = 0; i < 20; ++i) a.reply(Msg("user", fmt::format("m{}", i))).get();
    // SQLite applies what the commit log acknowledged within milliseconds: its write-ahead log
    // then holds the last commits (the database file holds only what the start checkpointed).
    REQUIRE(wait_until([&] { return fs::exists(db + "-wal") && fs::file_size(db + "-wal") > 0; }, 10s));
    server->kill_now();
  }

  SECTION("the lock is on the directory: no file beside the database sidesteps it") {
    auto first = ServerProcess::start(standard_args(state_args(dir)));
    fs::remove(state + "/agentd.lock");
    auto r = run_as_server(standard_args(state_args(dir)));
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Contains("another as_server is using this state dir"));
    // Through another path to the same directory too.
    fs::create_directory_symlink(state, dir.path() + "/alias");
    auto r2 = run_as_server(standard_args({"--state-dir", dir.path() + "/alias"}));
    CHECK(r2.exit_code == 2);
    CHECK_THAT(r2.err, Contains("another as_server is using this state dir"));
    CHECK(first->connect().agent(id).memory().size() == 40);
  }
  SECTION("a missing write-ahead log: the commit log has every acknowledged call") {
    fs::remove(db + "-wal");
    fs::remove(db + "-shm");
    auto server = ServerProcess::start(standard_args(state_args(dir)));
    CHECK(server->connect().agent(id).memory().size() == 40);
  }
  SECTION("a truncated write-ahead log: the same") {
    fs::resize_file(db + "-wal", fs::file_size(db + "-wal") / 2);
    auto server = ServerProcess::start(standard_args(state_args(dir)));
    CHECK(server->connect().agent(id).memory().size() == 40);
  }
  SECTION("a missing write-ahead log and commit log") {
    fs::remove(db + "-wal");
    fs::remove(db + "-shm");
    fs::remove(state + "/agentd.redo");
    auto r = run_as_server(standard_args(state_args(dir)));
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Contains(db) && Contains("acknowledged commit(s) are missing") &&
                          Contains(state + "/agentd.redo") && Contains(db + "-wal") &&
                          Contains("agentd.run"));
    CHECK_THAT(r.out, !Contains("ready"));
    SECTION("removing the run record starts from what the database holds, as the message says") {
      fs::remove(state + "/agentd.run");
      auto server = ServerProcess::start(standard_args(state_args(dir)));
      CHECK(server->connect().list_agents().size() <= 1);
    }
  }
  SECTION("an empty database file") {
    fs::resize_file(db, 0);
    fs::remove(db + "-wal");
    fs::remove(db + "-shm");
    auto r = run_as_server(standard_args(state_args(dir)));
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Contains(db) && Contains("empty (0 bytes)"));
  }
  SECTION("a damaged row is named without its raw bytes") {
    REQUIRE(sqlite(db, "UPDATE agents SET id = CAST(X'4bff0142' AS TEXT), args = X'01ff02fe'").empty());
    fs::remove(state + "/agentd.run");  // the edit above is a commit the run record did not see
    auto r = run_as_server(standard_args(state_args(dir)));
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Contains("\\xff"));
    CHECK_FALSE(has_raw_bytes(r.err));
  }
  SECTION("a database this process may not write is not called damaged") {
    // As root every file is writable: run the server as nobody, who owns nothing there.
    const bool root = ::geteuid() == 0;
    if (root && std::system("command -v setpriv > /dev/null") != 0) {
      WARN("setpriv (util-linux) is missing: skipped");
      return;
    }
    if (root) {
      // nobody owns the state dir and may enter the temp dir; only the database is read-only.
      fs::permissions(dir.path(), fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                                      fs::perms::others_read | fs::perms::others_exec);
      REQUIRE(std::system(("chown -R 65534:65534 '" + state + "'").c_str()) == 0);
    }
    fs::permissions(db, fs::perms::owner_read);
    std::vector<std::string> args = standard_args(state_args(dir));
    const std::string err_file = dir.path() + "/err.txt";
    std::string cmd = root ? "setpriv --reuid=65534 --regid=65534 --clear-groups " : "";
    cmd += as_server_path();
    for (const auto& a : args) cmd += " '" + a + "'";
    cmd += " > /dev/null 2> '" + err_file + "'";
    const int status = std::system(cmd.c_str());
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 2);
    const std::string err = read_file(err_file);
    CHECK_THAT(err, Contains("not writable") && Contains("not damaged"));
    CHECK_THAT(err, !Contains("move the directory away"));
    if (!root) fs::permissions(db, fs::perms::owner_read | fs::perms::owner_write);
  }
}

TEST_CASE(
    "a stalled database is logged, calls are acknowledged from the commit log meanwhile, and SIGTERM still "
    "stops within --shutdown-grace",
    "[retry][durability][fault]") {
  TempDir dir;
  auto server = ServerProcess::start(standard_args(state_args(dir, {"--shutdown-grace", "1"})));
  Client c = server->connect();
  auto a = c.create_agent("EchoAgent", "a");
  CHECK(a.reply(Msg("user", "saved")).get().content == "saved");
  // Another process takes the database's write lock and keeps it: the next write to the database
  // waits, as on a disk that stalls.
  detail::SpawnOptions so;
  so.argv = {"sqlite3", dir.path() + "/state/agentd.db"};
  so.in = detail::Redirect::pipe();
  so.out = detail::Redirect::append_to(dir.path() + "/holder.out");
  auto holder = detail::Subprocess::spawn(so);
  const std::string lock = ".timeout 10000\nBEGIN IMMEDIATE;\nSELECT 'locked';\n";
  REQUIRE(::write(holder.stdin_pipe().get(), lock.data(), lock.size()) == static_cast<ssize_t>(lock.size()));
  // It answers once it holds the lock.
  REQUIRE(wait_until(
      [&] { return read_file(dir.path() + "/holder.out").find("locked") != std::string::npos; }, 20s));
  // The call is acknowledged once it is in the commit log; SQLite applies it later.
  CHECK(a.reply(Msg("user", "logged")).get().content == "logged");
  REQUIRE(wait_until([&] { return server->stderr_text().find("has been running for") != std::string::npos; },
                     20s));
  CHECK_THAT(server->stderr_text(), Contains("agentd.db has been running for") &&
                                        Contains("still acknowledged from the commit log"));
  const auto t0 = std::chrono::steady_clock::now();
  const ExitResult r = server->signal_and_wait(SIGTERM, 30s);
  const auto took = std::chrono::steady_clock::now() - t0;
  CHECK(took < 8s);  // the database's own wait (60 s) does not hold the stop
  CHECK_THAT(r.err, Contains("last write has not finished"));
  holder.stdin_pipe() = nullptr;  // the lock goes with the sqlite3 process
  holder.wait_for(10s);
  // The server comes back with every call acknowledged, the one the database never held included.
  auto back = ServerProcess::start(standard_args(state_args(dir)));
  auto mem = back->connect().agent(a.id()).memory();
  REQUIRE(mem.size() == 4);
  CHECK(mem[0].content == "saved");
  CHECK(mem[2].content == "logged");
}

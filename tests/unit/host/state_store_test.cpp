// StateStore (host/state_store.h, state_store_open.cpp) on a temporary directory, with injected
// faults: a full disk (the process's file size limit, which makes SQLite's writes fail with
// EFBIG as a full disk does with ENOSPC), a database or directory this process may not write,
// damaged databases (garbage bytes, a truncated file, an empty file, another program's
// database, a damaged row), the directory lock held by another opener, a run that died (a
// forked child that exits without closing the store), SQLite's write-ahead log lost (what the
// commit log must make up for), the commit log lost too, and a torn commit log record. What is asserted is
// what an operator and a client rely on: every error says what is wrong, with which file, and
// what to do; a failed write is reported to its change and to every later one; nothing that was
// acknowledged is lost, and a refused start leaves the files as they were.
//
// The durability of a real server across kill -9 is tests/integration/durability_test.cpp's
// and retry_safety_test.cpp's; these drive the store directly, without a server.
#include "commit_log.h"
#include "state_store.h"

#include "error_of.h"
#include "server_process.h"  // TempDir
#include "test_names.h"

#include <catch2/catch.hpp>

#include <fcntl.h>
#include <grp.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <optional>
#include <string>
#include <thread>
#include <vector>

using namespace agentd::test;
using agentd::detail::StateStore;
using agentd::test::error_of;
namespace fs = std::filesystem;
namespace detail = agentd::detail;

namespace {

using Change = StateStore::Change;

// The row of a new agent: its args, its own saved state and its memory so far.
Change put_agent(const std::string& id, const std::vector<Msg>& memory = {}) {
  Change c;
  c.kind = Change::Kind::put_agent;
  c.agent_id = id;
  c.name = id + "-name";
  c.class_name = "EchoAgent";
  c.args = detail::encode_value(Value{{"prefix", "p:"}});
  c.has_state = true;
  c.state = detail::encode_value(Value{{"count", 0}});
  for (const auto& m : memory) detail::append_framed(c.memory, detail::encode_msg(m));
  return c;
}

// A call of agent id that added added to its memory (from position from on), changed its state
// to count and finished with reply as the result of call_id.
Change call(const std::string& id, std::int64_t from, const std::vector<Msg>& added, int count,
            const std::string& call_id, const Msg& reply) {
  Change c;
  c.kind = Change::Kind::call;
  c.agent_id = id;
  c.has_state = true;
  c.state = detail::encode_value(Value{{"count", count}});
  c.memory_from = from;
  for (const auto& m : added) detail::append_framed(c.memory, detail::encode_msg(m));
  c.call_id = call_id;
  c.outcome = detail::encode_outcome(detail::Outcome(reply));
  return c;
}

// Submits change and waits for its commit: nullopt when it was committed, else the error its
// done callback was given.
std::optional<Error> commit(StateStore& store, Change change) {
  std::optional<Error> failed;
  bool done = false;
  store.submit(std::move(change), [&](const Error* e) {
    done = true;
    if (e != nullptr) failed = *e;
  });
  store.flush();
  REQUIRE(done);
  return failed;
}

const StateStore::AgentRow* find_agent(const StateStore::Contents& c, const std::string& id) {
  for (const auto& a : c.agents)
    if (a.id == id) return &a;
  return nullptr;
}

std::vector<std::string> texts(const std::vector<Msg>& msgs) {
  std::vector<std::string> out;
  for (const auto& m : msgs) out.push_back(m.text());
  return out;
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

StateStore::Contents load_all(StateStore& store) { return store.load(1000, std::chrono::hours(24)); }

// A state dir holding agent "kept" with memory m0..m(n-1) and the result of call "call-0",
// closed cleanly (the write-ahead log checkpointed into agentd.db).
void make_state(const std::string& dir, int n = 4) {
  StateStore store(dir);
  std::vector<Msg> memory;
  for (int i = 0; i < n; ++i) memory.emplace_back("kept", "m" + std::to_string(i));
  REQUIRE_FALSE(commit(store, put_agent("kept", memory)));
  REQUIRE_FALSE(commit(store, call("kept", n, {Msg("user", "q")}, 1, "call-0", Msg("kept", "a"))));
  store.set_server_id("server-1");
}

// The process's file size limit, lowered for the scope (SIGXFSZ ignored, so a write past it
// fails with EFBIG instead of killing the process). The limit is the whole process's: nothing
// else in this test writes files while it holds.
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    REQUIRE(::getrlimit(RLIMIT_FSIZE, &saved_) == 0);
    old_handler_ = std::signal(SIGXFSZ, SIG_IGN);
    rlimit lowered = saved_;
    lowered.rlim_cur = bytes;
    REQUIRE(::setrlimit(RLIMIT_FSIZE, &lowered) == 0);
  }
  ~FileSizeLimit() {
    ::setrlimit(RLIMIT_FSIZE, &saved_);
    std::signal(SIGXFSZ, old_handler_);
  }
  FileSizeLimit(const FileSizeLimit&) = delete;
  FileSizeLimit& operator=(const FileSizeLimit&) = delete;

 private:
  rlimit saved_{};
  void (*old_handler_)(int) = SIG_DFL;
};

// Opens a StateStore on dir in a child process running as user nobody (as root every file is
// writable, so a permission problem needs another user), and returns what its constructor threw
// ("opened" when it did not throw).
std::string open_as_nobody(const std::string& dir) {
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::close(fds[0]);
    std::string what = "opened";
    if (::setgroups(0, nullptr) != 0 || ::setresgid(65534, 65534, 65534) != 0 ||
        ::setresuid(65534, 65534, 65534) != 0) {
      what = "cannot become nobody";
    } else {
      try {
        StateStore store(dir);
      } catch (const Error& e) {
        what = std::string(agentd::to_string(e.code())) + ": " + e.message();
      } catch (const std::exception& e) {
        what = std::string("not an agentd::Error: ") + e.what();
      }
    }
    (void)!::write(fds[1], what.data(), what.size());
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) out.append(buf, static_cast<std::size_t>(n));
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  CHECK(WIFEXITED(status));
  return out;
}

// Runs body on a store opened on dir in a child process that then dies without closing it (as
// kill -9 would leave it: no checkpoint, the run record not marked clean). Returns body's result.
bool in_child_that_dies(const std::string& dir, const std::function<bool(StateStore&)>& body) {
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    try {
      StateStore store(dir);
      const bool ok = body(store);
      ::_exit(ok ? 0 : 1);  // here: leaving the scope would close the store
    } catch (...) {
    }
    ::_exit(2);
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFEXITED(status));
  return WEXITSTATUS(status) == 0;
}

// A child process commits agent "a" and two calls (call-1 adding "one", call-2 adding second)
// and dies without closing the store.
void two_calls_then_die(const std::string& dir, const std::string& second = "two") {
  REQUIRE(in_child_that_dies(dir, [&](StateStore& store) {
    return !commit(store, put_agent("a")) &&
           !commit(store, call("a", 0, {Msg("user", "one")}, 1, "call-1", Msg("a", "1"))) &&
           !commit(store, call("a", 1, {Msg("user", second)}, 2, "call-2", Msg("a", "2")));
  }));
}

// What the start of a store on dir says: "opened" or its error's message.
std::string open_result(const std::string& dir) {
  try {
    StateStore store(dir);
  } catch (const Error& e) {
    return e.message();
  }
  return "opened";
}

// sqlite3's command-line shell on db (installed by scripts/setup.sh); its output. (Its close
// checkpoints the write-ahead log into the file.)
std::string sqlite(const std::string& db, const std::string& sql) {
  TempDir out_dir;
  const std::string out = out_dir.path() + "/out";
  const int rc = std::system(("sqlite3 '" + db + "' \"" + sql + "\" > '" + out + "' 2>&1").c_str());
  std::string text = read_bytes(out);
  INFO(text);
  REQUIRE(rc == 0);
  while (!text.empty() && text.back() == '\n') text.pop_back();
  return text;
}

}  // namespace

TEST_CASE("the state store keeps what it acknowledged: agents, memory, state, results, server id",
          "[host][state_store]") {
  TempDir tmp;
  const std::string dir = tmp.path() + "/state";
  std::vector<std::string> done_order;
  {
    StateStore store(dir);
    CHECK(store.file() == dir + "/agentd.db");
    CHECK(fs::exists(store.file()));
    // The directory is created private: it holds every agent's memory.
    struct stat st {};
    REQUIRE(::stat(dir.c_str(), &st) == 0);
    CHECK((st.st_mode & 0777) == 0700);
    CHECK(store.server_id().empty());
    store.set_server_id("server-1");

    // Queued from this thread, committed by the writer: each done runs once, in order, with no
    // error.
    for (const char* id : {"a", "b", "gone"})
      store.submit(put_agent(id, {Msg("user", std::string("hello ") + id)}),
                   [&done_order, id](const Error* e) {
                     done_order.push_back(std::string(id) + (e ? " failed" : ""));
                   });
    store.submit(call("a", 1, {Msg("user", "q1"), Msg("a", "r1")}, 1, "call-1", Msg("a", "r1")),
                 [&done_order](const Error* e) { done_order.push_back(e ? "call-1 failed" : "call-1"); });
    Change del;
    del.kind = Change::Kind::delete_agent;
    del.agent_id = "gone";
    store.submit(std::move(del),
                 [&done_order](const Error* e) { done_order.push_back(e ? "delete failed" : "delete"); });
    store.flush();
    CHECK(done_order == std::vector<std::string>{"a", "b", "gone", "call-1", "delete"});
    CHECK_FALSE(store.failure());
    auto stats = store.stats();
    CHECK(stats.commits >= 1);
    CHECK(stats.changes == 5);
    CHECK(stats.error.empty());
    CHECK(stats.bytes > 0);
  }  // closed: the next open is a clean restart

  StateStore again(dir);
  CHECK(again.server_id() == "server-1");
  auto c = load_all(again);
  REQUIRE(c.agents.size() == 2);
  CHECK(c.agents[0].id == "a");  // creation order
  CHECK(c.agents[1].id == "b");
  CHECK(find_agent(c, "gone") == nullptr);
  const auto& a = c.agents[0];
  CHECK(a.name == "a-name");
  CHECK(a.class_name == "EchoAgent");
  CHECK(a.args == Value{{"prefix", "p:"}});
  CHECK(a.state == Value{{"count", 1}});
  CHECK(texts(a.memory) == std::vector<std::string>{"hello a", "q1", "r1"});
  CHECK(texts(c.agents[1].memory) == std::vector<std::string>{"hello b"});
  REQUIRE(c.results.size() == 1);
  CHECK(c.results[0].call_id == "call-1");
  CHECK(c.results[0].agent_id == "a");
  REQUIRE(std::holds_alternative<Msg>(*c.results[0].outcome));
  CHECK(std::get<Msg>(*c.results[0].outcome).text() == "r1");
  CHECK(c.forgotten_until_unix_ms == 0);  // nothing was ever trimmed
}

TEST_CASE(
    "a full disk fails the commit not_applied, fails every later change, and loses nothing "
    "acknowledged",
    "[host][state_store][fault]") {
  TempDir tmp;
  const std::string dir = tmp.path() + "/state";
  const std::string db = dir + "/agentd.db";
  const std::string big(256 << 10, 'z');  // a few of these pass any limit set below
  int acknowledged = 0;
  std::optional<Error> failed;
  {
    StateStore store(dir);
    REQUIRE_FALSE(commit(store, put_agent("a")));
    std::uintmax_t size = 0;
    for (const char* suffix : {"", "-wal"}) {
      std::error_code ec;
      const auto n = fs::file_size(db + suffix, ec);
      if (!ec) size = std::max(size, n);
    }
    {
      FileSizeLimit limit(size + (64 << 10));
      for (int i = 0; i < 50 && !failed; ++i) {
        failed = commit(store, call("a", i, {Msg("user", big + std::to_string(i))}, i + 1,
                                    "call-" + std::to_string(i), Msg("a", "ok")));
        if (!failed) ++acknowledged;
      }
      REQUIRE(failed);
      CHECK(failed->code() == ErrorCode::not_applied);
      CHECK(failed->retryable());
      // What failed, where, and what to do.
      CHECK_THAT(failed->message(), Contains("could not save agent state to " + db) &&
                                        Contains("not applied") &&
                                        Contains("Everything acknowledged before is kept") &&
                                        Contains("free space") && Contains("restart"));

      // The failure is on record: a later change fails at once, on this thread, with the same
      // error, even a small one that would fit.
      std::optional<Error> later;
      std::optional<std::thread::id> ran_on;
      Change small = put_agent("small");
      store.submit(std::move(small), [&](const Error* e) {
        ran_on = std::this_thread::get_id();
        if (e) later = *e;
      });
      REQUIRE(ran_on);
      CHECK(*ran_on == std::this_thread::get_id());
      REQUIRE(later);
      CHECK(later->code() == ErrorCode::not_applied);
      CHECK(later->message() == failed->message());
      REQUIRE(store.failure());
      CHECK(store.failure()->message() == failed->message());
      CHECK(store.stats().error == failed->message());
    }
  }  // closed with the limit lifted

  // Reopened: every acknowledged call is there, in order, and neither the failed one nor the
  // change after it.
  StateStore again(dir);
  auto c = load_all(again);
  REQUIRE(c.agents.size() == 1);
  CHECK(find_agent(c, "small") == nullptr);
  const auto& a = c.agents[0];
  REQUIRE(a.memory.size() == static_cast<std::size_t>(acknowledged));
  for (int i = 0; i < acknowledged; ++i) CHECK(a.memory[i].text() == big + std::to_string(i));
  CHECK(a.state == Value{{"count", acknowledged}});
  CHECK(c.results.size() == static_cast<std::size_t>(acknowledged));
  for (const auto& r : c.results) CHECK(r.call_id != "call-" + std::to_string(acknowledged));
  // And the store writes again once the disk has room.
  CHECK_FALSE(commit(again, put_agent("after")));
}

TEST_CASE(
    "a state dir this process may not write is refused as a permission problem, not as "
    "damage",
    "[host][state_store][fault]") {
  TempDir tmp;
  const std::string dir = tmp.path() + "/state";
  const std::string db = dir + "/agentd.db";
  make_state(dir);
  const std::string before = read_bytes(db);
  const bool root = ::geteuid() == 0;
  // Opens dir as a user the mode bits apply to: nobody when this is root, else this process.
  auto refused = [&]() -> std::string {
    if (root) return open_as_nobody(dir);
    try {
      StateStore store(dir);
    } catch (const Error& e) {
      return std::string(agentd::to_string(e.code())) + ": " + e.message();
    }
    return "opened";
  };
  if (root) {
    // nobody may enter the temporary directory; the state dir is its own.
    fs::permissions(tmp.path(), fs::perms::owner_all | fs::perms::others_exec);
    REQUIRE(::chown(dir.c_str(), 65534, 65534) == 0);
    for (const auto& e : fs::directory_iterator(dir)) REQUIRE(::chown(e.path().c_str(), 65534, 65534) == 0);
  }

  SECTION("a read-only database file") {
    fs::permissions(db, fs::perms::owner_read);
    const std::string what = refused();
    CHECK_THAT(what, Catch::StartsWith("config_error"));
    CHECK_THAT(what, Contains("--state-dir " + dir) && Contains(db + " is not writable") &&
                         Contains("mode 0400") && Contains("Make it writable") && Contains("not damaged"));
    CHECK_THAT(what, !Contains("backup") && !Contains("move the directory away"));
    fs::permissions(db, fs::perms::owner_read | fs::perms::owner_write);
  }
  SECTION("a read-only directory") {
    fs::permissions(dir, fs::perms::owner_read | fs::perms::owner_exec);
    const std::string what = refused();
    CHECK_THAT(what, Catch::StartsWith("config_error"));
    CHECK_THAT(what, Contains(dir + " is not writable") && Contains("not damaged"));
    CHECK_THAT(what, !Contains("backup"));
    fs::permissions(dir, fs::perms::owner_all);
  }
  // Untouched, and whole once access is fixed.
  CHECK(read_bytes(db) == before);
  if (root) REQUIRE(::chown(dir.c_str(), 0, 0) == 0);
  StateStore store(dir);
  auto c = load_all(store);
  REQUIRE(c.agents.size() == 1);
  CHECK(c.agents[0].memory.size() == 5);
}

TEST_CASE("a damaged database is refused naming the file and what to do, and is left as it was",
          "[host][state_store][fault]") {
  TempDir tmp;
  const std::string dir = tmp.path() + "/state";
  const std::string db = dir + "/agentd.db";
  make_state(dir, 200);                    // many pages, so half the file is a real loss
  REQUIRE_FALSE(fs::exists(db + "-wal"));  // a clean close checkpointed everything into db
  const std::string whole = read_bytes(db);
  REQUIRE(whole.size() > 16 * 4096);

  // Whatever refuses it (the open or the load), the error names the file and says what to do.
  auto refusal = [&]() -> Error {
    return error_of([&] {
      StateStore store(dir);
      load_all(store);
    });
  };

  SECTION("garbage bytes") {
    std::string garbage(8192, '\0');
    for (std::size_t i = 0; i < garbage.size(); ++i) garbage[i] = static_cast<char>(i * 7 + 3);
    write_bytes(db, garbage);
    Error e = refusal();
    CHECK(e.code() == ErrorCode::config_error);
    CHECK_THAT(e.message(), Contains(db) && Contains("cannot open the state database") &&
                                Contains("restore it from a backup"));
    CHECK(read_bytes(db) == garbage);  // nothing written over it
  }
  SECTION("an empty (0-byte) file") {
    write_bytes(db, "");
    Error e = refusal();
    CHECK(e.code() == ErrorCode::config_error);
    CHECK_THAT(e.message(),
               Contains(db) && Contains("empty (0 bytes)") && Contains("restore it from a backup"));
    CHECK(fs::exists(db));
    CHECK(fs::file_size(db) == 0);
  }
  SECTION("a truncated file") {
    const std::string half = whole.substr(0, whole.size() / 2);
    write_bytes(db, half);
    Error e = refusal();
    CHECK(e.code() == ErrorCode::config_error);
    CHECK_THAT(e.message(), Contains(db) && Contains("restore it from a backup"));
    CHECK(read_bytes(db) == half);
  }
  SECTION("another program's SQLite database") {
    fs::remove(db);
    fs::remove(dir + "/agentd.run");
    REQUIRE(std::system(("sqlite3 '" + db + "' 'CREATE TABLE notes (x)'").c_str()) == 0);
    const std::string theirs = read_bytes(db);
    Error e = refusal();
    CHECK(e.code() == ErrorCode::config_error);
    CHECK_THAT(e.message(),
               Contains(db) && Contains("not an agentd state store") && Contains("another --state-dir"));
    CHECK(read_bytes(db) == theirs);
  }
  SECTION("a damaged row is named, its raw bytes are not") {
    REQUIRE(std::system(("sqlite3 '" + db +
                         "' \"UPDATE agents SET args = X'01ff02fe' WHERE id = "
                         "'kept'\"")
                            .c_str()) == 0);
    fs::remove(dir + "/agentd.run");  // the edit is a commit the run record did not see
    Error e = refusal();
    CHECK(e.code() == ErrorCode::config_error);
    CHECK_THAT(e.message(),
               Contains(db) && Contains("cannot read agent 'kept'") && Contains("restore it from a backup"));
  }
}

TEST_CASE(
    "a state dir is used by one store at a time: a second opener is refused and the first "
    "goes on",
    "[host][state_store][fault]") {
  TempDir tmp;
  const std::string dir = tmp.path() + "/state";
  auto first = std::make_unique<StateStore>(dir);
  REQUIRE_FALSE(commit(*first, put_agent("a")));

  auto check_refused = [&](const std::string& path) {
    Error e = error_of([&] { StateStore second(path); });
    CHECK(e.code() == ErrorCode::config_error);
    CHECK_THAT(e.message(), Contains("--state-dir " + path) &&
                                Contains("another as_server is using this state dir") &&
                                Contains("give each server its own --state-dir"));
  };
  check_refused(dir);
  // The lock is on the directory: another path to it is the same state dir.
  fs::create_directory_symlink(dir, tmp.path() + "/alias");
  check_refused(tmp.path() + "/alias");

  // The refusals changed nothing for the first store.
  CHECK_FALSE(first->failure());
  REQUIRE_FALSE(commit(*first, put_agent("b")));
  first.reset();

  // Any other holder of the lock (e.g. another process) keeps a store out the same way.
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  REQUIRE(fd >= 0);
  REQUIRE(::flock(fd, LOCK_EX | LOCK_NB) == 0);
  check_refused(dir);
  ::close(fd);

  // Released: the next store opens and finds both agents.
  StateStore next(dir);
  CHECK(load_all(next).agents.size() == 2);
}

TEST_CASE(
    "after a run that died, the calls it was running come back interrupted and the "
    "acknowledged ones are kept",
    "[host][state_store][fault]") {
  TempDir tmp;
  const std::string dir = tmp.path() + "/state";
  const std::string db = dir + "/agentd.db";
  // A child process opens the store, commits two calls, starts a third and dies.
  REQUIRE(in_child_that_dies(dir, [](StateStore& store) {
    bool ok = !commit(store, put_agent("a")) &&
              !commit(store, call("a", 0, {Msg("user", "one")}, 1, "call-1", Msg("a", "1"))) &&
              !commit(store, call("a", 1, {Msg("user", "two")}, 2, "call-2", Msg("a", "2")));
    store.journal().begin("call-3", "a");
    return ok;
  }));
  REQUIRE(fs::exists(db + "-wal"));  // the last commits are in the write-ahead log only

  SECTION("a restart restores them") {
    StateStore store(dir);
    auto c = load_all(store);
    REQUIRE(c.agents.size() == 1);
    CHECK(texts(c.agents[0].memory) == std::vector<std::string>{"one", "two"});
    CHECK(c.agents[0].state == Value{{"count", 2}});
    std::optional<Error> interrupted;
    std::vector<std::string> ids;
    for (const auto& r : c.results) {
      ids.push_back(r.call_id);
      if (r.call_id == "call-3") interrupted = std::get<Error>(*r.outcome);
    }
    CHECK(ids == std::vector<std::string>{"call-1", "call-2", "call-3"});
    REQUIRE(interrupted);
    CHECK(interrupted->code() == ErrorCode::interrupted);
    CHECK_FALSE(interrupted->retryable());
    CHECK(interrupted->agent_id() == "a");
    CHECK_THAT(interrupted->message(),
               Contains("call call-3 was running") && Contains("not safe to retry blindly"));
  }
  SECTION(
      "without its write-ahead log (SQLite's commits since the last checkpoint lost), the commit log "
      "restores them") {
    fs::remove(db + "-wal");
    fs::remove(db + "-shm");
    StateStore store(dir);
    auto c = load_all(store);
    REQUIRE(c.agents.size() == 1);
    CHECK(texts(c.agents[0].memory) == std::vector<std::string>{"one", "two"});
    CHECK(c.agents[0].state == Value{{"count", 2}});
    REQUIRE(c.results.size() == 3);
    CHECK(c.results[0].call_id == "call-1");
    CHECK(c.results[1].call_id == "call-2");
  }
  SECTION("without the write-ahead log and the commit log the start is refused, naming what is missing") {
    fs::remove(db + "-wal");
    fs::remove(db + "-shm");
    fs::remove(dir + "/agentd.redo");
    Error e = error_of([&] { StateStore store(dir); });
    CHECK(e.code() == ErrorCode::config_error);
    CHECK_THAT(e.message(), Contains(db) && Contains("acknowledged commit(s) are missing") &&
                                Contains(dir + "/agentd.redo") && Contains(db + "-wal") &&
                                Contains(dir + "/agentd.run"));
  }
}

// The commit log is a ring whose space is reused once a checkpoint has synced the database: a
// log much smaller than what is written wraps many times, and a start still finds every
// acknowledged commit in the database file or the log, even when SQLite lost everything since
// its last checkpoint.
TEST_CASE("the commit log wraps, and a start replays what the database lacks", "[host][state_store][fault]") {
  TempDir tmp;
  const std::string dir = tmp.path() + "/state";
  const std::string db = dir + "/agentd.db";
  constexpr int kCalls = 120;
  const std::string filler(1500, 'f');
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    bool ok = false;
    try {
      StateStore store(dir, 32 << 10);  // about 20 calls fill it
      ok = !commit(store, put_agent("a"));
      // Four at a time, waiting for their acknowledgement only: the log may fill before SQLite
      // has applied and checkpointed, and the writer then waits for room.
      std::atomic<int> done{0};
      std::atomic<int> failed{0};
      for (int i = 0; i < kCalls; ++i) {
        store.submit(call("a", i, {Msg("user", filler + std::to_string(i))}, i + 1,
                          "call-" + std::to_string(i), Msg("a", std::to_string(i))),
                     [&](const Error* e) {
                       if (e != nullptr) ++failed;
                       ++done;
                     });
        if (i % 4 == 3)
          while (done.load() < i + 1) std::this_thread::sleep_for(std::chrono::microseconds(100));
      }
      store.flush();
      ok = ok && failed.load() == 0;
    } catch (...) {
    }
    ::_exit(ok ? 0 : 1);  // dies without closing the store
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
  CHECK(fs::file_size(dir + "/agentd.redo") == (32u << 10));  // reused, never grown

  auto check_all = [&] {
    StateStore store(dir);
    auto c = load_all(store);
    REQUIRE(c.agents.size() == 1);
    REQUIRE(c.agents[0].memory.size() == static_cast<std::size_t>(kCalls));
    for (int i = 0; i < kCalls; ++i) CHECK(c.agents[0].memory[i].text() == filler + std::to_string(i));
    CHECK(c.agents[0].state == Value{{"count", kCalls}});
    CHECK(c.results.size() == static_cast<std::size_t>(kCalls));
  };
  SECTION("with SQLite's write-ahead log") { check_all(); }
  SECTION("without it: the database file holds what the last checkpoint synced, the log the rest") {
    fs::remove(db + "-wal");
    fs::remove(db + "-shm");
    check_all();
  }
}

// A crash while a record is being written leaves it torn: it was never acknowledged, and the
// replay stops before it (the checksum), keeping what came before.
TEST_CASE("a torn commit log record ends the replay, and what came before is kept",
          "[host][state_store][fault]") {
  TempDir tmp;
  const std::string dir = tmp.path() + "/state";
  const std::string db = dir + "/agentd.db";
  two_calls_then_die(dir, "two-" + std::string(100, 'x'));
  fs::remove(db + "-wal");  // only the log has the three commits
  fs::remove(db + "-shm");
  std::string log = read_bytes(dir + "/agentd.redo");
  const auto at = log.find("two-xxxx");
  REQUIRE(at != std::string::npos);
  log[at + 20] = 'y';  // call-2's record, torn
  write_bytes(dir + "/agentd.redo", log);

  SECTION("the run journal counted call-2 acknowledged: refused") {
    CHECK_THAT(open_result(dir), Contains("1 acknowledged commit(s) are missing"));
  }
  SECTION("without the journal (a write never acknowledged): the commits before it") {
    fs::remove(dir + "/agentd.run");
    StateStore store(dir);
    auto c = load_all(store);
    REQUIRE(c.agents.size() == 1);
    CHECK(texts(c.agents[0].memory) == std::vector<std::string>{"one"});
    REQUIRE(c.results.size() == 1);
    CHECK(c.results[0].call_id == "call-1");
  }
}

// A record whose checksum matches but whose contents are no batch (written by another version,
// or damaged in a way no crash does) is not skipped: the start is refused, naming the log and
// the commit, and what to do.
TEST_CASE("a commit log record that cannot be read refuses the start and names it",
          "[host][state_store][fault]") {
  TempDir tmp;
  const std::string dir = tmp.path() + "/state";
  const std::string db = dir + "/agentd.db";
  two_calls_then_die(dir);
  fs::remove(db + "-wal");  // only the log has the three commits
  fs::remove(db + "-shm");
  const std::uint64_t gen = std::stoull(sqlite(db, "SELECT value FROM meta WHERE key = 'redo_gen'"));
  const std::uint64_t offset = std::stoull(sqlite(db, "SELECT value FROM meta WHERE key = 'redo_offset'"));
  const std::uint64_t seq = std::stoull(sqlite(db, "SELECT value FROM meta WHERE key = 'commit_seq'"));
  {
    const int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    REQUIRE(dir_fd >= 0);
    detail::CommitLog log(dir + "/agentd.redo", dir_fd);
    const auto records = log.read_from(gen, offset, seq + 1);
    REQUIRE(records.size() == 3);
    log.restart(gen);
    log.append(records[0].end, records[1].seq, "not a batch of changes");  // a valid checksum
    ::close(dir_fd);
  }
  const std::string why = open_result(dir);
  CHECK_THAT(why, Contains(dir + "/agentd.redo: commit " + std::to_string(seq + 2) + " cannot be read"));
  CHECK_THAT(why, Contains("restore the state dir from a backup"));
}

// A worker finishing a durable call on an idle store commits it itself (no hop to the writer
// thread and back): what a program waiting on each durable call saves. The writer must leave a
// led change alone, changes submitted meanwhile join its transaction, and a lead passed back
// goes to the writer.
TEST_CASE("a change led by the thread that submitted it is committed there, with what came meanwhile",
          "[host][state_store]") {
  TempDir tmp;
  const std::string dir = tmp.path() + "/state";
  const auto me = std::this_thread::get_id();
  {
    StateStore store(dir);
    REQUIRE(commit(store, put_agent("a")) == std::nullopt);
    const auto commits_before = store.stats().commits;
    std::vector<std::string> done;
    std::vector<std::thread::id> ran_on;
    auto record = [&](const char* name) {
      return [&, name](const Error* e) {
        done.push_back(std::string(name) + (e != nullptr ? " failed" : ""));
        ran_on.push_back(std::this_thread::get_id());
      };
    };
    REQUIRE(store.submit_to_lead(call("a", 0, {Msg("user", "q1")}, 1, "call-1", Msg("a", "r1")),
                                 record("call-1")));
    // A commit is pending: the next change is queued behind it, not led.
    CHECK_FALSE(store.submit_to_lead(call("a", 1, {Msg("user", "q2")}, 2, "call-2", Msg("a", "r2")),
                                     record("call-2")));
    CHECK_FALSE(store.flush_for(std::chrono::milliseconds(100)));  // the writer left both alone
    CHECK(done.empty());
    store.lead();
    CHECK(done == std::vector<std::string>{"call-1", "call-2"});
    CHECK(ran_on == std::vector<std::thread::id>{me, me});
    CHECK(store.stats().commits == commits_before + 1);  // one transaction for both

    REQUIRE(store.submit_to_lead(call("a", 2, {Msg("user", "q3")}, 3, "call-3", Msg("a", "r3")),
                                 record("call-3")));
    store.pass_lead();
    store.flush();
    REQUIRE(done.size() == 3);
    CHECK(done[2] == "call-3");
    CHECK(ran_on[2] != me);  // the writer's
  }
  StateStore again(dir);
  auto c = load_all(again);
  REQUIRE(c.agents.size() == 1);
  CHECK(texts(c.agents[0].memory) == std::vector<std::string>{"q1", "q2", "q3"});
  CHECK(c.agents[0].state == Value{{"count", 3}});
  REQUIRE(c.results.size() == 3);
  CHECK(c.results[0].call_id == "call-1");
  CHECK(c.results[2].call_id == "call-3");
}

TEST_CASE("a saved outcome keeps the call's usage", "[state_store]") {
  detail::Outcome o = Msg("a", "reply");
  o.usage = agentd::CallUsage{3, 120, 45};
  const detail::Outcome back = detail::decode_outcome(detail::encode_outcome(o));
  CHECK(std::get<Msg>(back).text() == "reply");
  CHECK(back.usage == o.usage);
  detail::Outcome failed = Error(ErrorCode::agent_failed, "broke");
  failed.usage = agentd::CallUsage{1, 7, 0};
  CHECK(detail::decode_outcome(detail::encode_outcome(failed)).usage == failed.usage);
  // Saved before the field existed (or with no model use): zeros.
  CHECK(detail::decode_outcome(detail::encode_outcome(detail::Outcome(Msg("a", "x")))).usage.empty());
}

// The store keeps what the result pool keeps (--max-pool-size, --max-expire-time): the server
// trims it about once a second while results are written. Results go oldest first, and a trim
// reads only the rows it removes and the first it keeps (a scan of the table would read every
// outcome each time; that is measured, not asserted here). A client that asks after a removed
// call is told "cannot tell" up to the newest finishing time removed.
TEST_CASE("a trim removes the oldest results, by count and by age, and moves the forgotten horizon",
          "[host][state_store]") {
  TempDir tmp;
  const std::string dir = tmp.path() + "/state";
  const std::string db = dir + "/agentd.db";
  auto call_n = [](int n) {
    return call("a", 2 * (n - 1), {Msg("user", "q"), Msg("a", "r")}, n, "call-" + std::to_string(n),
                Msg("a", "r" + std::to_string(n)));
  };
  auto ids = [&] {
    return sqlite(db, "SELECT group_concat(call_id, ',') FROM (SELECT call_id FROM results ORDER BY seq)");
  };
  auto forgotten = [&] { return sqlite(db, "SELECT value FROM meta WHERE key = 'forgotten_until_ms'"); };
  {
    StateStore store(dir);
    REQUIRE_FALSE(commit(store, put_agent("a")));
    for (int n = 1; n <= 6; ++n) REQUIRE_FALSE(commit(store, call_n(n)));
  }
  // call-1 and call-2 finished long ago; call-4 too, but after call-3 was written (the clock was
  // set back in between), so it is behind a result young enough to keep.
  sqlite(db,
         "UPDATE results SET finished_ms = 2000 WHERE call_id = 'call-1'; "
         "UPDATE results SET finished_ms = 3000 WHERE call_id = 'call-2'; "
         "UPDATE results SET finished_ms = 1000 WHERE call_id = 'call-4'");
  {
    StateStore store(dir);
    REQUIRE_FALSE(commit(store, call_n(7)));  // a trim waits for a result written since the last
    store.trim_results(100, std::chrono::hours(1));
    // flush() waits for changes, not for a trim: a change queued after it commits with it or
    // after it.
    REQUIRE_FALSE(commit(store, Change{}));
  }
  CHECK(ids() == "call-3,call-4,call-5,call-6,call-7");
  CHECK(forgotten() == "3000");  // the newest finishing time removed
  const std::string newest_removed = sqlite(
      db, "SELECT max(finished_ms) FROM results WHERE call_id IN ('call-3', 'call-4', 'call-5', 'call-6')");
  {
    StateStore store(dir);
    REQUIRE_FALSE(commit(store, call_n(8)));
    store.trim_results(2, std::chrono::hours(24));  // by count: the newest two stay
    REQUIRE_FALSE(commit(store, Change{}));
    // Nothing more to remove: the next trim, committed alone as the store closes, writes
    // nothing (and counts no commit, or the next start would find commits missing).
    REQUIRE_FALSE(commit(store, call_n(9)));
    store.trim_results(3, std::chrono::hours(24));
  }
  CHECK(ids() == "call-7,call-8,call-9");
  CHECK(forgotten() == newest_removed);
  // Every commit is still counted (a trim that removed rows wrote the count to meta).
  CHECK(open_result(dir) == "opened");
  StateStore store(dir);
  const auto c = store.load(1000, std::chrono::hours(24));
  REQUIRE(c.results.size() == 3);
  CHECK(c.results[0].call_id == "call-7");
  CHECK(std::to_string(c.forgotten_until_unix_ms) == newest_removed);
}

// The database keeps the number of its last applied commit in meta (format 2 kept it on the
// newest result row, a start reads both); a start must count every acknowledged commit, or it
// would refuse the state dir as having lost commits.
TEST_CASE("a start counts every commit the last run acknowledged, wherever its number was kept",
          "[host][state_store][fault]") {
  TempDir tmp;
  const std::string dir = tmp.path() + "/state";
  const std::string db = dir + "/agentd.db";
  two_calls_then_die(dir);
  REQUIRE(fs::exists(db + "-wal"));

  SECTION("counted") { CHECK(open_result(dir) == "opened"); }
  SECTION("meta holds the last applied commit") {
    CHECK(sqlite(db, "SELECT value FROM meta WHERE key = 'commit_seq'") == "3");
    CHECK(open_result(dir) == "opened");
  }
  SECTION("then a start that recorded an interrupted call, and died") {
    REQUIRE(in_child_that_dies(dir, [](StateStore& store) {
      store.journal().begin("call-3", "a");
      return true;
    }));
    REQUIRE(in_child_that_dies(dir, [](StateStore&) { return true; }));  // records call-3
    CHECK(open_result(dir) == "opened");
    StateStore store(dir);
    CHECK(load_all(store).results.size() == 3);
  }
  SECTION("then a trim that removed every result row, and a death") {
    REQUIRE(in_child_that_dies(dir, [](StateStore& store) {
      const bool ok = !commit(store, call("a", 2, {Msg("user", "three")}, 3, "call-3", Msg("a", "3")));
      store.trim_results(0, std::chrono::hours(24));
      return ok && store.flush_for(std::chrono::seconds(30));
    }));
    REQUIRE(sqlite(db, "SELECT count(*) FROM results") == "0");
    CHECK(open_result(dir) == "opened");
  }
  SECTION("a database of format 2, its count on the newest result row") {
    sqlite(db,
           "UPDATE meta SET value = '2' WHERE key = 'format'; UPDATE meta SET value = '1' WHERE key = "
           "'commit_seq'; DELETE FROM meta WHERE key IN ('redo_gen', 'redo_offset'); UPDATE results SET "
           "commit_seq = 3 WHERE call_id = 'call-2'");
    CHECK(open_result(dir) == "opened");
    CHECK(sqlite(db, "SELECT value FROM meta WHERE key = 'format'") == std::to_string(StateStore::kFormat));
    CHECK(sqlite(db, "SELECT value FROM meta WHERE key = 'commit_seq'") == "3");
  }
}

TEST_CASE("a state dir of format 1 is upgraded in place and keeps everything", "[host][state_store]") {
  TempDir tmp;
  const std::string dir = tmp.path() + "/state";
  const std::string db = dir + "/agentd.db";
  make_state(dir);
  // As format 1 left it: no results.commit_seq, the counter in meta (two commits).
  sqlite(db,
         "ALTER TABLE results DROP COLUMN commit_seq; UPDATE meta SET value = '1' WHERE key = 'format'; "
         "INSERT OR REPLACE INTO meta (key, value) VALUES ('commit_seq', '2')");
  REQUIRE(in_child_that_dies(dir, [](StateStore& store) {
    auto c = load_all(store);
    return c.agents.size() == 1 && c.agents[0].memory.size() == 5 && c.results.size() == 1 &&
           !commit(store, call("kept", 5, {Msg("user", "after")}, 2, "call-1", Msg("kept", "b")));
  }));
  CHECK(sqlite(db, "SELECT value FROM meta WHERE key = 'format'") == std::to_string(StateStore::kFormat));
  CHECK(sqlite(db, "SELECT value FROM meta WHERE key = 'commit_seq'") == "3");
  StateStore store(dir);
  auto c = load_all(store);
  REQUIRE(c.agents.size() == 1);
  CHECK(c.agents[0].memory.size() == 6);
  CHECK(c.results.size() == 2);
}

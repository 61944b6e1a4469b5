#include "state_store.h"

#include "crash_report.h"
#include "value_codec.h"
#include "wire_limits.h"

#include <agentd/version.h>

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sqlite3.h>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <unordered_map>
#include <unordered_set>

namespace agentd::detail {

// ---- the stored forms ----

namespace {

template <typename Fill>
std::string flat(Fill&& fill) {
  capnp::MallocMessageBuilder message;
  fill(message);
  auto words = capnp::messageToFlatArray(message);
  auto bytes = words.asBytes();
  return std::string(reinterpret_cast<const char*>(bytes.begin()), bytes.size());
}

// Reads bytes as one flat message (copied: SQLite's blobs need not be word-aligned).
class FlatReader {
 public:
  explicit FlatReader(std::string_view bytes)
      : words_(kj::heapArray<capnp::word>((bytes.size() + sizeof(capnp::word) - 1) /
                                          sizeof(capnp::word))) {
    if (bytes.size() % sizeof(capnp::word) != 0 || bytes.empty())
      throw std::runtime_error("not a whole Cap'n Proto message");
    std::memcpy(words_.begin(), bytes.data(), bytes.size());
    capnp::ReaderOptions options = wire_reader_options();  // any value within kMaxValueDepth
    options.traversalLimitInWords = words_.size() * 2 + 1024;
    reader_.emplace(words_.asPtr(), options);
  }
  template <typename T>
  typename T::Reader root() {
    return reader_->getRoot<T>();
  }

 private:
  kj::Array<capnp::word> words_;
  std::optional<capnp::FlatArrayMessageReader> reader_;
};

template <typename T, typename F>
auto decode(std::string_view bytes, F&& read) {
  try {
    FlatReader r(bytes);
    return read(r.root<T>());
  } catch (const kj::Exception& e) {
    throw std::runtime_error(e.getDescription().cStr());
  }
}

}  // namespace

std::string encode_value(const Value& v) {
  return flat([&](capnp::MessageBuilder& m) { write_value(v, m.initRoot<wire::Value>()); });
}

Value decode_value(std::string_view bytes) {
  return decode<wire::Value>(bytes, [](wire::Value::Reader r) { return read_value(r); });
}

std::string encode_msg(const Msg& msg) {
  return flat([&](capnp::MessageBuilder& m) { write_msg(msg, m.initRoot<wire::Msg>()); });
}

Msg decode_msg(std::string_view bytes) {
  return decode<wire::Msg>(bytes, [](wire::Msg::Reader r) { return read_msg(r); });
}

std::string encode_outcome(const Outcome& o) {
  return flat([&](capnp::MessageBuilder& m) {
    auto out = m.initRoot<wire::Outcome>();
    if (const Msg* msg = std::get_if<Msg>(&o))
      write_msg(*msg, out.initMsg());
    else
      write_error(std::get<Error>(o), out.initError());
  });
}

Outcome decode_outcome(std::string_view bytes) {
  return decode<wire::Outcome>(bytes, [](wire::Outcome::Reader r) -> Outcome {
    switch (r.which()) {
      case wire::Outcome::MSG: return read_msg(r.getMsg());
      case wire::Outcome::ERROR: return read_error(r.getError());
      default: throw std::runtime_error("a stored outcome is neither a message nor an error");
    }
  });
}

void append_framed(std::string& blob, std::string_view item) {
  const auto n = static_cast<std::uint32_t>(item.size());
  const char len[4] = {static_cast<char>(n & 0xff), static_cast<char>((n >> 8) & 0xff),
                       static_cast<char>((n >> 16) & 0xff), static_cast<char>((n >> 24) & 0xff)};
  blob.append(len, 4);
  blob.append(item);
}

std::vector<std::string_view> split_framed(std::string_view blob) {
  std::vector<std::string_view> out;
  while (!blob.empty()) {
    if (blob.size() < 4) throw std::runtime_error("a truncated memory frame");
    const auto* b = reinterpret_cast<const unsigned char*>(blob.data());
    const std::size_t n = b[0] | (b[1] << 8) | (b[2] << 16) | (static_cast<std::size_t>(b[3]) << 24);
    if (blob.size() - 4 < n) throw std::runtime_error("a truncated memory frame");
    out.push_back(blob.substr(4, n));
    blob.remove_prefix(4 + n);
  }
  return out;
}

// ---- SQLite ----

namespace {

std::int64_t now_unix_ms() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
}

// A prepared statement, reset after each use.
class Stmt {
 public:
  Stmt(sqlite3* db, const char* sql) : db_(db) {
    if (sqlite3_prepare_v3(db, sql, -1, SQLITE_PREPARE_PERSISTENT, &st_, nullptr) != SQLITE_OK)
      throw std::runtime_error(fmt::format("{} (preparing: {})", sqlite3_errmsg(db), sql));
  }
  ~Stmt() { sqlite3_finalize(st_); }
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;

  Stmt& text(int i, std::string_view s) {
    check(sqlite3_bind_text(st_, i, s.data(), static_cast<int>(s.size()), SQLITE_STATIC));
    return *this;
  }
  Stmt& blob(int i, std::string_view s) {
    check(sqlite3_bind_blob(st_, i, s.data(), static_cast<int>(s.size()), SQLITE_STATIC));
    return *this;
  }
  Stmt& null(int i) {
    check(sqlite3_bind_null(st_, i));
    return *this;
  }
  Stmt& integer(int i, std::int64_t v) {
    check(sqlite3_bind_int64(st_, i, v));
    return *this;
  }
  // Runs a statement that returns no rows.
  void run() {
    int rc = sqlite3_step(st_);
    sqlite3_reset(st_);
    sqlite3_clear_bindings(st_);
    if (rc != SQLITE_DONE) throw std::runtime_error(sqlite3_errmsg(db_));
  }
  // Steps through rows: true while there is one.
  bool row() {
    int rc = sqlite3_step(st_);
    if (rc == SQLITE_ROW) return true;
    sqlite3_reset(st_);
    if (rc != SQLITE_DONE) throw std::runtime_error(sqlite3_errmsg(db_));
    return false;
  }
  std::string_view column(int i) {
    const void* p = sqlite3_column_blob(st_, i);
    int n = sqlite3_column_bytes(st_, i);
    return p == nullptr ? std::string_view() : std::string_view(static_cast<const char*>(p), n);
  }
  std::int64_t column_int(int i) { return sqlite3_column_int64(st_, i); }
  bool column_null(int i) { return sqlite3_column_type(st_, i) == SQLITE_NULL; }

 private:
  void check(int rc) {
    if (rc != SQLITE_OK) throw std::runtime_error(sqlite3_errmsg(db_));
  }
  sqlite3* db_;
  sqlite3_stmt* st_ = nullptr;
};

constexpr const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS agents (
  seq INTEGER PRIMARY KEY,
  id TEXT NOT NULL UNIQUE,
  name TEXT NOT NULL,
  class TEXT NOT NULL,
  args BLOB NOT NULL,
  state BLOB);
CREATE TABLE IF NOT EXISTS memory (
  agent_id TEXT NOT NULL,
  pos INTEGER NOT NULL,  -- the position of the first message in msgs
  msgs BLOB NOT NULL,    -- the messages one call added, framed (append_framed)
  PRIMARY KEY (agent_id, pos)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS results (
  seq INTEGER PRIMARY KEY,
  call_id TEXT NOT NULL,  -- unique (the result pool refuses reused ids), so not indexed
  agent_id TEXT NOT NULL,
  outcome BLOB NOT NULL,
  finished_ms INTEGER NOT NULL);
)sql";

}  // namespace

struct StateStore::Statements {
  explicit Statements(sqlite3* db)
      : begin(db, "BEGIN IMMEDIATE"),
        commit(db, "COMMIT"),
        put_agent(db,
                  "INSERT INTO agents (id, name, class, args, state) VALUES (?1, ?2, ?3, ?4, ?5) "
                  "ON CONFLICT (id) DO UPDATE SET name = ?2, class = ?3, args = ?4, state = ?5"),
        set_state(db, "UPDATE agents SET state = ?2 WHERE id = ?1"),
        delete_agent(db, "DELETE FROM agents WHERE id = ?1"),
        delete_memory(db, "DELETE FROM memory WHERE agent_id = ?1"),
        put_memory(db, "INSERT OR REPLACE INTO memory (agent_id, pos, msgs) VALUES (?1, ?2, ?3)"),
        put_result(db,
                   "INSERT INTO results (call_id, agent_id, outcome, finished_ms) "
                   "VALUES (?1, ?2, ?3, ?4)"),
        delete_all_agents(db, "DELETE FROM agents"),
        delete_all_memory(db, "DELETE FROM memory"),
        trim_age(db, "DELETE FROM results WHERE finished_ms < ?1"),
        trim_count(db,
                   "DELETE FROM results WHERE seq <= (SELECT seq FROM results ORDER BY seq DESC "
                   "LIMIT 1 OFFSET ?1)"),
        trimmed_until(db,
                      "SELECT max(finished_ms) FROM results WHERE finished_ms < ?1 OR seq <= "
                      "(SELECT seq FROM results ORDER BY seq DESC LIMIT 1 OFFSET ?2)"),
        put_meta(db, "INSERT OR REPLACE INTO meta (key, value) VALUES (?1, ?2)") {}
  Stmt begin, commit, put_agent, set_state, delete_agent, delete_memory, put_memory, put_result,
      delete_all_agents, delete_all_memory, trim_age, trim_count, trimmed_until, put_meta;
};

void StateStore::exec(const char* sql) {
  char* err = nullptr;
  if (sqlite3_exec(db_, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    std::string why = err != nullptr ? err : sqlite3_errmsg(db_);
    sqlite3_free(err);
    throw std::runtime_error(why);
  }
}

namespace {

// Text safe to put in a message: bytes that are not printable ASCII (a damaged file's contents)
// become \xNN, and at most 300 characters are kept.
std::string printable(std::string_view in) {
  std::string out;
  for (unsigned char ch : in) {
    if (out.size() >= 300) {
      out += "...";
      break;
    }
    if (ch >= 0x20 && ch < 0x7f)
      out += static_cast<char>(ch);
    else
      out += fmt::format("\\x{:02x}", ch);
  }
  return out;
}

// Why path cannot be written, or empty when it can (or does not exist).
std::string not_writable(const std::string& path) {
  if (::access(path.c_str(), F_OK) != 0 || ::access(path.c_str(), W_OK) == 0) return {};
  const int err = errno;
  struct statvfs fs {};
  if (err == EROFS || (::statvfs(path.c_str(), &fs) == 0 && (fs.f_flag & ST_RDONLY) != 0))
    return fmt::format("{} is on a read-only file system", path);
  struct stat st {};
  ::stat(path.c_str(), &st);
  return fmt::format("{} is not writable by this process (uid {}; the file is mode {:04o}, owner "
                     "uid {}: {})",
                     path, ::getuid(), st.st_mode & 07777, st.st_uid, std::strerror(err));
}

}  // namespace

StateStore::StateStore(std::string dir) : dir_(std::move(dir)) {
  namespace fs = std::filesystem;
  file_ = (fs::path(dir_) / "agentd.db").string();
  auto fail = [&](const std::string& why, const std::string& what) {
    return Error(ErrorCode::config_error, fmt::format("--state-dir {}: {}{}", dir_, why, what));
  };
  std::error_code ec;
  if (fs::exists(dir_, ec) && !fs::is_directory(dir_, ec))
    throw fail("exists and is not a directory", "; pick a directory");
  if (!fs::exists(dir_, ec)) {
    fs::create_directories(dir_, ec);
    if (ec) throw fail("cannot create it: " + ec.message(), "");
    ::chmod(dir_.c_str(), 0700);
  }
  // Permissions first: a read-only database is healthy, and must not be called damaged.
  for (const std::string& path : {dir_, file_, file_ + "-wal", file_ + "-shm"}) {
    std::string why = not_writable(path);
    if (!why.empty())
      throw Error(ErrorCode::config_error,
                  fmt::format("--state-dir {}: {}; as_server writes its state there. Make it "
                              "writable (chown/chmod, or mount the file system read-write): "
                              "the database itself is not damaged, do not move it away",
                              dir_, why));
  }
  // The lock is on the directory itself: deleting a lock file beside the database cannot let a
  // second server in (it would write the same database under the same server id).
  lock_fd_ = ::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (lock_fd_ < 0) throw fail(fmt::format("cannot open it: {}", std::strerror(errno)), "");
  if (::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    ::close(lock_fd_);
    lock_fd_ = -1;
    throw fail("another as_server is using this state dir (it holds a lock on the directory)",
               "; give each server its own --state-dir");
  }
  auto release = [&]() {
    st_.reset();
    if (db_ != nullptr) sqlite3_close_v2(db_);
    db_ = nullptr;
    journal_.reset();
    ::close(lock_fd_);
    lock_fd_ = -1;
  };
  try {
    const bool db_existed = fs::exists(file_, ec);
    if (db_existed && fs::file_size(file_, ec) == 0 && !ec)
      throw Error(ErrorCode::config_error,
                  fmt::format("{}: the database file is empty (0 bytes), so it holds none of the "
                              "agents it should; restore it from a backup (README \"Durability\"), "
                              "or, if this state dir was never used, remove the file to start "
                              "with no agents",
                              file_));
    journal_ = std::make_unique<RunJournal>((fs::path(dir_) / "agentd.run").string());
    if (sqlite3_open_v2(file_.c_str(), &db_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE |
                                                 SQLITE_OPEN_NOMUTEX,
                        nullptr) != SQLITE_OK)
      throw std::runtime_error(db_ != nullptr ? sqlite3_errmsg(db_) : "out of memory");
    // Waits for another process holding the database (a backup taking a write lock) rather than
    // failing the store at once; check_stall() logs a wait that lasts.
    sqlite3_busy_timeout(db_, 60000);
    // A file that is not a database fails here (SQLITE_NOTADB), before anything is written.
    Stmt tables(db_, "SELECT count(*) FROM sqlite_schema WHERE type = 'table'");
    tables.row();
    const bool fresh = tables.column_int(0) == 0;
    tables.row();
    if (!fresh) {
      Stmt has_meta(db_, "SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = 'meta'");
      has_meta.row();
      if (has_meta.column_int(0) == 0)
        throw Error(ErrorCode::config_error,
                    fmt::format("{}: is an SQLite database but not an agentd state store; move it "
                                "away or pick another --state-dir",
                                file_));
      has_meta.row();
      const std::string found = meta("format");
      std::string writer = meta("agentd_version");
      if (writer.empty()) writer = "?";
      if (found != std::to_string(kFormat))
        throw Error(ErrorCode::config_error,
                    fmt::format("{}: written by agentd {} in state format {}, but this as_server "
                                "(agentd {}) reads format {}; run the version that wrote it, or "
                                "move the directory away to start with no agents",
                                file_, printable(writer), found.empty() ? "(none)" : printable(found),
                                AGENTD_VERSION_STRING, kFormat));
    }
    check_against_journal(fresh);
    exec("PRAGMA journal_mode = WAL");
    exec("PRAGMA synchronous = FULL");
    exec(kSchema);
    exec(fmt::format("INSERT OR REPLACE INTO meta (key, value) VALUES ('format', '{}'), "
                     "('agentd_version', '{}')",
                     kFormat, AGENTD_VERSION_STRING)
             .c_str());
    st_ = std::make_unique<Statements>(db_);
    record_interrupted();
    journal_->start();  // the previous run's record is dealt with: this run's starts
  } catch (const Error&) {
    release();
    throw;
  } catch (const std::exception& e) {
    const int code = db_ != nullptr ? sqlite3_errcode(db_) : SQLITE_OK;
    release();
    if (code == SQLITE_READONLY || code == SQLITE_CANTOPEN || code == SQLITE_PERM)
      throw Error(ErrorCode::config_error,
                  fmt::format("{}: cannot open the state database for writing: {} (a permission, "
                              "ownership or read-only file system problem; the database itself "
                              "is not damaged: fix access to --state-dir {} and start again)",
                              file_, printable(e.what()), dir_));
    throw Error(ErrorCode::config_error,
                fmt::format("{}: cannot open the state database: {} (a damaged file: restore it "
                            "from a backup, or move the directory away to start with no agents)",
                            file_, printable(e.what())));
  }
  set_crash_journal(journal_.get());
  writer_ = std::thread([this] { writer_main(); });
}

void StateStore::check_against_journal(bool fresh) {
  const RunJournal::Previous& prev = journal_->previous();
  const std::string commits_text = fresh ? std::string() : meta("commit_seq");
  commit_seq_ = commits_text.empty() ? 0 : std::stoull(commits_text);
  const std::string forgotten = fresh ? std::string() : meta("forgotten_until_ms");
  forgotten_until_ms_ = forgotten.empty() ? 0 : std::stoll(forgotten);
  if (!prev.present) return;
  const std::string run_file = journal_->path();
  if (prev.commits > commit_seq_)
    throw Error(ErrorCode::config_error,
                fmt::format("{}: the database holds {} commit(s), but the last run (pid {}) "
                            "acknowledged {} ({}): {} acknowledged commit(s) are missing. The "
                            "write-ahead log {}-wal was removed or truncated, or the database was "
                            "replaced by an older copy. Put the missing files back; to start from "
                            "what the database holds anyway (losing the calls acknowledged "
                            "after it), remove {}",
                            file_, commit_seq_, prev.pid, prev.commits, run_file,
                            prev.commits - commit_seq_, file_, run_file));
  if (prev.clean) return;
  spdlog::warn("state dir {}: the last run (pid {}) did not stop cleanly{}; {} call(s) it was "
               "running are reported interrupted; checking the database",
               dir_, prev.pid,
               prev.fatal_signal != 0 ? fmt::format(" (it died of signal {})", prev.fatal_signal)
                                      : std::string(),
               prev.running.size());
  for (const auto& r : prev.running)
    if (r.crashed)
      spdlog::error("state dir {}: the last run died of signal {} while running call {} of agent "
                    "{}; that call is reported interrupted and not retried; a server that keeps "
                    "crashing on an agent's calls should host that agent apart (README "
                    "\"Durability\")",
                    dir_, prev.fatal_signal, r.call_id, r.agent_id);
  if (!fresh) {
    Stmt check(db_, "PRAGMA quick_check(5)");
    std::string problems;
    while (check.row()) {
      std::string line(check.column(0));
      if (line != "ok") problems += (problems.empty() ? "" : "; ") + printable(line);
    }
    if (!problems.empty())
      throw Error(ErrorCode::config_error,
                  fmt::format("{}: the integrity check after an unclean stop failed: {} (a damaged "
                              "file: restore it from a backup, or move the directory away to start "
                              "with no agents)",
                              file_, problems));
  }
  // After a crash of the machine (another boot) or with calls the journal could not record, the
  // running calls it lists may be incomplete: every call from before this start is "cannot tell".
  if (!prev.same_boot || prev.overflow) forgotten_until_ms_ = now_unix_ms();
}

void StateStore::record_interrupted() {
  const RunJournal::Previous& prev = journal_->previous();
  std::vector<const RunJournal::Previous::Running*> todo;
  if (prev.present && !prev.clean && !prev.running.empty()) {
    std::unordered_set<std::string> known;
    Stmt ids(db_, "SELECT call_id FROM results");
    while (ids.row()) known.emplace(ids.column(0));
    for (const auto& r : prev.running)
      if (!known.count(r.call_id)) todo.push_back(&r);
  }
  // Written before anything else, so the next start still knows them if this one dies too.
  exec("BEGIN IMMEDIATE");
  try {
    const std::int64_t now = now_unix_ms();
    for (const auto* r : todo) {
      const std::string why =
          r->crashed
              ? fmt::format("call {} was running when as_server (pid {}) died of signal {} in it: "
                            "this call crashed the server, and is not retried; its effects on "
                            "the agent were not kept, but it may have had effects outside agentd",
                            r->call_id, prev.pid, prev.fatal_signal)
              : fmt::format("call {} was running when as_server (pid {}) stopped without "
                            "finishing it{}: its effects on the agent were not kept, but it may "
                            "have had effects outside agentd; it is not safe to retry blindly",
                            r->call_id, prev.pid,
                            prev.fatal_signal != 0
                                ? fmt::format(" (the server died of signal {})", prev.fatal_signal)
                                : std::string());
      const std::string outcome = encode_outcome(Outcome(Error(ErrorCode::interrupted, why, r->agent_id)));
      st_->put_result.text(1, r->call_id).text(2, r->agent_id).blob(3, outcome).integer(4, now).run();
    }
    exec(fmt::format("INSERT OR REPLACE INTO meta (key, value) VALUES ('forgotten_until_ms', '{}')",
                     forgotten_until_ms_)
             .c_str());
    exec("COMMIT");
  } catch (...) {
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    throw;
  }
  if (!todo.empty())
    spdlog::warn("state dir {}: {} call(s) the last run was running are kept as interrupted "
                 "results",
                 dir_, todo.size());
}

StateStore::~StateStore() {
  close();
  set_crash_journal(nullptr);
  st_.reset();
  if (db_ != nullptr) sqlite3_close_v2(db_);
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

StateStore::Contents StateStore::load(std::size_t max_results, std::chrono::milliseconds max_age) {
  Contents out;
  std::string where = "the agents";
  try {
    std::unordered_map<std::string, std::size_t> index;
    Stmt agents(db_, "SELECT id, name, class, args, state FROM agents ORDER BY seq");
    while (agents.row()) {
      AgentRow a;
      a.id = std::string(agents.column(0));
      where = "agent '" + a.id + "'";
      a.name = std::string(agents.column(1));
      a.class_name = std::string(agents.column(2));
      a.args = decode_value(agents.column(3));
      if (!agents.column_null(4)) a.state = decode_value(agents.column(4));
      index.emplace(a.id, out.agents.size());
      out.agents.push_back(std::move(a));
    }
    Stmt memory(db_, "SELECT agent_id, msgs FROM memory ORDER BY agent_id, pos");
    while (memory.row()) {
      std::string agent(memory.column(0));
      where = "the memory of agent '" + agent + "'";
      auto it = index.find(agent);
      if (it == index.end()) continue;  // left by a deletion's memory rows (never committed apart)
      for (auto m : split_framed(memory.column(1)))
        out.agents[it->second].memory.push_back(decode_msg(m));
    }
    where = "the results";
    Stmt results(db_,
                 "SELECT call_id, agent_id, outcome FROM results WHERE finished_ms >= ?1 "
                 "ORDER BY seq DESC LIMIT ?2");
    results.integer(1, now_unix_ms() - max_age.count())
        .integer(2, static_cast<std::int64_t>(std::min<std::size_t>(max_results, INT64_MAX)));
    std::unordered_set<std::string> seen;  // newest first: an id written twice keeps its last
    while (results.row()) {
      ResultRow r;
      r.call_id = std::string(results.column(0));
      if (!seen.insert(r.call_id).second) continue;
      where = "the result of call '" + r.call_id + "'";
      r.agent_id = std::string(results.column(1));
      r.outcome = std::make_shared<const Outcome>(decode_outcome(results.column(2)));
      out.results.push_back(std::move(r));
    }
    std::reverse(out.results.begin(), out.results.end());
    // The results not loaded are forgotten as trimmed ones are.
    where = "the results";
    out.forgotten_until_unix_ms = forgotten_until_ms_;
    Stmt older(db_,
               "SELECT max(finished_ms) FROM results WHERE finished_ms < ?1 OR seq <= (SELECT seq "
               "FROM results WHERE finished_ms >= ?1 ORDER BY seq DESC LIMIT 1 OFFSET ?2)");
    older.integer(1, now_unix_ms() - max_age.count())
        .integer(2, static_cast<std::int64_t>(std::min<std::size_t>(max_results, INT64_MAX)));
    if (older.row()) {
      if (!older.column_null(0))
        out.forgotten_until_unix_ms = std::max(out.forgotten_until_unix_ms, older.column_int(0));
      older.row();
    }
  } catch (const std::exception& e) {
    throw Error(ErrorCode::config_error,
                fmt::format("{}: cannot read {}: {} (a damaged file: restore it from a backup, "
                            "or move the directory away to start with no agents)",
                            file_, printable(where), printable(e.what())));
  }
  return out;
}

std::string StateStore::meta(const char* key) {
  Stmt read(db_, "SELECT value FROM meta WHERE key = ?1");
  read.text(1, key);
  if (!read.row()) return {};
  std::string out(read.column(0));
  read.row();  // past the one row: resets the statement
  return out;
}

std::string StateStore::server_id() {
  try {
    return meta("server_id");
  } catch (const std::exception& e) {
    throw Error(ErrorCode::config_error, fmt::format("{}: cannot read: {}", file_, e.what()));
  }
}

void StateStore::set_server_id(const std::string& id) {
  Stmt put(db_, "INSERT OR REPLACE INTO meta (key, value) VALUES ('server_id', ?1)");
  try {
    put.text(1, id).run();
  } catch (const std::exception& e) {
    throw Error(ErrorCode::config_error, fmt::format("{}: cannot write: {}", file_, e.what()));
  }
}

void StateStore::drop_agents(const std::vector<std::string>& ids) {
  // One transaction of deletions, applied here: nothing is submitted yet, so the writer is idle.
  std::vector<Pending> batch;
  batch.reserve(ids.size());
  for (const auto& id : ids) {
    Pending p;
    p.change.kind = Change::Kind::delete_agent;
    p.change.agent_id = id;
    batch.push_back(std::move(p));
  }
  try {
    apply(batch, std::nullopt);
  } catch (const std::exception& e) {
    throw Error(ErrorCode::config_error, fmt::format("{}: cannot write: {}", file_, e.what()));
  }
}

void StateStore::submit(Change change, Done done) {
  std::unique_lock lock(mu_);
  if (failure_ || closing_) {
    Error e = failure_ ? *failure_
                       : Error(ErrorCode::not_applied, "the server's state store is closed");
    lock.unlock();
    if (done) done(&e);
    return;
  }
  queue_.push_back(Pending{std::move(change), std::move(done)});
  ++submitted_;
  if (queue_.size() == 1) wake_.notify_one();
}

void StateStore::trim_results(std::size_t max_results, std::chrono::milliseconds max_age) {
  std::lock_guard lock(mu_);
  trim_ = std::make_pair(max_results, now_unix_ms() - max_age.count());
  wake_.notify_one();
}

void StateStore::flush() {
  std::unique_lock lock(mu_);
  const std::uint64_t target = submitted_;
  drained_.wait(lock, [&] { return finished_ >= target || !writer_.joinable(); });
}

bool StateStore::flush_for(std::chrono::milliseconds limit) {
  std::unique_lock lock(mu_);
  const std::uint64_t target = submitted_;
  // A trim has no change of its own to count: the writer must also be between transactions, or
  // close() would wait for the stuck one.
  return drained_.wait_for(lock, limit, [&] {
    return (finished_ >= target && commit_started_ms_.load() == 0) || !writer_.joinable();
  });
}

void StateStore::check_stall() {
  const std::int64_t started = commit_started_ms_.load();
  if (started == 0) return;
  const std::int64_t ms = now_unix_ms() - started;
  if (ms >= 2000 && !stall_logged_.exchange(true))
    spdlog::warn("state store: a commit to {} has been running for {:.1f} s (the disk stalls?); "
                 "calls are not reported done until it finishes",
                 file_, ms / 1000.0);
}

void StateStore::close() {
  {
    std::lock_guard lock(mu_);
    if (closing_) return;
    closing_ = true;
    wake_.notify_one();
  }
  if (writer_.joinable()) writer_.join();
  drained_.notify_all();
  if (journal_) journal_->mark_clean();
}

std::optional<Error> StateStore::failure() const {
  std::lock_guard lock(mu_);
  return failure_;
}

StateStore::Stats StateStore::stats() const {
  Stats s;
  {
    std::lock_guard lock(mu_);
    s.last_commit_unix_ms = last_commit_ms_;
    s.commits = commits_;
    s.changes = finished_;
    if (failure_) s.error = failure_->message();
  }
  std::error_code ec;
  for (const char* suffix : {"", "-wal", "-shm"}) {
    auto n = std::filesystem::file_size(file_ + suffix, ec);
    if (!ec) s.bytes += n;
  }
  return s;
}

void StateStore::writer_main() {
  std::unique_lock lock(mu_);
  for (;;) {
    wake_.wait(lock, [&] { return !queue_.empty() || trim_ || closing_; });
    if (queue_.empty() && !trim_ && closing_) break;
    std::vector<Pending> batch;
    batch.swap(queue_);
    auto trim = trim_;
    trim_.reset();
    // Trimming when no result was written since the last trim would only cost an fsync.
    for (const auto& p : batch)
      if (!p.change.call_id.empty()) results_written_ = true;
    if (trim && !results_written_) trim.reset();
    if (trim) results_written_ = false;
    if (batch.empty() && !trim) continue;
    const bool failed_before = failure_.has_value();
    lock.unlock();
    std::optional<Error> failed;
    if (!failed_before) {
      const std::int64_t started = now_unix_ms();
      commit_started_ms_.store(started);
      try {
        apply(batch, trim);
      } catch (const std::exception& e) {
        failed = Error(ErrorCode::not_applied,
                       fmt::format("as_server could not save agent state to {}: {}; the call was "
                                   "not applied. Everything acknowledged before is kept: fix the "
                                   "disk (free space, permissions), then restart as_server",
                                   file_, e.what()));
        spdlog::error("state store: {}", failed->message());
      }
      commit_started_ms_.store(0);
      const std::int64_t took = now_unix_ms() - started;
      if (stall_logged_.exchange(false))
        spdlog::warn("state store: the stalled commit finished after {:.1f} s", took / 1000.0);
      else if (took >= 1000)
        spdlog::warn("state store: a commit of {} change(s) to {} took {:.1f} s (a slow disk); "
                     "calls wait for their commit",
                     batch.size(), file_, took / 1000.0);
    }
    lock.lock();
    if (failed) failure_ = failed;
    if (!failed && !failed_before && !batch.empty()) {
      last_commit_ms_ = now_unix_ms();
      ++commits_;
    }
    std::optional<Error> report = failure_;
    lock.unlock();
    auto run_dones = [&] {
      for (auto& p : batch)
        if (p.done) p.done(report ? &*report : nullptr);
    };
    if (done_scope_)
      done_scope_(run_dones);
    else
      run_dones();
    lock.lock();
    finished_ += batch.size();
    drained_.notify_all();
  }
}

void StateStore::apply(std::vector<Pending>& batch,
                       const std::optional<std::pair<std::size_t, std::int64_t>>& trim) {
  Statements& s = *st_;
  s.begin.run();
  try {
    const std::int64_t now = now_unix_ms();
    for (auto& p : batch) {
      const Change& c = p.change;
      switch (c.kind) {
        case Change::Kind::barrier:
          break;
        case Change::Kind::put_agent:
          s.put_agent.text(1, c.agent_id).text(2, c.name).text(3, c.class_name).blob(4, c.args);
          if (c.has_state)
            s.put_agent.blob(5, c.state);
          else
            s.put_agent.null(5);
          s.put_agent.run();
          s.delete_memory.text(1, c.agent_id).run();
          break;
        case Change::Kind::delete_agent:
          s.delete_agent.text(1, c.agent_id).run();
          s.delete_memory.text(1, c.agent_id).run();
          break;
        case Change::Kind::delete_all:
          s.delete_all_agents.run();
          s.delete_all_memory.run();
          break;
        case Change::Kind::call:
          if (c.has_state) s.set_state.text(1, c.agent_id).blob(2, c.state).run();
          if (c.memory_reset) s.delete_memory.text(1, c.agent_id).run();
          break;
      }
      if (c.kind == Change::Kind::put_agent || c.kind == Change::Kind::call) {
        if (!c.memory.empty())
          s.put_memory.text(1, c.agent_id).integer(2, c.memory_from).blob(3, c.memory).run();
        if (!c.call_id.empty())
          s.put_result.text(1, c.call_id).text(2, c.agent_id).blob(3, c.outcome).integer(4, now).run();
      }
    }
    std::int64_t forgotten = forgotten_until_ms_;
    if (trim) {
      // What the trim forgets moves the horizon (see the header); then the rows go.
      const auto keep = static_cast<std::int64_t>(trim->first);
      s.trimmed_until.integer(1, trim->second).integer(2, keep);
      if (s.trimmed_until.row()) {
        if (!s.trimmed_until.column_null(0))
          forgotten = std::max(forgotten, s.trimmed_until.column_int(0));
        s.trimmed_until.row();
      }
      s.trim_age.integer(1, trim->second).run();
      s.trim_count.integer(1, keep).run();
      if (forgotten != forgotten_until_ms_)
        s.put_meta.text(1, "forgotten_until_ms").text(2, std::to_string(forgotten)).run();
    }
    s.put_meta.text(1, "commit_seq").text(2, std::to_string(commit_seq_ + 1)).run();
    s.commit.run();
    forgotten_until_ms_ = forgotten;
  } catch (...) {
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    throw;
  }
  ++commit_seq_;
  journal_->set_commits(commit_seq_);
}

}  // namespace agentd::detail

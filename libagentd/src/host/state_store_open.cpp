// Opening a state dir: the lock on the directory, permissions, the run journal's checks against
// the database, and the calls the last run left running (see StateStore's constructor).
#include "state_store.h"

#include "crash_report.h"
#include "state_store_sql.h"
#include "wal_buffer_vfs.h"

#include <agentd/version.h>

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
#include <random>
#include <unordered_set>

namespace agentd::detail {

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

namespace {

// Why path cannot be written, or empty when it can (or does not exist).
std::string not_writable(const std::string& path) {
  if (::access(path.c_str(), F_OK) != 0 || ::access(path.c_str(), W_OK) == 0) return {};
  const int err = errno;
  struct statvfs fs {};
  if (err == EROFS || (::statvfs(path.c_str(), &fs) == 0 && (fs.f_flag & ST_RDONLY) != 0))
    return fmt::format("{} is on a read-only file system", path);
  struct stat st {};
  ::stat(path.c_str(), &st);
  return fmt::format(
      "{} is not writable by this process (uid {}; the file is mode {:04o}, owner "
      "uid {}: {})",
      path, ::getuid(), st.st_mode & 07777, st.st_uid, std::strerror(err));
}

}  // namespace

StateStore::StateStore(std::string dir, std::uint64_t log_bytes) : dir_(std::move(dir)) {
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
  const std::string log_file = (fs::path(dir_) / "agentd.redo").string();
  for (const std::string& path : {dir_, file_, file_ + "-wal", file_ + "-shm", log_file}) {
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
    vfs_.reset();
    log_.reset();
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
    // A commit's WAL frames go to the file in one write (wal_buffer_vfs.h).
    vfs_ = std::make_unique<WalBufferVfs>();
    if (sqlite3_open_v2(file_.c_str(), &db_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                        vfs_->name()) != SQLITE_OK)
      throw std::runtime_error(db_ != nullptr ? sqlite3_errmsg(db_) : "out of memory");
    // Waits for another process holding the database (a backup taking a write lock) rather than
    // failing the store at once; check_stall() logs a wait that lasts.
    sqlite3_busy_timeout(db_, 60000);
    // A file that is not a database fails here (SQLITE_NOTADB), before anything is written.
    Stmt tables(db_, "SELECT count(*) FROM sqlite_schema WHERE type = 'table'");
    tables.row();
    const bool fresh = tables.column_int(0) == 0;
    tables.row();
    std::string upgrading;  // from format 1 (results.commit_seq is added below) or 2
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
      if (found == "1" || found == "2") upgrading = found;
      if (found != std::to_string(kFormat) && upgrading.empty())
        throw Error(ErrorCode::config_error,
                    fmt::format("{}: written by agentd {} in state format {}, but this as_server "
                                "(agentd {}) reads format {}; run the version that wrote it, or "
                                "move the directory away to start with no agents",
                                file_, printable(writer), found.empty() ? "(none)" : printable(found),
                                AGENTD_VERSION_STRING, kFormat));
    }
    check_against_journal(fresh, upgrading == "1");
    exec("PRAGMA journal_mode = WAL");
    // Start-up writes sync themselves; the applier's do not (see the header).
    exec("PRAGMA synchronous = FULL");
    exec(kSchema);
    // The upgrade and the format that says it was made, together.
    in_transaction([&] {
      if (upgrading == "1") exec("ALTER TABLE results ADD COLUMN commit_seq INTEGER");
      if (!upgrading.empty())
        spdlog::info("state dir {}: upgraded {} from state format {} to {}", dir_, file_, upgrading, kFormat);
      exec(fmt::format("INSERT OR REPLACE INTO meta (key, value) VALUES ('format', '{}'), "
                       "('agentd_version', '{}')",
                       kFormat, AGENTD_VERSION_STRING)
               .c_str());
    });
    st_ = std::make_unique<Statements>(db_);
    try {
      log_ = std::make_unique<CommitLog>(log_file, lock_fd_, log_bytes);
    } catch (const std::exception& e) {
      throw Error(ErrorCode::config_error,
                  fmt::format("--state-dir {}: cannot open the commit log: {} (free space, or fix "
                              "access to the directory, and start again)",
                              dir_, printable(e.what())));
    }
    replay_log(fresh);
    check_commits();
    record_interrupted();
    // From here on the database is the applier's, behind the log: its writes need not sync.
    exec("PRAGMA synchronous = NORMAL");
    // Replaces SQLite's automatic checkpoint (also a WAL hook): the applier checkpoints itself.
    sqlite3_wal_hook(
        db_,
        [](void* self, sqlite3*, const char*, int frames) {
          static_cast<StateStore*>(self)->wal_frames_.store(frames, std::memory_order_relaxed);
          return SQLITE_OK;
        },
        this);
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
  applier_ = std::thread([this] { applier_main(); });
}

void StateStore::check_against_journal(bool fresh, bool upgrading_from_1) {
  const RunJournal::Previous& prev = journal_->previous();
  const std::string commits_text = fresh ? std::string() : meta("commit_seq");
  commit_seq_ = commits_text.empty() ? 0 : std::stoull(commits_text);
  if (!fresh && !upgrading_from_1) {
    // The newest result row carries its commit's number (see commit_seq_).
    Stmt newest(db_, "SELECT commit_seq FROM results ORDER BY seq DESC LIMIT 1");
    if (newest.row()) {
      if (!newest.column_null(0))
        commit_seq_ = std::max(commit_seq_, static_cast<std::uint64_t>(newest.column_int(0)));
      newest.row();
    }
  }
  const std::string forgotten = fresh ? std::string() : meta("forgotten_until_ms");
  forgotten_until_ms_ = forgotten.empty() ? 0 : std::stoll(forgotten);
  if (!prev.present) return;
  if (prev.clean) return;
  spdlog::warn(
      "state dir {}: the last run (pid {}) did not stop cleanly{}; {} call(s) it was "
      "running are reported interrupted; checking the database",
      dir_, prev.pid,
      prev.fatal_signal != 0 ? fmt::format(" (it died of signal {})", prev.fatal_signal) : std::string(),
      prev.running.size());
  for (const auto& r : prev.running)
    if (r.crashed)
      spdlog::error(
          "state dir {}: the last run died of signal {} while running call {} of agent "
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

Error StateStore::busy_elsewhere() const {
  return Error(ErrorCode::config_error,
               fmt::format("{}: another process held the database for 60 s (a backup reading it?), so "
                           "what the server wrote could not be synced; start again when it is done",
                           file_));
}

void StateStore::replay_log(bool fresh) {
  const std::string gen = fresh ? std::string() : meta("redo_gen");
  if (gen.empty()) return;  // a new database, or one of format 2: no log was written for it
  const std::string offset = meta("redo_offset");
  std::vector<CommitLog::Record> records;
  try {
    records = log_->read_from(std::stoull(gen), offset.empty() ? 0 : std::stoull(offset), commit_seq_ + 1);
  } catch (const std::exception& e) {
    throw Error(ErrorCode::config_error,
                fmt::format("{}: cannot read the commit log: {}", log_->path(), printable(e.what())));
  }
  // In the same boot the run journal counted every commit acknowledged (its stores outlive the
  // process): a record past its count was never acknowledged. That is a write whose sync failed
  // (reported not_applied) or that the process died before acknowledging; neither may be applied.
  const RunJournal::Previous& prev = journal_->previous();
  if (prev.present && prev.same_boot)
    while (!records.empty() && records.back().seq > prev.commits) records.pop_back();
  if (records.empty()) return;
  std::vector<Applying> items;
  items.reserve(records.size());
  for (auto& r : records) {
    Applying item;
    try {
      item.changes = decode_batch(r.payload, item.now_ms);
    } catch (const std::exception& e) {
      // Its checksum matched: written by another version, or damaged in a way no crash does.
      throw Error(ErrorCode::config_error,
                  fmt::format("{}: commit {} cannot be read: {} (restore the state dir from a "
                              "backup, or move it away to start with no agents)",
                              log_->path(), r.seq, printable(e.what())));
    }
    item.seq = r.seq;
    item.end = r.end;
    items.push_back(std::move(item));
  }
  apply(items, std::nullopt);
  spdlog::info("state dir {}: applied {} acknowledged commit(s) from {} that {} did not hold yet", dir_,
               records.size(), log_->path(), file_);
  commit_seq_ = records.back().seq;
}

void StateStore::check_commits() {
  const RunJournal::Previous& prev = journal_->previous();
  if (!prev.present || prev.commits <= commit_seq_) return;
  throw Error(ErrorCode::config_error,
              fmt::format("{}: the database and the commit log hold {} commit(s), but the last run "
                          "(pid {}) acknowledged {} ({}): {} acknowledged commit(s) are missing. The "
                          "commit log {} and the write-ahead log {}-wal were removed or truncated, "
                          "or the database was replaced by an older copy. Put the missing files "
                          "back; to start from what the database holds anyway (losing the calls "
                          "acknowledged after it), remove {}",
                          file_, commit_seq_, prev.pid, prev.commits, journal_->path(),
                          prev.commits - commit_seq_, log_->path(), file_, journal_->path()));
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
  std::uint64_t gen = 0;
  while (gen == 0) gen = (static_cast<std::uint64_t>(std::random_device()()) << 32) | std::random_device()();
  // Written before anything else, so the next start still knows them if this one dies too.
  in_transaction([&] {
    const std::int64_t now = now_unix_ms();
    for (const auto* r : todo) {
      const std::string why =
          r->crashed
              ? fmt::format(
                    "call {} was running when as_server (pid {}) died of signal {} in it: "
                    "this call crashed the server, and is not retried; its effects on "
                    "the agent were not kept, but it may have had effects outside agentd",
                    r->call_id, prev.pid, prev.fatal_signal)
              : fmt::format(
                    "call {} was running when as_server (pid {}) stopped without "
                    "finishing it{}: its effects on the agent were not kept, but it may "
                    "have had effects outside agentd; it is not safe to retry blindly",
                    r->call_id, prev.pid,
                    prev.fatal_signal != 0 ? fmt::format(" (the server died of signal {})", prev.fatal_signal)
                                           : std::string());
      const std::string outcome = encode_outcome(Outcome(Error(ErrorCode::interrupted, why, r->agent_id)));
      st_->put_result.text(1, r->call_id).text(2, r->agent_id).blob(3, outcome).integer(4, now).null(5).run();
    }
    // The count (a format 2 database kept it on a result row), and the log's new generation:
    // no record of an earlier run can be taken for one of this run's.
    exec(fmt::format("INSERT OR REPLACE INTO meta (key, value) VALUES ('forgotten_until_ms', '{}'), "
                     "('commit_seq', '{}'), ('redo_gen', '{}'), ('redo_offset', '0')",
                     forgotten_until_ms_, commit_seq_, gen)
             .c_str());
  });
  // Everything so far into the database file, synced: the log's earlier records are not needed.
  if (!checkpoint()) throw busy_elsewhere();
  log_->restart(gen);
  applied_seq_ = commit_seq_;
  if (!todo.empty())
    spdlog::warn(
        "state dir {}: {} call(s) the last run was running are kept as interrupted "
        "results",
        dir_, todo.size());
}

}  // namespace agentd::detail

// The state store's SQL: the schema, a prepared-statement wrapper and the statements the writer
// uses. Private to host/state_store*.cpp.
#pragma once

#include "state_store.h"

#include <fmt/format.h>
#include <sqlite3.h>

#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

namespace agentd::detail {

// ---- SQLite ----

inline std::int64_t now_unix_ms() {
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
  // Ends a walk through rows before its end (row() ends it at the end).
  void stop() { sqlite3_reset(st_); }
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

inline constexpr const char* kSchema = R"sql(
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
  finished_ms INTEGER NOT NULL,
  commit_seq INTEGER);    -- the commit's number, on the last result row a commit writes (format 2)
)sql";

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
                   "INSERT INTO results (call_id, agent_id, outcome, finished_ms, commit_seq) "
                   "VALUES (?1, ?2, ?3, ?4, ?5)"),
        delete_all_agents(db, "DELETE FROM agents"),
        delete_all_memory(db, "DELETE FROM memory"),
        // A trim removes the oldest rows (a range of seq from the first), reading only those
        // and the first it keeps: a scan of every row would read every outcome (the columns
        // after it are past its overflow pages), once a second while results are written.
        newest_result(db, "SELECT max(seq) FROM results"),
        oldest_results(db, "SELECT seq, finished_ms FROM results ORDER BY seq"),
        trim_results(db, "DELETE FROM results WHERE seq <= ?1"),
        // An upsert changes the row in place: INSERT OR REPLACE deletes and re-inserts it, which
        // rewrites the key's index page too, one more WAL frame in every commit (commit_seq).
        put_meta(
            db, "INSERT INTO meta (key, value) VALUES (?1, ?2) ON CONFLICT (key) DO UPDATE SET value = ?2") {}
  Stmt begin, commit, put_agent, set_state, delete_agent, delete_memory, put_memory, put_result,
      delete_all_agents, delete_all_memory, newest_result, oldest_results, trim_results, put_meta;
};

// Text safe to put in a message: bytes that are not printable ASCII (a damaged file's contents)
// become \xNN, and at most 300 characters are kept.
std::string printable(std::string_view in);

}  // namespace agentd::detail

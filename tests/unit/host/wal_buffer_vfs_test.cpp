// WalBufferVfs (host/wal_buffer_vfs.h) under real SQLite databases in a temporary directory:
// a commit's frames reach the WAL file in one write, and whatever SQLite wrote is in the file
// whenever another connection, a read of its own, a checkpoint or a reopen could look. The state
// store's behaviour on top of it (a full disk, kill -9) is state_store_test.cpp's and
// durability_test.cpp's.
#include "wal_buffer_vfs.h"

#include "server_process.h"  // TempDir

#include <catch2/catch.hpp>
#include <sqlite3.h>

#include <cstdint>
#include <stdexcept>
#include <string>

using agentd::detail::WalBufferVfs;
using agentd::test::TempDir;

namespace {

// A connection, through the VFS named (nullptr: SQLite's default).
class Db {
 public:
  Db(const std::string& file, const char* vfs) {
    if (sqlite3_open_v2(file.c_str(), &db_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, vfs) != SQLITE_OK)
      throw std::runtime_error(sqlite3_errmsg(db_));
  }
  ~Db() { sqlite3_close_v2(db_); }
  Db(const Db&) = delete;
  Db& operator=(const Db&) = delete;

  void exec(const std::string& sql) {
    char* err = nullptr;
    if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
      std::string why = err != nullptr ? err : sqlite3_errmsg(db_);
      sqlite3_free(err);
      throw std::runtime_error(why + " (" + sql + ")");
    }
  }
  // The first column of the first row, as text.
  std::string one(const std::string& sql) {
    sqlite3_stmt* st = nullptr;
    if (sqlite3_prepare_v2(db_, sql.c_str(), -1, &st, nullptr) != SQLITE_OK)
      throw std::runtime_error(sqlite3_errmsg(db_));
    std::string out;
    if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_text(st, 0) != nullptr)
      out = reinterpret_cast<const char*>(sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
    return out;
  }

 private:
  sqlite3* db_ = nullptr;
};

}  // namespace

TEST_CASE("a commit's WAL frames reach the file in one write, readable by another connection before any sync",
          "[host][wal_buffer]") {
  TempDir tmp;
  const std::string file = tmp.path() + "/test.db";
  WalBufferVfs vfs;
  Db db(file, vfs.name());
  db.exec("PRAGMA journal_mode = WAL");
  // No sync at commit: what another connection sees can only be there because the commit
  // frame's write put it in the file.
  db.exec("PRAGMA synchronous = OFF");
  db.exec("CREATE TABLE t (k INTEGER PRIMARY KEY, v TEXT)");
  Db other(file, nullptr);
  CHECK(other.one("SELECT count(*) FROM t") == "0");

  const auto before = vfs.counts();
  // Five rows of about a page each: several frames, two writes each, in one transaction.
  db.exec("BEGIN");
  for (int i = 0; i < 5; ++i)
    db.exec("INSERT INTO t (k, v) VALUES (" + std::to_string(i) + ", '" + std::string(3000, char('a' + i)) +
            "')");
  db.exec("COMMIT");
  const auto after = vfs.counts();
  CHECK(after.asked - before.asked >= 8);
  CHECK(after.made - before.made == 1);

  CHECK(other.one("SELECT count(*) FROM t") == "5");
  CHECK(other.one("SELECT v FROM t WHERE k = 3") == std::string(3000, 'd'));
  // Each later commit is one write too.
  for (int i = 5; i < 15; ++i) db.exec("INSERT INTO t (k, v) VALUES (" + std::to_string(i) + ", 'x')");
  CHECK(vfs.counts().made - after.made == 10);
  CHECK(other.one("SELECT count(*) FROM t") == "15");
}

TEST_CASE(
    "a transaction larger than the gathering limit, and one that spills before it commits, read back "
    "whole, and a rolled back one leaves nothing",
    "[host][wal_buffer]") {
  TempDir tmp;
  const std::string file = tmp.path() + "/test.db";
  const std::string row(10000, 'r');
  const int rows = 400;  // about 4 MiB: many times kMaxGathered
  {
    WalBufferVfs vfs;
    Db db(file, vfs.name());
    db.exec("PRAGMA journal_mode = WAL");
    db.exec("PRAGMA synchronous = FULL");
    db.exec("CREATE TABLE t (k INTEGER PRIMARY KEY, v TEXT)");
    const auto before = vfs.counts();
    db.exec("BEGIN");
    for (int i = 0; i < rows; ++i)
      db.exec("INSERT INTO t (k, v) VALUES (" + std::to_string(i) + ", '" + row + std::to_string(i) + "')");
    db.exec("COMMIT");
    const auto after = vfs.counts();
    // No write passes the limit, and each carries many frames.
    CHECK(after.made - before.made >= rows * 10000 / WalBufferVfs::kMaxGathered);
    CHECK(after.made - before.made <= (after.asked - before.asked) / 20);

    // A transaction that spills frames before it commits, and reads back pages it spilled.
    db.exec("PRAGMA cache_size = 20");  // pages
    db.exec("BEGIN");
    db.exec("UPDATE t SET v = v || '+' WHERE k % 7 = 0");
    db.exec("INSERT INTO t (k, v) SELECT k + 100000, v FROM t WHERE k < 50");
    db.exec("DELETE FROM t WHERE k >= 100000");
    db.exec("COMMIT");
    CHECK(db.one("SELECT count(*) FROM t WHERE v = '" + row + "7+'") == "1");

    // A spilled transaction rolled back: none of its rows, before or after a reopen.
    db.exec("BEGIN");
    for (int i = rows; i < 2 * rows; ++i)
      db.exec("INSERT INTO t (k, v) VALUES (" + std::to_string(i) + ", '" + row + "')");
    db.exec("ROLLBACK");
    CHECK(db.one("SELECT count(*) FROM t") == std::to_string(rows));
    db.exec("INSERT INTO t (k, v) VALUES (-1, 'last')");
  }
  // Reopened without the VFS: the log holds exactly what was committed, in a sound database.
  Db again(file, nullptr);
  CHECK(again.one("PRAGMA quick_check") == "ok");
  CHECK(again.one("SELECT count(*) FROM t") == std::to_string(rows + 1));
  CHECK(again.one("SELECT count(*) FROM t WHERE v LIKE '%+'") == std::to_string((rows + 6) / 7));
  CHECK(again.one("SELECT v FROM t WHERE k = 398") == row + "398");
  CHECK(again.one("SELECT v FROM t WHERE k = -1") == "last");
  again.exec("PRAGMA wal_checkpoint(TRUNCATE)");
  CHECK(again.one("SELECT sum(length(v)) FROM t") ==
        std::to_string(rows * 10000 + 10 * 1 + 90 * 2 + 300 * 3 + (rows + 6) / 7 + 4));
}

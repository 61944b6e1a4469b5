// CommitLog: the state store's log of acknowledged commits, DIR/agentd.redo, in front of SQLite.
//
// A durable call is acknowledged once its batch is written here and synced (one pwrite and one
// fdatasync of a file that is only ever overwritten, never extended, so the sync flushes data
// alone). SQLite applies the batch afterwards on a thread of its own without syncing, and the
// log's space is reused only once a checkpoint has synced SQLite's copy into the database file.
// A start replays what the log holds past the database's last applied commit.
//
// The file is a ring. Each record is a 32-byte header (magic, payload length, generation, commit
// number, CRC-32 of the rest) and its payload. A record that does not fit before the end of the
// file goes to offset 0. The database keeps, with each applied commit, the generation and the
// offset where the next record starts; replay reads from there (or from 0, where a record
// wrapped) while each record has the generation and the next commit number and a valid
// checksum, and stops at the first that does not: a record torn by a crash was never
// acknowledged. Every start picks a new random generation, so no record of an earlier run (or of
// a state dir restored from a backup) can be mistaken for one of this run.
//
// Not thread-safe: the state store calls it under its own lock (placing, bookkeeping) and from
// the committing thread alone (append).
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace agentd::detail {

class CommitLog {
 public:
  static constexpr std::uint64_t kDefaultBytes = 8u << 20;
  static constexpr std::uint64_t kHeaderBytes = 32;

  // Opens path, creating it zero-filled to `bytes` (or growing a smaller file to it), and syncs
  // the new file and its directory (dir_fd). Throws std::runtime_error naming the file.
  CommitLog(std::string path, int dir_fd, std::uint64_t bytes = kDefaultBytes);
  ~CommitLog();
  CommitLog(const CommitLog&) = delete;
  CommitLog& operator=(const CommitLog&) = delete;

  const std::string& path() const { return path_; }
  std::uint64_t file_bytes() const { return capacity_.load(std::memory_order_relaxed); }  // any thread

  struct Record {
    std::uint64_t seq = 0;
    std::uint64_t end = 0;  // where the next record starts (unless it wrapped to 0)
    std::string payload;
  };
  // The records of generation gen from offset on, numbered first_seq, first_seq + 1, ..., up to
  // the first that is missing, torn or of another generation. Throws std::runtime_error on a
  // read error.
  std::vector<Record> read_from(std::uint64_t gen, std::uint64_t offset, std::uint64_t first_seq) const;

  // Starts generation gen with nothing live: the next record goes to offset 0.
  void restart(std::uint64_t gen);
  std::uint64_t generation() const { return gen_; }

  // Where a record of payload_bytes goes, or nothing while the live records leave no room (wait
  // for set_durable()). A record larger than the file goes to 0 once nothing is live, and grows it.
  std::optional<std::uint64_t> place(std::size_t payload_bytes) const;
  // Writes the record at `at` (from place()) and syncs it; returns its end. Throws
  // std::runtime_error (nothing is acknowledged then); the caller should then erase(at).
  std::uint64_t append(std::uint64_t at, std::uint64_t seq, std::string_view payload);
  // Best effort after a failed append: overwrites the header at `at`, so that a record whose
  // write was reported failed is never replayed.
  void erase(std::uint64_t at) noexcept;
  // Bookkeeping under the caller's lock: a record was appended at [at, end); every record up to
  // commit seq is now in the synced database file (its space may be reused).
  void added(std::uint64_t seq, std::uint64_t at, std::uint64_t end);
  void set_durable(std::uint64_t seq);
  // Bytes held by records not yet durable in the database.
  std::uint64_t live_bytes() const;

 private:
  std::string path_;
  int fd_ = -1;
  std::atomic<std::uint64_t> capacity_{0};  // grows only on the committing thread
  std::uint64_t gen_ = 0;
  std::uint64_t tail_ = 0;  // where the newest record ends
  struct Live {
    std::uint64_t seq, at, end;
  };
  std::deque<Live> live_;  // oldest first
  std::uint64_t live_bytes_ = 0;
};

}  // namespace agentd::detail

// An SQLite VFS that writes a transaction's write-ahead-log frames to the file in one write.
//
// SQLite appends each WAL frame as two writes, its 24-byte header and its page, so a commit of
// five pages costs ten pwrite()s before its fdatasync(). This VFS wraps the default one and
// gathers the consecutive writes to a WAL file in memory, then hands them to the default VFS as
// one write. What reaches the file, and when it is visible, does not change: the gathered writes
// go to the file
// - as soon as a commit frame's page is written (a frame header whose "database size after
//   commit" field is not zero marks one), so before SQLite syncs the log and before it publishes
//   the frames in the WAL index, whatever the synchronous setting;
// - before any other operation on the WAL file (a read, a sync, a truncate, its size, a file
//   control, a close), and before a write that does not continue them;
// - when they would pass kMaxGathered bytes (a large transaction writes in pieces of that size).
// A write that fails there fails the SQLite call that caused it (the commit frame's write or the
// sync), so SQLite rolls the transaction back as it would have. Files other than WAL files are
// opened by the default VFS itself, untouched.
//
// Each instance registers itself with SQLite under a name of its own (name()) and unregisters
// when destroyed: every connection opened with it must be closed first. Any thread; a
// connection's WAL file is used by one thread at a time, as SQLite's connections are.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

struct sqlite3_file;
struct sqlite3_vfs;

namespace agentd::detail {

class WalBufferVfs {
 public:
  // SQLite's unix VFS writes at most 128 KiB - 1 bytes per call (its largest page is 64 KiB):
  // a flush never passes it this limit plus a page.
  static constexpr std::size_t kMaxGathered = 64 << 10;

  // Registers the VFS (not as the default); throws std::runtime_error if SQLite refuses.
  WalBufferVfs();
  ~WalBufferVfs();
  WalBufferVfs(const WalBufferVfs&) = delete;
  WalBufferVfs& operator=(const WalBufferVfs&) = delete;

  // For sqlite3_open_v2's zVfs.
  const char* name() const { return name_.c_str(); }

  // Writes to WAL files: those SQLite asked for, and those made to the files (one per flush).
  struct Counts {
    std::uint64_t asked = 0;
    std::uint64_t made = 0;
  };
  Counts counts() const { return {asked_.load(), made_.load()}; }

 private:
  struct WalFile;
  friend struct WalFile;
  static int open(sqlite3_vfs* vfs, const char* name, struct sqlite3_file* file, int flags, int* out_flags);
  static sqlite3_vfs* base_of(sqlite3_vfs* vfs);  // the default VFS behind ours

  std::string name_;
  std::unique_ptr<sqlite3_vfs> vfs_;  // ours; its pAppData is this
  sqlite3_vfs* base_ = nullptr;       // the default VFS, which does the work
  std::atomic<std::uint64_t> asked_{0};
  std::atomic<std::uint64_t> made_{0};
};

}  // namespace agentd::detail

// CommitLog (host/commit_log.h) on a small file: where records go in the ring, that a record
// never overwrites one not yet durable, and what a replay reads back (across a wrap, up to a
// torn record, never a record of another generation). The state store's use of it, with SQLite
// and crashes, is state_store_test.cpp's.
#include "commit_log.h"

#include "server_process.h"  // TempDir

#include <catch2/catch.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

using agentd::detail::CommitLog;
using agentd::test::TempDir;
namespace fs = std::filesystem;

namespace {

constexpr std::uint64_t kBytes = 1024;
constexpr std::uint64_t kHeader = CommitLog::kHeaderBytes;

// Appends a record of payload_bytes (filled with its number) where place() puts it.
std::uint64_t append(CommitLog& log, std::uint64_t seq, std::size_t payload_bytes) {
  auto at = log.place(payload_bytes);
  REQUIRE(at);
  const std::uint64_t end =
      log.append(*at, seq, std::string(payload_bytes, static_cast<char>('a' + seq % 26)));
  log.added(seq, *at, end);
  return *at;
}

std::vector<std::uint64_t> seqs(const std::vector<CommitLog::Record>& records) {
  std::vector<std::uint64_t> out;
  for (const auto& r : records) out.push_back(r.seq);
  return out;
}

}  // namespace

TEST_CASE("the commit log reuses only durable space, and a replay follows records across the wrap",
          "[host][commit_log]") {
  TempDir tmp;
  const std::string path = tmp.path() + "/agentd.redo";
  CommitLog log(path, -1, kBytes);
  CHECK(fs::file_size(path) == kBytes);  // written out in full at creation
  log.restart(7);

  // Three records of 300 bytes fill 3 * 332 = 996 of 1024 bytes.
  CHECK(append(log, 1, 300 - kHeader) == 0);
  CHECK(append(log, 2, 300 - kHeader) == 300);
  CHECK(append(log, 3, 300 - kHeader) == 600);
  CHECK(log.live_bytes() == 900);
  // The fourth fits neither after the third nor before the first: it must wait.
  CHECK_FALSE(log.place(300 - kHeader));
  // Once the first is durable, it goes to 0 (the wrap) and stops short of the second.
  log.set_durable(1);
  CHECK(append(log, 4, 300 - kHeader) == 0);
  CHECK_FALSE(log.place(1));  // 300 is where record 2 starts: nothing fits in between
  log.set_durable(2);
  CHECK(append(log, 5, 200 - kHeader) == 300);
  CHECK(log.place(100 - kHeader) == std::optional<std::uint64_t>(500));
  CHECK_FALSE(log.place(101 - kHeader));  // would reach record 3 at 600

  // Replay from where record 3 starts, as a database that applied 2 would: 3 at 600, then 4
  // wrapped to 0, then 5 after it.
  auto records = log.read_from(7, 600, 3);
  CHECK(seqs(records) == std::vector<std::uint64_t>{3, 4, 5});
  REQUIRE(records.size() == 3);
  CHECK(records[0].payload == std::string(300 - kHeader, 'd'));
  CHECK(records[2].end == 500);
  // Another generation's reader sees nothing; a database that applied everything reads nothing.
  CHECK(log.read_from(8, 600, 3).empty());
  CHECK(log.read_from(7, 500, 6).empty());

  // Everything durable: the next record goes after the newest.
  log.set_durable(5);
  CHECK(log.live_bytes() == 0);
  CHECK(append(log, 6, 100 - kHeader) == 500);
}

TEST_CASE("a commit log replay stops at a torn record, and a record larger than the log grows it",
          "[host][commit_log]") {
  TempDir tmp;
  const std::string path = tmp.path() + "/agentd.redo";
  {
    CommitLog log(path, -1, kBytes);
    log.restart(42);
    append(log, 1, 100);
    append(log, 2, 100);
    append(log, 3, 100);
  }
  auto tear = [&](std::uint64_t at) {
    const int fd = ::open(path.c_str(), O_RDWR);
    REQUIRE(fd >= 0);
    char c = 0;
    REQUIRE(::pread(fd, &c, 1, static_cast<off_t>(at)) == 1);
    c = static_cast<char>(c ^ 0x5a);
    REQUIRE(::pwrite(fd, &c, 1, static_cast<off_t>(at)) == 1);
    ::close(fd);
  };
  SECTION("a payload byte of the second record") {
    tear((kHeader + 100) + kHeader + 50);
    CommitLog log(path, -1, kBytes);
    CHECK(seqs(log.read_from(42, 0, 1)) == std::vector<std::uint64_t>{1});
  }
  SECTION("the third record's header (its length)") {
    tear(2 * (kHeader + 100) + 4);
    CommitLog log(path, -1, kBytes);
    CHECK(seqs(log.read_from(42, 0, 1)) == std::vector<std::uint64_t>{1, 2});
  }
  SECTION("nothing torn: all three, from any of them on") {
    CommitLog log(path, -1, kBytes);
    CHECK(seqs(log.read_from(42, 0, 1)) == std::vector<std::uint64_t>{1, 2, 3});
    CHECK(seqs(log.read_from(42, kHeader + 100, 2)) == std::vector<std::uint64_t>{2, 3});
  }
  SECTION("a record larger than the file waits until nothing is live, then grows it from 0") {
    CommitLog log(path, -1, kBytes);
    log.restart(43);
    append(log, 1, 100);
    CHECK_FALSE(log.place(2000));
    log.set_durable(1);
    CHECK(append(log, 2, 2000) == 0);
    CHECK(log.file_bytes() == kHeader + 2000);
    CHECK(fs::file_size(path) == kHeader + 2000);
    CHECK(seqs(log.read_from(43, kHeader + 100, 2)) == std::vector<std::uint64_t>{2});  // via 0
  }
}

#include "commit_log.h"

#include "file_error.h"

#include <boost/crc.hpp>
#include <fmt/format.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace agentd::detail {

namespace {

constexpr char kRecordMagic[4] = {'A', 'D', 'C', 'L'};

template <typename T>
void put_le(char* at, T v) {
  std::memcpy(at, &v, sizeof v);  // little-endian hosts only (x86-64, arm64), as the WAL index
}

template <typename T>
T get_le(const char* at) {
  T v;
  std::memcpy(&v, at, sizeof v);
  return v;
}

// Over the header's length, generation and number, then the payload.
std::uint32_t record_checksum(const char* header, std::string_view payload) {
  boost::crc_32_type crc;
  crc.process_bytes(header + 4, 20);
  crc.process_bytes(payload.data(), payload.size());
  return crc.checksum();
}

}  // namespace

CommitLog::CommitLog(std::string path, int dir_fd, std::uint64_t bytes) : path_(std::move(path)) {
  fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd_ < 0) throw file_error(path_, "cannot open");
  // The error of a step after the open, which closes the file (the destructor will not run).
  auto fail = [&](const char* what) {
    auto e = file_error(path_, what);
    ::close(fd_);
    return e;
  };
  struct stat st {};
  if (::fstat(fd_, &st) != 0) throw fail("cannot stat");
  capacity_ = static_cast<std::uint64_t>(st.st_size);
  if (capacity_ < bytes) {
    // Zeros written, not a hole or fallocate()'s unwritten extents: overwriting written blocks
    // lets each record's fdatasync flush its data without a journal commit of the file's extents.
    const std::string zeros(1u << 20, '\0');
    for (std::uint64_t at = capacity_; at < bytes;) {
      const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(zeros.size(), bytes - at));
      const ssize_t w = ::pwrite(fd_, zeros.data(), n, static_cast<off_t>(at));
      if (w <= 0) throw fail("cannot write");
      at += static_cast<std::uint64_t>(w);
    }
    if (::fsync(fd_) != 0 || (dir_fd >= 0 && ::fsync(dir_fd) != 0)) throw fail("cannot sync");
    capacity_ = bytes;
  }
}

CommitLog::~CommitLog() {
  if (fd_ >= 0) ::close(fd_);
}

std::vector<CommitLog::Record> CommitLog::read_from(std::uint64_t gen, std::uint64_t offset,
                                                    std::uint64_t first_seq) const {
  auto read_at = [&](std::uint64_t at, std::uint64_t seq) -> std::optional<Record> {
    if (at + kHeaderBytes > capacity_) return std::nullopt;
    char h[kHeaderBytes];
    if (::pread(fd_, h, sizeof h, static_cast<off_t>(at)) != static_cast<ssize_t>(sizeof h))
      throw file_error(path_, "cannot read");
    if (std::memcmp(h, kRecordMagic, 4) != 0 || get_le<std::uint64_t>(h + 8) != gen ||
        get_le<std::uint64_t>(h + 16) != seq)
      return std::nullopt;
    const std::uint64_t len = get_le<std::uint32_t>(h + 4);
    if (len > capacity_ - at - kHeaderBytes) return std::nullopt;
    Record r;
    r.seq = seq;
    r.end = at + kHeaderBytes + len;
    r.payload.resize(len);
    if (len > 0 && ::pread(fd_, r.payload.data(), len, static_cast<off_t>(at + kHeaderBytes)) !=
                       static_cast<ssize_t>(len))
      throw file_error(path_, "cannot read");
    if (record_checksum(h, r.payload) != get_le<std::uint32_t>(h + 24)) return std::nullopt;  // torn
    return r;
  };
  std::vector<Record> out;
  for (std::uint64_t seq = first_seq;; ++seq) {
    auto r = read_at(offset, seq);
    if (!r && offset != 0) r = read_at(0, seq);  // it wrapped
    if (!r) break;
    offset = r->end;
    out.push_back(std::move(*r));
  }
  return out;
}

void CommitLog::restart(std::uint64_t gen) {
  gen_ = gen;
  live_.clear();
  live_bytes_ = 0;
  tail_ = 0;
}

std::optional<std::uint64_t> CommitLog::place(std::size_t payload_bytes) const {
  const std::uint64_t n = kHeaderBytes + payload_bytes;
  if (live_.empty()) return tail_ + n <= capacity_ ? tail_ : 0;
  const std::uint64_t head = live_.front().at;
  const bool wrapped = live_.back().at < head;
  if (!wrapped) {
    if (tail_ + n <= capacity_) return tail_;
    if (n <= head) return 0;
    return std::nullopt;
  }
  if (tail_ + n <= head) return tail_;
  return std::nullopt;
}

std::uint64_t CommitLog::append(std::uint64_t at, std::uint64_t seq, std::string_view payload) {
  if (payload.size() > 0xffffffffu)
    throw std::runtime_error(
        fmt::format("a commit of {} bytes is more than a record holds (4 GiB)", payload.size()));
  std::string rec(kHeaderBytes, '\0');
  rec.reserve(kHeaderBytes + payload.size());
  std::memcpy(rec.data(), kRecordMagic, 4);
  put_le<std::uint32_t>(rec.data() + 4, static_cast<std::uint32_t>(payload.size()));
  put_le<std::uint64_t>(rec.data() + 8, gen_);
  put_le<std::uint64_t>(rec.data() + 16, seq);
  put_le<std::uint32_t>(rec.data() + 24, record_checksum(rec.data(), payload));
  rec.append(payload);
  for (std::size_t done = 0; done < rec.size();) {
    const ssize_t w = ::pwrite(fd_, rec.data() + done, rec.size() - done, static_cast<off_t>(at + done));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) throw file_error(path_, "cannot write");
    done += static_cast<std::size_t>(w);
  }
  // fdatasync also flushes the file's size when a record larger than the file grew it.
  if (::fdatasync(fd_) != 0) throw file_error(path_, "cannot sync");
  const std::uint64_t end = at + rec.size();
  if (end > capacity_.load()) capacity_.store(end);
  return end;
}

void CommitLog::erase(std::uint64_t at) noexcept {
  const char zeros[kHeaderBytes] = {};
  if (::pwrite(fd_, zeros, sizeof zeros, static_cast<off_t>(at)) == static_cast<ssize_t>(sizeof zeros))
    (void)::fdatasync(fd_);
}

void CommitLog::added(std::uint64_t seq, std::uint64_t at, std::uint64_t end) {
  live_.push_back(Live{seq, at, end});
  live_bytes_ += end - at;
  tail_ = end;
}

void CommitLog::set_durable(std::uint64_t seq) {
  while (!live_.empty() && live_.front().seq <= seq) {
    live_bytes_ -= live_.front().end - live_.front().at;
    live_.pop_front();
  }
}

std::uint64_t CommitLog::live_bytes() const { return live_bytes_; }

}  // namespace agentd::detail

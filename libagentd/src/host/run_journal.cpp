#include "run_journal.h"

#include "file_error.h"

#include <fmt/format.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <stdexcept>

namespace agentd::detail {

namespace {
constexpr char kMagic[16] = "agentd-run-v1";
}

// The file: one header page, then kSlots fixed slots. Plain data, written in place.
struct RunJournal::Header {
  char magic[16];
  std::uint32_t slot_count;
  std::int32_t pid;
  std::uint32_t clean;     // 1: the run ended cleanly
  std::uint32_t overflow;  // 1: a running call could not be recorded
  std::uint64_t commits;
  std::int64_t started_unix_ms;
  std::int32_t fatal_signal;
  std::uint32_t crash_slot;
  char boot_id[48];
};

struct RunJournal::Slot {
  std::uint8_t used;
  std::uint8_t id_len;
  std::uint8_t agent_len;
  std::uint8_t reserved;
  char call_id[64];
  char agent_id[60];
};

constexpr std::size_t kHeaderBytes = 4096;

RunJournal::Header* RunJournal::header() const { return static_cast<Header*>(map_); }

RunJournal::Slot* RunJournal::slot(std::uint32_t i) const {
  return reinterpret_cast<Slot*>(static_cast<char*>(map_) + kHeaderBytes) + i;
}

std::string RunJournal::boot_id() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(in, id);
  return id;
}

RunJournal::RunJournal(std::string path) : path_(std::move(path)) {
  static_assert(sizeof(Header) <= kHeaderBytes);
  static_assert(sizeof(Slot) == 128);
  size_ = kHeaderBytes + sizeof(Slot) * kSlots;
  fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) {
    if (errno == ENOENT) return;  // a first run
    throw file_error(path_, "cannot open");
  }
  struct stat st {};
  if (::fstat(fd_, &st) != 0) throw file_error(path_, "cannot stat");
  const std::string boot = boot_id();
  // What the previous run left: only a file of our own size and magic counts.
  if (static_cast<std::size_t>(st.st_size) == size_) {
    void* old = ::mmap(nullptr, size_, PROT_READ, MAP_SHARED, fd_, 0);
    if (old == MAP_FAILED) throw file_error(path_, "cannot map");
    const auto* h = static_cast<const Header*>(old);
    if (std::memcmp(h->magic, kMagic, sizeof(kMagic)) == 0 && h->slot_count == kSlots) {
      previous_.present = true;
      previous_.clean = h->clean == 1;
      previous_.pid = h->pid;
      previous_.boot_id = std::string(h->boot_id, strnlen(h->boot_id, sizeof(h->boot_id)));
      previous_.same_boot = !boot.empty() && previous_.boot_id == boot;
      previous_.commits = h->commits;
      previous_.fatal_signal = h->fatal_signal;
      previous_.overflow = h->overflow == 1;
      const auto* slots = reinterpret_cast<const Slot*>(static_cast<const char*>(old) + kHeaderBytes);
      for (std::uint32_t i = 0; i < kSlots; ++i) {
        const Slot& s = slots[i];
        if (s.used != 1) continue;
        Previous::Running r;
        r.call_id.assign(s.call_id, std::min<std::size_t>(s.id_len, sizeof(s.call_id)));
        r.agent_id.assign(s.agent_id, std::min<std::size_t>(s.agent_len, sizeof(s.agent_id)));
        r.crashed = h->fatal_signal != 0 && h->crash_slot == i;
        previous_.running.push_back(std::move(r));
      }
    }
    ::munmap(old, size_);
  }
  ::close(fd_);
  fd_ = -1;
}

void RunJournal::start() {
  const std::string boot = boot_id();
  fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd_ < 0) throw file_error(path_, "cannot open");
  // This run starts from zeros (a sparse file: untouched slots take no memory or disk).
  if (::ftruncate(fd_, 0) != 0 || ::ftruncate(fd_, static_cast<off_t>(size_)) != 0)
    throw file_error(path_, "cannot size");
  map_ = ::mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
  if (map_ == MAP_FAILED) {
    map_ = nullptr;
    throw file_error(path_, "cannot map");
  }
  Header* h = header();
  h->slot_count = kSlots;
  h->pid = static_cast<std::int32_t>(::getpid());
  h->commits = previous_.commits;
  h->started_unix_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                           std::chrono::system_clock::now().time_since_epoch())
                           .count();
  h->crash_slot = kNoSlot;
  std::memcpy(h->boot_id, boot.data(), std::min(boot.size(), sizeof(h->boot_id) - 1));
  std::memcpy(h->magic, kMagic, sizeof(kMagic));  // last: a half-written header is no header
  free_.reserve(kSlots);
  for (std::uint32_t i = kSlots; i > 0; --i) free_.push_back(i - 1);
}

RunJournal::~RunJournal() {
  if (map_ != nullptr) ::munmap(map_, size_);
  if (fd_ >= 0) ::close(fd_);
}

std::uint32_t RunJournal::begin(std::string_view call_id, std::string_view agent_id) {
  if (map_ == nullptr) return kNoSlot;
  std::uint32_t i = kNoSlot;
  if (call_id.size() <= sizeof(Slot::call_id)) {
    std::lock_guard lock(mu_);
    if (!free_.empty()) {
      i = free_.back();
      free_.pop_back();
    }
  }
  if (i == kNoSlot) {
    header()->overflow = 1;
    return kNoSlot;
  }
  Slot* s = slot(i);
  const std::size_t agent_len = std::min(agent_id.size(), sizeof(s->agent_id));
  std::memcpy(s->call_id, call_id.data(), call_id.size());
  std::memcpy(s->agent_id, agent_id.data(), agent_len);
  s->id_len = static_cast<std::uint8_t>(call_id.size());
  s->agent_len = static_cast<std::uint8_t>(agent_len);
  __atomic_store_n(&s->used, 1, __ATOMIC_RELEASE);
  return i;
}

void RunJournal::end(std::uint32_t i) {
  if (i == kNoSlot || map_ == nullptr) return;
  __atomic_store_n(&slot(i)->used, 0, __ATOMIC_RELEASE);
  std::lock_guard lock(mu_);
  free_.push_back(i);
}

void RunJournal::set_commits(std::uint64_t commits) {
  if (map_ == nullptr) return;
  __atomic_store_n(&header()->commits, commits, __ATOMIC_RELEASE);
}

void RunJournal::mark_clean() {
  if (map_ != nullptr) __atomic_store_n(&header()->clean, 1, __ATOMIC_RELEASE);
}

void RunJournal::note_crash(int signal, std::uint32_t i) noexcept {
  if (map_ == nullptr) return;
  header()->crash_slot = i;
  header()->fatal_signal = signal;
}

}  // namespace agentd::detail

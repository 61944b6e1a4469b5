// RunJournal: what a server with --state-dir is doing right now, in DIR/agentd.run, so that the
// next start can tell what the last run left unfinished.
//
// The file is mapped shared into the process and written with plain stores: no fsync, no system
// call per write. A process that dies (kill -9, a crash in agent code) leaves its last stores in
// the kernel's page cache, and the next start reads them; only a crash of the machine itself can
// lose them, which the next start detects (another boot id) and treats as "cannot tell".
//
// It holds:
//   - the calls with a call id that are running: one slot each from the moment agent code starts
//     until the call's outcome is committed and published. Slots left used by a run that died
//     are calls that may have run (interrupted), never calls that did not (not_applied);
//   - the number of commits the state store acknowledged, so a start can see that the database
//     lost commits (a removed or truncated write-ahead log);
//   - whether the run ended cleanly, its pid and boot id, and the fatal signal and the call that
//     was running on the crashing thread (written by the crash handler, async-signal-safe).
//
// Thread-safe: begin/end from any thread (a small mutex guards the free slots); note_crash from a
// signal handler.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace agentd::detail {

class RunJournal {
 public:
  static constexpr std::uint32_t kNoSlot = 0xffffffffu;
  static constexpr std::uint32_t kSlots = 65536;

  // What the previous run left in the file (present == false: no file, or not one of ours).
  struct Previous {
    bool present = false;
    bool clean = false;
    int pid = 0;
    std::string boot_id;
    bool same_boot = false;
    std::uint64_t commits = 0;
    int fatal_signal = 0;
    bool overflow = false;  // a running call could not be recorded: the slots are incomplete
    struct Running {
      std::string call_id;
      std::string agent_id;
      bool crashed = false;  // the call the crashing thread was running
    };
    std::vector<Running> running;
  };

  // Reads what the previous run left in path (nothing is written yet, so a start refused after
  // this still finds it there next time). Throws std::runtime_error naming the file on a
  // system error.
  explicit RunJournal(std::string path);
  // Starts this run's record (creating the file): call once the previous run's record is dealt
  // with. Before it, begin() records nothing. Throws std::runtime_error on a system error.
  void start();
  ~RunJournal();
  RunJournal(const RunJournal&) = delete;
  RunJournal& operator=(const RunJournal&) = delete;

  const Previous& previous() const { return previous_; }
  const std::string& path() const { return path_; }

  // A call with call_id starts running on agent_id: its slot (kNoSlot when it could not be
  // recorded; the file then says so, and the next start treats every unknown call as "cannot
  // tell"). Any thread.
  std::uint32_t begin(std::string_view call_id, std::string_view agent_id);
  // The call of slot is published (its outcome is committed): the slot is free. kNoSlot: nothing.
  void end(std::uint32_t slot);
  // The state store acknowledged this many commits (the writer thread, after each commit).
  void set_commits(std::uint64_t commits);
  // The run ends cleanly: nothing is running, everything acknowledged is committed.
  void mark_clean();
  // Async-signal-safe: the process is dying of signal; slot is the crashing thread's call.
  void note_crash(int signal, std::uint32_t slot) noexcept;

  // The machine's boot id (/proc/sys/kernel/random/boot_id), empty if unreadable.
  static std::string boot_id();

 private:
  struct Header;
  struct Slot;
  Header* header() const;
  Slot* slot(std::uint32_t i) const;

  std::string path_;
  int fd_ = -1;
  void* map_ = nullptr;
  std::size_t size_ = 0;
  Previous previous_;
  std::mutex mu_;
  std::vector<std::uint32_t> free_;  // guarded by mu_
};

}  // namespace agentd::detail

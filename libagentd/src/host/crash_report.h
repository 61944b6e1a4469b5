// What a fatal signal in agent code leaves behind: one line on stderr naming the call that was
// running on the crashing thread (its call id, agent and class), and, with --state-dir, the
// signal and that call in the run journal, so the next start reports the call as interrupted
// (it crashed the server once; it is never offered as safe to retry). Then the process dies of
// the signal as it would have.
//
// install_crash_report() once in main(), before any thread starts. The handler is
// async-signal-safe: it formats into a stack buffer, write(2)s it, and stores into the mapped
// journal. Stack overflows are caught on the main thread only (the others have no alternate
// signal stack); they still kill the process, without the line.
#pragma once

#include <cstdint>
#include <string>

namespace agentd::detail {

class RunJournal;

void install_crash_report();
// The journal the handler notes the crash in (nullptr: none). Any thread.
void set_crash_journal(RunJournal* journal);

// While it lives, the calling thread runs agent code for this call: a fatal signal names it.
// The strings are borrowed and outlive the mark.
class CrashContext {
 public:
  CrashContext(const std::string& call_id, const std::string& agent_id, const std::string& agent_class,
               std::uint32_t journal_slot) noexcept;
  ~CrashContext();
  CrashContext(const CrashContext&) = delete;
  CrashContext& operator=(const CrashContext&) = delete;

  const std::string& call_id;
  const std::string& agent_id;
  const std::string& agent_class;
  const std::uint32_t journal_slot;

 private:
  const CrashContext* saved_;  // the mark this one covers (a call running inside another's)
};

}  // namespace agentd::detail

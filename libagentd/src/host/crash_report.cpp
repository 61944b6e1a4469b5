#include "crash_report.h"

#include "run_journal.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstring>

namespace agentd::detail {

namespace {

thread_local const CrashContext* t_running = nullptr;
std::atomic<RunJournal*> g_journal{nullptr};

// Appends to a fixed buffer without allocating (async-signal-safe).
struct Line {
  char buf[768];
  std::size_t n = 0;
  void add(const char* s, std::size_t len) {
    len = std::min(len, sizeof(buf) - n);
    std::memcpy(buf + n, s, len);
    n += len;
  }
  void add(const char* s) { add(s, std::strlen(s)); }
  void add(const std::string* s) {
    if (s != nullptr) add(s->data(), std::min<std::size_t>(s->size(), 200));
  }
  void add_int(int v) {
    char digits[16];
    int k = 0;
    unsigned u = v < 0 ? 0u - static_cast<unsigned>(v) : static_cast<unsigned>(v);
    do {
      digits[k++] = static_cast<char>('0' + u % 10);
      u /= 10;
    } while (u != 0 && k < 15);
    if (v < 0) add("-");
    while (k > 0) add(&digits[--k], 1);
  }
};

const char* signal_name(int sig) {
  switch (sig) {
    case SIGSEGV:
      return "SIGSEGV";
    case SIGABRT:
      return "SIGABRT";
    case SIGBUS:
      return "SIGBUS";
    case SIGFPE:
      return "SIGFPE";
    case SIGILL:
      return "SIGILL";
    default:
      return "a fatal signal";
  }
}

void on_fatal(int sig) {
  Line line;
  line.add("as_server: fatal signal ");
  line.add_int(sig);
  line.add(" (");
  line.add(signal_name(sig));
  line.add(")");
  const CrashContext* r = t_running;
  if (r != nullptr) {
    line.add(" while running call ");
    if (r->call_id.empty())
      line.add("(no call id)");
    else
      line.add(&r->call_id);
    line.add(" of agent ");
    line.add(&r->agent_id);
    line.add(" (");
    line.add(&r->agent_class);
    line.add(
        "); the process dies, and with --state-dir the call is reported interrupted after "
        "the restart\n");
  } else {
    line.add(" outside agent code\n");
  }
  ssize_t ignored = ::write(2, line.buf, line.n);
  (void)ignored;
  if (RunJournal* j = g_journal.load(std::memory_order_acquire))
    j->note_crash(sig, r != nullptr ? r->journal_slot : RunJournal::kNoSlot);
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

}  // namespace

void install_crash_report() {
  static char alt_stack[64 * 1024];
  stack_t ss{};
  ss.ss_sp = alt_stack;
  ss.ss_size = sizeof(alt_stack);
  ::sigaltstack(&ss, nullptr);
  struct sigaction sa {};
  sa.sa_handler = on_fatal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_ONSTACK | SA_RESETHAND | SA_NODEFER;
  for (int sig : {SIGSEGV, SIGABRT, SIGBUS, SIGFPE, SIGILL}) ::sigaction(sig, &sa, nullptr);
}

void set_crash_journal(RunJournal* journal) { g_journal.store(journal, std::memory_order_release); }

CrashContext::CrashContext(const std::string& call_id_in, const std::string& agent_id_in,
                           const std::string& agent_class_in, std::uint32_t journal_slot_in) noexcept
    : call_id(call_id_in),
      agent_id(agent_id_in),
      agent_class(agent_class_in),
      journal_slot(journal_slot_in),
      saved_(t_running) {
  t_running = this;
}

CrashContext::~CrashContext() { t_running = saved_; }

}  // namespace agentd::detail

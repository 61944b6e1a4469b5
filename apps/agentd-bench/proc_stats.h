// What the kernel counts for a process on this machine, from /proc: the servers, gateways and
// echo processes the bench started. Each reads the figure now; see each for a process that is gone.
// Also where the bench places such a process's threads on CPUs (set_cpus).
#pragma once

#include <sched.h>
#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>

namespace agentd::bench {

// A number of kB from /proc/PID/status ("VmRSS", "VmHWM"), in bytes; 0 when unreadable.
std::uint64_t status_kb(pid_t pid, const std::string& field);

// CPU time every thread of pid has run, in seconds (the sum of /proc/PID/task/*/schedstat,
// nanosecond resolution); 0 when unreadable.
double cpu_seconds(pid_t pid);

// Context switches pid has made so far, voluntary or not, summed over its threads
// (/proc/PID/task/*/status): a thread that sleeps and is woken again is one. The thread
// hand-offs a call costs, counted without a clock, so the figure does not move with the
// machine's load. Empty when that /proc is not readable (the process is gone).
std::optional<std::uint64_t> context_switches(pid_t pid);

// Lets every thread of pid (/proc/PID/task) run only on cpus; false when one could not be set, or
// the process is gone.
bool set_cpus(pid_t pid, const cpu_set_t& cpus);

}  // namespace agentd::bench

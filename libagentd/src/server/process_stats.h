// ProcessStats: this process's own resource use as the kernel counts it (AgentServer.info,
// `agentctl info`). Any thread.
#pragma once

#include <cstdint>

namespace agentd::detail {

struct ProcessStats {
  std::uint64_t rss_bytes = 0;  // resident memory (/proc/self/statm)
  double cpu_seconds = 0;       // user + system time of every thread (getrusage)
};

// Reads them now; what cannot be read stays 0.
ProcessStats process_stats();

}  // namespace agentd::detail

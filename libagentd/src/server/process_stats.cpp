#include "process_stats.h"

#include <sys/resource.h>
#include <unistd.h>

#include <fstream>

namespace agentd::detail {

namespace {

std::uint64_t rss_bytes() {
  std::ifstream statm("/proc/self/statm");
  std::uint64_t size = 0, resident = 0;
  statm >> size >> resident;
  return resident * static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
}

double cpu_seconds() {
  rusage ru{};
  ::getrusage(RUSAGE_SELF, &ru);
  auto tv = [](const timeval& t) { return t.tv_sec + t.tv_usec / 1e6; };
  return tv(ru.ru_utime) + tv(ru.ru_stime);
}

}  // namespace

ProcessStats process_stats() { return ProcessStats{.rss_bytes = rss_bytes(), .cpu_seconds = cpu_seconds()}; }

}  // namespace agentd::detail

#include "proc_stats.h"

#include <dirent.h>

#include <fstream>
#include <functional>

namespace agentd::bench {

namespace {

// Calls each with /proc/PID/task/TID of every thread of pid; false when that directory cannot be
// opened. A thread that ends meanwhile leaves files that no longer open: read as nothing.
bool for_each_task(pid_t pid, const std::function<void(const std::string&)>& each) {
  const std::string dir = "/proc/" + std::to_string(pid) + "/task";
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return false;
  while (dirent* e = ::readdir(d))
    if (e->d_name[0] != '.') each(dir + "/" + e->d_name);
  ::closedir(d);
  return true;
}

// The number after "field:" in a status file (/proc/PID/status, /proc/PID/task/TID/status).
std::optional<std::uint64_t> status_number(const std::string& path, const std::string& field) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(field + ":", 0) == 0) return std::stoull(line.substr(field.size() + 1));
  return std::nullopt;
}

}  // namespace

std::uint64_t status_kb(pid_t pid, const std::string& field) {
  return status_number("/proc/" + std::to_string(pid) + "/status", field).value_or(0) * 1024;
}

double cpu_seconds(pid_t pid) {
  double total = 0;
  for_each_task(pid, [&](const std::string& task) {
    std::ifstream in(task + "/schedstat");
    unsigned long long ns = 0;
    if (in >> ns) total += static_cast<double>(ns) / 1e9;
  });
  return total;
}

std::optional<std::uint64_t> context_switches(pid_t pid) {
  std::uint64_t total = 0;
  const bool read = for_each_task(pid, [&](const std::string& task) {
    for (const char* field : {"voluntary_ctxt_switches", "nonvoluntary_ctxt_switches"})
      total += status_number(task + "/status", field).value_or(0);
  });
  if (!read) return std::nullopt;
  return total;
}

bool set_cpus(pid_t pid, const cpu_set_t& cpus) {
  bool ok = true, any = false;
  const bool read = for_each_task(pid, [&](const std::string& task) {
    const auto tid = static_cast<pid_t>(std::stol(task.substr(task.rfind('/') + 1)));
    ok = ::sched_setaffinity(tid, sizeof cpus, &cpus) == 0 && ok;
    any = true;
  });
  return read && any && ok;
}

}  // namespace agentd::bench

// Processes as /proc shows them, for tests that must find a process a server started (a tool
// server, its child) or see that it is gone. Linux only; header-only.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace agentd::test {

// The state letter ('R', 'S', 'Z', ...) and parent of pid, from /proc/PID/stat; nullopt when
// there is no such process.
struct ProcStat {
  char state = 0;
  pid_t parent = 0;
};

inline std::optional<ProcStat> proc_stat(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!stat || !std::getline(stat, line)) return std::nullopt;
  // "PID (COMM) STATE PPID ...": COMM may hold spaces and parentheses, so read after the last ')'.
  const auto close = line.rfind(')');
  if (close == std::string::npos || line.size() <= close + 2) return std::nullopt;
  std::istringstream rest(line.substr(close + 2));
  ProcStat out;
  rest >> out.state >> out.parent;
  if (!rest) return std::nullopt;
  return out;
}

// Whether pid runs: it exists and is not a zombie nobody reaped yet (an orphan in a container
// without a reaping init counts as gone).
inline bool process_alive(pid_t pid) {
  if (pid <= 0 || ::kill(pid, 0) != 0) return false;
  auto st = proc_stat(pid);
  return !st || st->state != 'Z';
}

// The live (not zombie) children of parent whose command line contains needle.
inline std::vector<pid_t> child_pids(pid_t parent, std::string_view needle) {
  std::vector<pid_t> out;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    const auto pid = static_cast<pid_t>(std::stol(name));
    auto st = proc_stat(pid);
    if (!st || st->parent != parent || st->state == 'Z') continue;
    std::ifstream cmdline(entry.path() / "cmdline");
    const std::string args((std::istreambuf_iterator<char>(cmdline)), std::istreambuf_iterator<char>());
    if (args.find(needle) != std::string::npos) out.push_back(pid);
  }
  return out;
}

}  // namespace agentd::test

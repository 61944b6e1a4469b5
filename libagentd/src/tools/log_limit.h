// LogLimit: at most kLinesPerSecond log lines per second from one tool server (its stderr lines,
// its notifications/message); past that, lines are counted and dropped, and the next line let
// through is preceded by one "suppressed N lines" line. A chatty or hostile server cannot flood
// as_server's log. Loop thread only.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include <spdlog/spdlog.h>

namespace agentd::detail {

class LogLimit {
 public:
  static constexpr int kLinesPerSecond = 20;

  // Whether a line may be logged now; when it may after some were dropped, logs the count first.
  bool allow(const std::string& server) {
    const auto now = std::chrono::steady_clock::now();
    if (now - window_start_ >= std::chrono::seconds(1)) {
      window_start_ = now;
      in_window_ = 0;
    }
    if (in_window_ >= kLinesPerSecond) {
      ++suppressed_;
      return false;
    }
    ++in_window_;
    if (suppressed_ > 0) {
      spdlog::info("tool server '{}': suppressed {} lines (more than {} a second)", server, suppressed_,
                   kLinesPerSecond);
      suppressed_ = 0;
    }
    return true;
  }

  std::uint64_t suppressed() const { return suppressed_; }

 private:
  std::chrono::steady_clock::time_point window_start_{};
  int in_window_ = 0;
  std::uint64_t suppressed_ = 0;
};

}  // namespace agentd::detail

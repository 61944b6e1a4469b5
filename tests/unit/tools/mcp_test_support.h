// What the MCP session and registry tests share: configs for tests/mcp/fault_server.py and the
// reference server-everything (tests/mcp/node_modules), a KJ loop, waits with generous deadlines,
// and the log captured to check what tool servers' stderr became.
#pragma once

#include <agentd/error.h>

#include <catch2/catch.hpp>

#include <kj/async-io.h>
#include <kj/async.h>

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/spdlog.h>

#include "kj_errors.h"
#include "tool_config.h"

namespace agentd::test {

inline const std::string kFaultServer = AGENTD_SOURCE_DIR "/tests/mcp/fault_server.py";
inline const std::string kEverything =
    AGENTD_SOURCE_DIR "/tests/mcp/node_modules/@modelcontextprotocol/server-everything/dist/index.js";

// A stdio config running fault_server.py with extra arguments.
inline detail::ToolServerConfig fault_config(std::string name, std::vector<std::string> args = {}) {
  detail::ToolServerConfig c;
  c.name = std::move(name);
  c.argv = {"python3", kFaultServer};
  c.argv.insert(c.argv.end(), args.begin(), args.end());
  c.call_timeout = std::chrono::seconds(30);
  c.start_timeout = std::chrono::seconds(30);
  return c;
}

// The full path of `node` on this process's PATH, or empty.
inline std::string find_node() {
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "/usr/local/bin:/usr/bin:/bin");
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    std::string file = dir + "/node";
    if (!dir.empty() && ::access(file.c_str(), X_OK) == 0) return file;
  }
  return {};
}

// server-everything over stdio (node found on PATH; the config gets its full path).
inline detail::ToolServerConfig everything_config(const std::string& node, std::string name = "every") {
  detail::ToolServerConfig c;
  c.name = std::move(name);
  c.argv = {node, kEverything, "stdio"};
  c.call_timeout = std::chrono::seconds(30);
  c.start_timeout = std::chrono::seconds(60);
  return c;
}

// The agentd::Error a promise rejects with (the test fails when it resolves).
template <typename T>
Error rejection_of(kj::Promise<T>&& promise, kj::WaitScope& ws) {
  try {
    promise.wait(ws);
  } catch (const kj::Exception& e) {
    return detail::error_from_kj(e);
  }
  FAIL("expected the promise to reject");
  return Error(ErrorCode::internal, "unreachable");
}

// Runs the loop until pred() holds; fails the test after `limit` (generous: not a timing check).
inline void run_until(kj::AsyncIoContext& io, const std::function<bool()>& pred,
                      std::chrono::seconds limit = std::chrono::seconds(20)) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > deadline) FAIL("the condition did not hold within the deadline");
    io.provider->getTimer().afterDelay(10 * kj::MILLISECONDS).wait(io.waitScope);
  }
}

inline std::vector<std::string> read_lines(const std::string& path) {
  std::vector<std::string> lines;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) lines.push_back(line);
  return lines;
}

// A fresh file name under the temp dir (removed by the test's ScopedFile).
struct ScopedFile {
  std::string path;
  explicit ScopedFile(const std::string& stem)
      : path((std::getenv("TMPDIR") ? std::string(std::getenv("TMPDIR")) : std::string("/tmp")) + "/" + stem +
             "-" + std::to_string(::getpid()) + "-" + std::to_string(counter()++)) {
    std::remove(path.c_str());
  }
  ~ScopedFile() { std::remove(path.c_str()); }
  static int& counter() {
    static int n = 0;
    return n;
  }
};

// While it exists, the default logger also writes into a ring buffer the test reads.
class CapturedLog {
 public:
  CapturedLog()
      : sink_(std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(1000)), old_(spdlog::default_logger()) {
    auto logger = std::make_shared<spdlog::logger>("captured", sink_);
    logger->set_level(spdlog::level::debug);
    spdlog::set_default_logger(logger);
  }
  ~CapturedLog() { spdlog::set_default_logger(old_); }
  bool contains(const std::string& text) const {
    for (const auto& line : sink_->last_formatted())
      if (line.find(text) != std::string::npos) return true;
    return false;
  }

 private:
  std::shared_ptr<spdlog::sinks::ringbuffer_sink_mt> sink_;
  std::shared_ptr<spdlog::logger> old_;
};

// Writing to a pipe whose reader died must fail the write, not kill the test (as_server does the same).
inline void ignore_sigpipe() { ::signal(SIGPIPE, SIG_IGN); }

}  // namespace agentd::test

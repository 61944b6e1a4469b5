// The models a server offers its agents, by config name, replaceable at run time.
#pragma once

#include <agentd/model.h>
#include <agentd/tool.h>

#include "model_config.h"

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace agentd::detail {

// Counters of one model's calls. Cheap (relaxed atomics); any thread may record and read.
struct ModelUsage {
  std::uint64_t calls = 0;   // finished calls, failed ones included
  std::uint64_t errors = 0;  // calls that threw
  std::int64_t prompt_tokens = 0;
  std::int64_t completion_tokens = 0;
  std::int64_t latency_ms = 0;  // summed over all calls
  // Calls by latency (UsageCounter::kLatencyBounds; not cumulative), kept by counters made
  // with a histogram (a config's, not an agent's); empty otherwise.
  std::vector<std::uint64_t> latency_buckets;

  ModelUsage& operator+=(const ModelUsage& other);
};

class UsageCounter {
 public:
  // Upper bounds (seconds) of the latency buckets; calls past the last count only in calls.
  // From a millisecond (a local model) to two minutes (a long generation).
  static constexpr std::array<double, 16> kLatencyBounds = {
      0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120};
  // with_histogram: also count calls by latency (128 bytes; agents' own counters don't).
  explicit UsageCounter(bool with_histogram = false);

  void record(const ChatResponse& response);
  void record(const EmbeddingResponse& response);  // its tokens count as prompt tokens
  void record_error(std::chrono::milliseconds latency);
  ModelUsage snapshot() const;

  // The agent's MCP tool calls (agentd/tool.h), kept until the host takes them into the span of
  // the call that made them. Any thread. Costs a pointer until the first tool call.
  void record_tool(const ToolCallSpan& span);
  std::vector<ToolCallSpan> take_tool_calls();
  bool has_tool_calls() const { return tool_calls_.load(std::memory_order_acquire) != nullptr; }

  ~UsageCounter();
  UsageCounter(const UsageCounter&) = delete;
  UsageCounter& operator=(const UsageCounter&) = delete;

 private:
  std::atomic<std::uint64_t> calls_{0};
  std::atomic<std::uint64_t> errors_{0};
  std::atomic<std::int64_t> prompt_tokens_{0};
  std::atomic<std::int64_t> completion_tokens_{0};
  std::atomic<std::int64_t> latency_ms_{0};
  std::unique_ptr<std::array<std::atomic<std::uint64_t>, kLatencyBounds.size()>> buckets_;
  struct ToolLog;
  std::atomic<ToolLog*> tool_calls_{nullptr};  // made at the first tool call, freed with the counter

  void observe(std::chrono::milliseconds latency);
};

// A ChatModel that records every call of `model` in each of `counters` (e.g. the registry's
// per-config counter and an agent's own), then forwards the result or the exception unchanged.
std::shared_ptr<ChatModel> with_usage_counters(std::shared_ptr<ChatModel> model,
                                               std::vector<std::shared_ptr<UsageCounter>> counters);

// Builds the client for config.model_type. Does no I/O. Throws Error(config_error) for an unknown type.
std::shared_ptr<ChatModel> make_chat_model(const ModelConfig& config);

// One configured model, as `info` and agent listings show it.
struct ModelInfo {
  std::string config_name;
  std::string model_type;
  std::string model_name;
  std::uint64_t version = 0;  // the registry version() that loaded this config
  ModelUsage usage;           // since the server started, across reloads of the same config_name
};

// Thread-safe: get()/names()/list() run concurrently with replace() from any thread. A replace()
// is atomic: a get() sees either the old set or the new one, and a model handed out before a
// replace() keeps working (callers own it through the shared_ptr) until its last user drops it.
class ModelRegistry {
 public:
  // Starts with only the built-in "echo" model (config_name "echo", model_type "echo"), version 1.
  ModelRegistry();

  // Replaces all configs at once and bumps version(). The built-in echo stays available unless a
  // config named "echo" overrides it. A config identical to the one it replaces keeps its model
  // (and its version). Returns the new version(). Throws Error(config_error) on an unknown
  // model_type or a duplicate config_name, leaving the registry unchanged.
  std::uint64_t replace(std::vector<ModelConfig> configs);

  // The model named config_name. Throws Error(config_error) naming the known config names.
  std::shared_ptr<ChatModel> get(std::string_view config_name) const;

  std::vector<std::string> names() const;  // sorted
  std::uint64_t version() const;
  std::vector<ModelInfo> list() const;  // sorted by config_name
  ModelUsage total_usage() const;       // all models, all versions

 private:
  struct Entry {
    ModelConfig config;
    std::shared_ptr<ChatModel> model;  // already wrapped with the counter
    std::uint64_t version = 0;
  };
  using Snapshot = std::map<std::string, Entry, std::less<>>;

  mutable std::mutex mutex_;  // guards the members below; held only to copy or swap pointers
  std::shared_ptr<const Snapshot> snapshot_;
  std::uint64_t version_ = 0;
  std::map<std::string, std::shared_ptr<UsageCounter>, std::less<>> counters_;
};

}  // namespace agentd::detail

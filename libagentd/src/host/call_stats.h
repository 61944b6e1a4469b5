// Call statistics the agent host keeps per server: counters of finished calls (in all and by
// agent class), the run-time histogram, and the ring of the latest trace spans.
#pragma once

#include "span_record.h"

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace agentd::detail {

struct AgentSlot;
struct Call;

// Run times of finished calls. Not thread-safe: the agent host records under its lock.
struct LatencyHistogram {
  static constexpr std::array<double, 11> kBounds = {0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05,
                                                     0.1,    0.5,    1,     5,     10};
  std::array<std::uint64_t, kBounds.size()> buckets{};  // per bucket, not cumulative
  std::uint64_t count = 0;                              // every observation (the +Inf bucket)
  double sum = 0;                                       // seconds

  void observe(double seconds);
};

// Not thread-safe: the agent host calls it under its lock.
class CallStats {
 public:
  // Trace spans of finished calls are kept in a ring of max_spans (oldest dropped first).
  static constexpr std::size_t kMaxSpans = 4096;
  explicit CallStats(std::size_t max_spans = kMaxSpans) : max_spans_(max_spans) {}

  // A call that ran on an agent of class_name finished at `finished`: counts it (ok or failed,
  // in all and by class), observes its run time and keeps its span (seq set here), a copy of
  // which goes to *span_out when not null.
  void finished(const AgentSlot& slot, const Call& call, std::chrono::steady_clock::time_point finished,
                SpanRecord* span_out);
  // A call failed without running (an unknown agent, a failed input, the server stopping, a
  // deadline passed in the mailbox): counted as failed under class_name ("(none)" when empty).
  void failed_without_running(const std::string& class_name);
  // Counts one finished call (finished() does it too; not when !counted: a read of an agent's
  // memory) and keeps span; its seq is set here. Returns the kept span.
  const SpanRecord& record(const std::string& class_name, bool ok, double run_seconds, SpanRecord span,
                           bool counted = true);

  std::uint64_t completed() const { return completed_; }
  std::uint64_t failed() const { return failed_; }
  // Finished calls by agent class: class -> {ok, error}.
  const std::map<std::string, std::pair<std::uint64_t, std::uint64_t>>& by_class() const { return by_class_; }
  const LatencyHistogram& latency() const { return latency_; }
  // The newest min(limit, kept) spans, oldest first; limit 0: all kept.
  std::vector<SpanRecord> recent_spans(std::size_t limit) const;

 private:
  // Counts one finished call: in all, by class, and its run time.
  void count(const std::string& class_name, bool ok, double run_seconds);
  // The ring's next slot, its seq set: the newest span is written there in place, so once the
  // ring is full a span reuses the memory of the one it replaces (no allocation per call).
  SpanRecord& next_span();

  const std::size_t max_spans_;
  std::uint64_t completed_ = 0;
  std::uint64_t failed_ = 0;
  std::map<std::string, std::pair<std::uint64_t, std::uint64_t>> by_class_;
  LatencyHistogram latency_;
  std::vector<SpanRecord> spans_;  // ring: spans_[span_seq_ % max_spans_] is written next
  std::uint64_t span_seq_ = 0;     // spans recorded so far
};

}  // namespace agentd::detail

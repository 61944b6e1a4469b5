// W10: streamed replies.
#include "workloads.h"

#include "workloads/common.h"

#include <chrono>

namespace agentd::bench {

// How long a streamed reply's chunks take from the agent's emit_chunk to next_chunk() in this
// program: StreamEchoAgent puts its steady_clock time (CLOCK_MONOTONIC on Linux, the same clock
// in every process of a machine) into each chunk, this process subtracts on arrival. Each reply
// emits 3 chunks 2 ms apart, so each chunk travels on its own (not batched with the result).
void run_w10(const Config& cfg, Deployment& dep, Report& report) {
  if (!dep.has_class(0, "StreamEchoAgent")) {
    report.skipped.push_back("W10: server 1 has no StreamEchoAgent (an older echo_agent plugin)");
    return;
  }
  AgentRef agent = dep.client(0).create_agent("StreamEchoAgent", "bench-w10");
  const Msg msg("bench", Value{{"count", 3}, {"gap_ms", 2}, {"clock", true}});
  const std::size_t replies = cfg.quick ? 50 : 500;
  Row p50{"W10", "streamed reply: first chunk emit -> read p50", "us"};
  Row p99{"W10", "streamed reply: first chunk emit -> read p99", "us"};
  Row all99{"W10", "streamed reply: any chunk emit -> read p99", "us"};
  auto latency_us = [](const std::string& chunk) {
    const auto now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                         std::chrono::steady_clock::now().time_since_epoch())
                         .count();
    return static_cast<double>(now - std::stoll(chunk)) / 1e3;
  };
  for (int r = 0; r < cfg.repeat; ++r) {
    progress(fmt::format("W10 repeat {}/{}", r + 1, cfg.repeat));
    std::vector<double> first, any;
    first.reserve(replies);
    for (std::size_t i = 0; i < replies; ++i) {
      Placeholder p = agent.reply_stream(msg);
      bool is_first = true;
      std::size_t n = 0;
      while (auto chunk = p.next_chunk()) {
        const double us = latency_us(*chunk);
        if (is_first) first.push_back(us);
        any.push_back(us);
        is_first = false;
        ++n;
      }
      expect(n == 3, "W10: a streamed reply did not bring its 3 chunks");
    }
    p50.agentd.add(percentile(first, 50));
    p99.agentd.add(percentile(first, 99));
    all99.agentd.add(percentile(any, 99));
  }
  p50.target = at_most(1000, "< 1000 us");
  p99.target = at_most(1000, "< 1000 us");
  p50.note = fmt::format("{} replies of 3 chunks 2 ms apart; agent and bench on one machine", replies);
  report.rows.push_back(std::move(p50));
  report.rows.push_back(std::move(p99));
  report.rows.push_back(std::move(all99));
  cleanup(dep, 0, {agent}, 1);
}

}  // namespace agentd::bench

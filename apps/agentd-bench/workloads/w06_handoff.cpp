// W6: cross-server hand-off.
#include "workloads.h"

#include "workloads/common.h"

namespace agentd::bench {

namespace {

struct ByteCounters {
  std::uint64_t client = 0;
  std::uint64_t peer = 0;
};

ByteCounters snapshot(Deployment& dep, std::size_t a, std::size_t b) {
  ByteCounters out;
  for (std::size_t i : {a, b}) {
    ServerInfo info = dep.client(i).info();
    out.client += info.bytes_client_in + info.bytes_client_out;
    out.peer += info.bytes_peer_in + info.bytes_peer_out;
  }
  return out;
}

// Servers count a connection as a peer's once the other end fetches a result over it (only
// servers do), so the client counters hold exactly what went through clients (this process).
double through_client(const ByteCounters& before, const ByteCounters& after) {
  return static_cast<double>(after.client - before.client);
}

}  // namespace

void run_w6(const Config& cfg, Deployment& dep, Report& report) {
  if (dep.size() < 2) {
    report.skipped.push_back("W6: needs two servers (give --server twice)");
    return;
  }
  require_class(dep, 0, "EchoAgent");
  require_class(dep, 1, "WebAgent");
  AgentRef producer = dep.client(0).create_agent("EchoAgent", "bench-w6-producer");
  // A web agent that does not sleep: it must receive the whole input, and answers a few bytes.
  AgentRef consumer = dep.client(1).create_agent("WebAgent", "bench-w6-consumer", Value{{"sleep_ms", 0}});
  Msg big = text_msg(cfg.message_bytes);
  Row time{"W6", fmt::format("{} KiB hand-off server 1 -> 2", cfg.message_bytes / 1024), "ms"};
  Row bytes{"W6", "bytes through the client", "B"};
  time.baseline_name = "direct fetch";
  bytes.baseline_name = "direct fetch";
  // Produces the big message on server 1 and waits until it is in the pool (call() runs after
  // the reply, in the agent's order), so neither timing includes production.
  auto produce = [&]() {
    Placeholder p = producer.reply(big);
    producer.call("count");
    return p;
  };
  // Each repeat times several hand-offs and direct fetches, alternating, and keeps the median
  // of each: single transfers on a shared machine scatter too much to compare.
  constexpr int kInner = 5;
  for (int r = 0; r < cfg.repeat; ++r) {
    progress(fmt::format("W6 repeat {}/{}", r + 1, cfg.repeat));
    std::vector<double> handoff_ms, direct_ms;
    for (int k = 0; k < kInner; ++k) {
      Placeholder p = produce();
      auto s0 = snapshot(dep, 0, 1);
      auto s1 = snapshot(dep, 0, 1);  // two snapshots back to back: what a snapshot costs
      auto t0 = Clock::now();
      Msg answer = consumer.reply(p).get();
      handoff_ms.push_back(seconds_since(t0) * 1e3);
      auto s2 = snapshot(dep, 0, 1);
      expect(answer.text().rfind("Answer from", 0) == 0, "W6: odd consumer answer");
      double overhead = through_client(s0, s1);
      expect(s2.peer - s1.peer >= cfg.message_bytes, "W6: the message did not cross the peer link");

      Placeholder q = produce();
      auto d1 = snapshot(dep, 0, 1);
      t0 = Clock::now();
      Msg direct = q.get();
      direct_ms.push_back(seconds_since(t0) * 1e3);
      auto d2 = snapshot(dep, 0, 1);
      expect(direct.text().size() == cfg.message_bytes, "W6: direct fetch lost bytes");
      if (k == 0) {
        bytes.agentd.add(through_client(s1, s2) - overhead);
        bytes.baseline.add(through_client(d1, d2) - overhead);
      }
    }
    time.agentd.add(percentile(handoff_ms, 50));
    time.baseline.add(percentile(direct_ms, 50));
  }
  time.target = at_most_ratio(1.2, "<= 1.2x");
  bytes.target = at_most(4096, "< 4096 B");
  bytes.note = "from both servers' info() client byte counters, less the info() calls' own bytes";
  report.rows.push_back(std::move(time));
  report.rows.push_back(std::move(bytes));
  cleanup(dep, 0, {producer}, 1);
  cleanup(dep, 1, {consumer}, 1);
}

}  // namespace agentd::bench

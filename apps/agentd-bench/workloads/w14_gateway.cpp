// W14: agentd-gateway, the HTTP gateway (OpenAI-compatible API), in front of server 1: a real
// agentd-gateway child (found like as_server: --gateway, $AGENTD_GATEWAY, beside this program,
// $PATH) and the bench's own HTTP clients (http_load.h). Three parts:
//   latency   sequential non-streamed chat completions over one keep-alive connection, beside
//             the same reply through the C++ client to the same EchoAgent, in alternating blocks;
//   load      --gateway-requests completions over --gateway-connections keep-alive connections
//             to 10 EchoAgents (a closed loop), beside a W2-style burst of as many replies
//             through the C++ client; the gateway's threads and RSS;
//   streams   --gateway-streams streamed completions (StreamEchoAgent) all at once, each on its
//             own connection, on a fresh gateway per repeat: time until all are delivered, every
//             text checked, the gateway's peak RSS.
#include "workloads.h"

#include "workloads/common.h"

#include "gateway_process.h"
#include "http_load.h"

#include <nlohmann/json.hpp>

#include <dirent.h>
#include <poll.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>

namespace agentd::bench {

namespace {

using nlohmann::json;

// Words in each streamed completion's text (StreamEchoAgent streams them one chunk each): enough
// that the streams overlap, all open at once at the gateway.
constexpr int kStreamWords = 64;

std::string chat_body(const std::string& model, const std::string& text, bool stream) {
  json body{{"model", model}, {"messages", json::array({{{"role", "user"}, {"content", text}}})}};
  if (stream) body["stream"] = true;
  return body.dump();
}

// The text of a non-streamed completion, or what is wrong with the answer.
std::optional<std::string> completion_text(const HttpAnswer& a, std::string& wrong) {
  if (a.status != 200) {
    wrong = fmt::format("HTTP {}: {}", a.status, a.body.substr(0, 300));
    return std::nullopt;
  }
  try {
    return json::parse(a.body).at("choices").at(0).at("message").at("content").get<std::string>();
  } catch (const std::exception& e) {
    wrong = fmt::format("not a chat.completion ({}): {}", e.what(), a.body.substr(0, 300));
    return std::nullopt;
  }
}

// A streamed completion's events: "" when they carry exactly `text` (the deltas joined), end with
// finish_reason "stop" and then one [DONE]; else what is wrong.
std::string check_stream(const std::string& body, const std::string& text) {
  std::string joined;
  bool stopped = false, done = false;
  std::size_t at = 0;
  while (at < body.size()) {
    auto end = body.find("\n\n", at);
    if (end == std::string::npos) return "an event without its blank line at the end";
    const std::string event = body.substr(at, end - at);
    at = end + 2;
    if (done) return "an event after [DONE]";
    if (event.rfind("data: ", 0) != 0) return "an event that is not \"data: ...\": " + event.substr(0, 100);
    const std::string data = event.substr(6);
    if (data == "[DONE]") {
      done = true;
      continue;
    }
    const json chunk = json::parse(data, nullptr, false);
    if (chunk.is_discarded() || !chunk.contains("choices"))
      return "an event that is not a chunk: " + data.substr(0, 200);
    const json& choice = chunk.at("choices").at(0);
    if (choice.contains("delta") && choice.at("delta").contains("content"))
      joined += choice.at("delta").at("content").get<std::string>();
    if (choice.value("finish_reason", json()) == "stop") stopped = true;
  }
  if (!done) return "no [DONE]";
  if (!stopped) return "no finish_reason \"stop\"";
  if (joined != text) return fmt::format("the text is \"{}\", not \"{}\"", joined, text);
  return "";
}

struct Gateway {
  std::string binary;
  std::string server;  // host:port of server 1
  std::string token;
};

// Part 1: sequential completions through the gateway and replies through the C++ client, to one
// EchoAgent, alternating blocks of 100 (so a busy moment of a shared machine hits both).
void run_latency(const Config& cfg, Deployment& dep, GatewayProcess& gp, Report& report) {
  Client& c = dep.client(0);
  AgentRef agent = c.create_agent("EchoAgent", "bench-w14-echo");
  const std::string text(cfg.payload, 'x');
  const Msg msg("user", text, "user");  // what the gateway makes of a user message
  const std::string body = chat_body(agent.id(), text, false);
  HttpConnection http("127.0.0.1", gp.port());
  auto via_gateway = [&] {
    const auto t0 = Clock::now();
    HttpAnswer a = http.post_json("/v1/chat/completions", body);
    const double us = micros_since(t0);
    std::string wrong;
    auto got = completion_text(a, wrong);
    expect(got.has_value(), "W14: a completion through the gateway failed: " + wrong);
    expect(*got == text, "W14: the gateway answered another text");
    return us;
  };
  auto via_client = [&] {
    const auto t0 = Clock::now();
    Msg m = agent.reply(msg).get();
    const double us = micros_since(t0);
    expect(m.text() == text, "W14: the echo agent answered another text");
    return us;
  };
  Row g50{"W14", "gateway chat completion p50 (1 keep-alive connection)", "us"};
  Row g99{"W14", "gateway chat completion p99", "us"};
  Row over{"W14", "gateway overhead p50 (completion - reply().get())", "us"};
  Row cpu{"W14", "gateway CPU per sequential completion", "us"};
  for (int i = 0; i < 50; ++i) {
    via_gateway();
    via_client();
  }
  constexpr std::size_t kBlock = 100;
  for (int r = 0; r < cfg.repeat; ++r) {
    progress(fmt::format("W14 latency repeat {}/{}", r + 1, cfg.repeat));
    std::vector<double> g, b;
    g.reserve(cfg.calls);
    b.reserve(cfg.calls);
    double gateway_cpu = 0;
    for (std::size_t done = 0, k = 0; done < cfg.calls; ++k) {
      const std::size_t n = std::min(kBlock, cfg.calls - done);
      auto gateway_block = [&] {
        const double cpu0 = gp.cpu();
        for (std::size_t i = 0; i < n; ++i) g.push_back(via_gateway());
        gateway_cpu += gp.cpu() - cpu0;
      };
      auto client_block = [&] {
        for (std::size_t i = 0; i < n; ++i) b.push_back(via_client());
      };
      if ((k + static_cast<std::size_t>(r)) % 2 == 0) {
        gateway_block();
        client_block();
      } else {
        client_block();
        gateway_block();
      }
      done += n;
    }
    add_p50_p99(g50, g99, g, &b);
    over.agentd.add(percentile(g, 50) - percentile(b, 50));
    cpu.agentd.add(gateway_cpu * 1e6 / static_cast<double>(cfg.calls));
  }
  g50.baseline_name = g99.baseline_name = "C++ client reply().get()";
  over.target = at_most(150, "<= 150 us");
  over.note = fmt::format(
      "{}-byte text to one EchoAgent; gateway p50 minus the C++ client's p50, same run, "
      "alternating blocks of {}",
      cfg.payload, kBlock);
  cpu.note = "all the gateway's threads (/proc/PID/task/*/schedstat) over the sequential completions";
  for (Row* row : {&g50, &g99, &over, &cpu}) report.rows.push_back(std::move(*row));
  cleanup(dep, 0, {agent}, 1);
}

// n agents of class_name named PREFIX-0, PREFIX-1, ..., and their ids.
std::vector<AgentRef> make_agents(Client& c, const std::string& class_name, const std::string& prefix,
                                  std::size_t n) {
  std::vector<AgentRef> agents;
  for (std::size_t i = 0; i < n; ++i)
    agents.push_back(c.create_agent(class_name, fmt::format("{}-{}", prefix, i)));
  return agents;
}

std::vector<std::string> ids_of(const std::vector<AgentRef>& agents) {
  std::vector<std::string> ids;
  for (const auto& a : agents) ids.push_back(a.id());
  return ids;
}

// Part 2: completions/s over many keep-alive connections to 10 EchoAgents, beside as many replies
// through the C++ client (W2's burst); the gateway's threads and RSS afterwards.
void run_throughput(const Config& cfg, Deployment& dep, GatewayProcess& gp, Report& report) {
  std::vector<AgentRef> agents = make_agents(dep.client(0), "EchoAgent", "bench-w14-load", cfg.echo_agents);
  const std::vector<std::string> ids = ids_of(agents);
  {  // each agent once, so that the gateway knows them all before the clock starts
    HttpConnection http("127.0.0.1", gp.port());
    for (const auto& id : ids) {
      std::string wrong;
      expect(completion_text(http.post_json("/v1/chat/completions", chat_body(id, "warm", false)), wrong)
                 .has_value(),
             "W14: " + wrong);
    }
  }
  LoadPlan plan;
  plan.port = gp.port();
  plan.connections = cfg.gateway_connections;
  plan.requests = cfg.gateway_requests;
  plan.body = [&](std::size_t i) { return chat_body(ids[i % ids.size()], fmt::format("r{}", i), false); };
  plan.check = [](std::size_t i, const HttpAnswer& a) -> std::string {
    if (a.status != 200) return fmt::format("HTTP {}: {}", a.status, a.body.substr(0, 300));
    // The completion is compact JSON: its message's content is exactly the text sent.
    if (a.body.find(fmt::format("\"content\":\"r{}\"", i)) == std::string::npos)
      return "the answer does not carry the text sent: " + a.body.substr(0, 300);
    return "";
  };
  const std::string agents_text = fmt::format("{} EchoAgents", agents.size());
  Row rate{"W14",
           fmt::format("gateway completions/s, {} keep-alive connections, {}", cfg.gateway_connections,
                       agents_text),
           "req/s"};
  Row cpu{"W14", "gateway CPU per completion under load", "us"};
  Row threads{"W14", fmt::format("gateway threads (--threads {})", cfg.gateway_threads), "threads"};
  Row rss{"W14", "gateway RSS after the load", "MiB"};
  const Msg msg("user", "r", "user");
  for (int r = 0; r < cfg.repeat; ++r) {
    progress(fmt::format("W14 load repeat {}/{} ({} completions over {} connections)", r + 1, cfg.repeat,
                         plan.requests, plan.connections));
    const double cpu0 = gp.cpu();
    LoadResult res = run_load(plan);
    const double gateway_cpu = gp.cpu() - cpu0;
    expect(res.failed == 0, fmt::format("W14: {} of {} completions failed; the first: {}", res.failed,
                                        plan.requests, res.first_failure));
    rate.agentd.add(static_cast<double>(res.ok) / res.seconds);
    cpu.agentd.add(gateway_cpu * 1e6 / static_cast<double>(res.ok));
    threads.agentd.add(static_cast<double>(gp.threads()));
    rss.agentd.add(mib(gp.rss()));
    rate.baseline.add(reply_burst(agents, msg, plan.requests, pool_window(dep, 0)));
  }
  rate.baseline_name = "C++ client burst (W2)";
  rate.target = at_least(20000, ">= 20000/s");
  rate.note =
      "a closed loop: each connection sends its next request once the answer is read; client, gateway "
      "and server on this machine";
  threads.note =
      "/proc/PID/status Threads of the gateway: its --threads, the client library's loop, the lookup "
      "and connecting threads";
  for (Row* row : {&rate, &cpu, &threads, &rss}) report.rows.push_back(std::move(*row));
  cleanup(dep, 0, agents, 1);
}

// Part 3: streamed completions all at once, each on its own connection, on a fresh gateway per
// repeat (so its peak RSS is this part's).
void run_streams(const Config& cfg, Deployment& dep, const Gateway& gw, Report& report) {
  std::vector<AgentRef> agents =
      make_agents(dep.client(0), "StreamEchoAgent", "bench-w14-stream", cfg.echo_agents);
  const std::vector<std::string> ids = ids_of(agents);
  const std::size_t n = cfg.gateway_streams;
  // Each stream's text: its number, then more words; StreamEchoAgent streams it word by word.
  auto text_of = [](std::size_t i) {
    std::string t = fmt::format("s{}", i);
    for (int w = 1; w <= kStreamWords - 1; ++w) t += fmt::format(" w{}", w);
    return t;
  };
  std::vector<std::string> bodies(n);
  LoadPlan plan;
  plan.connections = n;
  plan.requests = n;
  plan.body = [&](std::size_t i) { return chat_body(ids[i % ids.size()], text_of(i), true); };
  // The whole check (parsing every event) waits until all are in, off the clock.
  plan.check = [&](std::size_t i, const HttpAnswer& a) -> std::string {
    if (a.status != 200) return fmt::format("HTTP {}: {}", a.status, a.body.substr(0, 300));
    bodies[i] = a.body;
    return "";
  };
  Row time{"W14", fmt::format("{} SSE streams at once (StreamEchoAgent): all delivered", n), "s"};
  Row delivered{"W14", "streams delivered whole ([DONE], text checked)", "streams"};
  Row open{"W14", "streams open at once (most seen by the client)", "streams"};
  Row peak{"W14", fmt::format("gateway peak RSS with {} streams", n), "MiB"};
  Row per{"W14", "gateway RSS per stream ((peak - idle) / N)", "KiB"};
  for (int r = 0; r < cfg.repeat; ++r) {
    progress(fmt::format("W14 streams repeat {}/{} ({} at once)", r + 1, cfg.repeat, n));
    GatewayProcess gp(gw.binary, gw.server, gw.token, cfg, dep.owned());
    {
      HttpConnection http("127.0.0.1", gp.port());
      for (const auto& id : ids) {
        std::string wrong;
        expect(completion_text(http.post_json("/v1/chat/completions", chat_body(id, "warm", false)), wrong)
                   .has_value(),
               "W14: " + wrong);
      }
    }
    const std::uint64_t idle = gp.rss();
    plan.port = gp.port();
    std::fill(bodies.begin(), bodies.end(), std::string());
    LoadResult res = run_load(plan);
    expect(res.failed == 0,
           fmt::format("W14: {} of {} streams failed; the first: {}", res.failed, n, res.first_failure));
    std::size_t whole = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const std::string wrong = check_stream(bodies[i], text_of(i));
      expect(wrong.empty(), fmt::format("W14: stream {}: {}", i, wrong));
      ++whole;
    }
    const std::uint64_t high = gp.peak_rss();
    time.agentd.add(res.seconds);
    delivered.agentd.add(static_cast<double>(whole));
    open.agentd.add(static_cast<double>(res.most_open));
    peak.agentd.add(mib(high));
    per.agentd.add((static_cast<double>(high) - static_cast<double>(idle)) / static_cast<double>(n) / 1024.0);
  }
  delivered.target = at_least(static_cast<double>(n), fmt::format("all {}", n));
  time.note = fmt::format(
      "{} connections opened first, then every request sent at once; {} words each "
      "streamed word by word by {} agents; the clock stops when the last [DONE] is in",
      n, kStreamWords, agents.size());
  peak.note = "VmHWM of a fresh gateway per repeat (/proc/PID/status)";
  for (Row* row : {&time, &delivered, &open, &peak, &per}) report.rows.push_back(std::move(*row));
  cleanup(dep, 0, agents, 1);
}

}  // namespace

void run_w14(const Config& cfg, Deployment& dep, Report& report) {
  Gateway gw;
  try {
    gw.binary = find_gateway(cfg);
  } catch (const NoGateway& e) {
    report.skipped.push_back(fmt::format("W14: {}", e.what()));
    progress(fmt::format("W14 skipped: {}", e.what()));
    return;
  }
  require_class(dep, 0, "EchoAgent");
  require_class(dep, 0, "StreamEchoAgent");
  // A socket per stream here and in the gateway (a child: it inherits the limit).
  rlimit files{};
  if (::getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < files.rlim_max) {
    files.rlim_cur = files.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &files);
  }
  Client& c = dep.client(0);
  const ServerInfo info = c.info();
  gw.server = info.advertise_address.empty() ? c.address() : info.advertise_address;
  gw.token = dep.client_options().token;
  progress(fmt::format("W14 {} --server {} --threads {}", gw.binary, gw.server, cfg.gateway_threads));
  {
    GatewayProcess gp(gw.binary, gw.server, gw.token, cfg, dep.owned());
    run_latency(cfg, dep, gp, report);
    if (cfg.gateway_requests > 0) run_throughput(cfg, dep, gp, report);
  }
  if (cfg.gateway_streams > 0) run_streams(cfg, dep, gw, report);
}

}  // namespace agentd::bench

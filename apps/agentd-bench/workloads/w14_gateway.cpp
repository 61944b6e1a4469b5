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

#include "http_load.h"
#include "private_dir.h"
#include "subprocess.h"

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

// No agentd-gateway to run: W14 is skipped, not failed.
struct NoGateway : std::runtime_error {
  using std::runtime_error::runtime_error;
};

std::string find_gateway(const Config& cfg) {
  namespace fs = std::filesystem;
  std::error_code ec;
  auto runnable = [&](const fs::path& p) {
    return ::access(p.c_str(), X_OK) == 0 && !fs::is_directory(p, ec);
  };
  if (!cfg.gateway.empty()) {
    if (!runnable(cfg.gateway))
      throw std::runtime_error(fmt::format("--gateway {}: not an executable file", cfg.gateway));
    return cfg.gateway;
  }
  if (const char* env = std::getenv("AGENTD_GATEWAY"); env && *env) {
    if (!runnable(env))
      throw std::runtime_error(fmt::format("$AGENTD_GATEWAY {}: not an executable file", env));
    return env;
  }
  std::vector<std::string> looked;
  if (auto self = fs::read_symlink("/proc/self/exe", ec); !ec) {
    const fs::path beside = self.parent_path() / "agentd-gateway";
    if (runnable(beside)) return beside.string();
    looked.push_back(beside.string());
  }
  std::string_view dirs = std::getenv("PATH") ? std::getenv("PATH") : "";
  while (!dirs.empty()) {
    const auto colon = dirs.find(':');
    const std::string dir(dirs.substr(0, colon));
    dirs = colon == std::string_view::npos ? std::string_view() : dirs.substr(colon + 1);
    if (!dir.empty() && runnable(fs::path(dir) / "agentd-gateway"))
      return (fs::path(dir) / "agentd-gateway").string();
  }
  looked.push_back("$PATH");
  std::string places;
  for (const auto& l : looked) places += (places.empty() ? "" : ", ") + l;
  throw NoGateway(fmt::format(
      "no agentd-gateway at {} (build it, or name it with --gateway PATH or $AGENTD_GATEWAY)", places));
}

// A number of kB from /proc/PID/status ("VmRSS", "VmHWM"), in bytes; 0 when unreadable.
std::uint64_t status_kb(pid_t pid, const std::string& field) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(field + ":", 0) == 0) return std::stoull(line.substr(field.size() + 1)) * 1024;
  return 0;
}

// CPU time every thread of pid has run, in seconds (the sum of /proc/PID/task/*/schedstat,
// nanosecond resolution).
double cpu_seconds(pid_t pid) {
  const std::string dir = "/proc/" + std::to_string(pid) + "/task";
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return 0;
  double total = 0;
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] == '.') continue;
    std::ifstream in(dir + "/" + e->d_name + "/schedstat");
    unsigned long long ns = 0;
    if (in >> ns) total += static_cast<double>(ns) / 1e9;
  }
  ::closedir(d);
  return total;
}

// A running agentd-gateway in front of server 1, stopped (SIGTERM) when destroyed. Its request
// log (one JSON line per request, on stderr) goes to a file in a private directory, quoted when
// it fails to start.
class GatewayProcess {
 public:
  GatewayProcess(const std::string& binary, const std::string& server, const std::string& token,
                 const Config& cfg, bool owned) {
    std::vector<std::string> argv = {binary,
                                     "--listen",
                                     "127.0.0.1:0",
                                     "--server",
                                     server,
                                     "--threads",
                                     std::to_string(cfg.gateway_threads)};
    if (!token.empty()) {
      argv.push_back("--upstream-token-file");
      argv.push_back(dir_.write_private("upstream-token", token));
    }
    if (!owned && !cfg.tls_ca.empty() && cfg.tls_server.empty()) {
      argv.insert(argv.end(), {"--upstream-tls-ca", cfg.tls_ca});
      if (!cfg.tls_cert.empty())
        argv.insert(argv.end(), {"--upstream-tls-cert", cfg.tls_cert, "--upstream-tls-key", cfg.tls_key});
    }
    log_ = dir_.add_file("gateway.log");
    detail::SpawnOptions spawn;
    spawn.argv = argv;
    spawn.in = detail::Redirect::null();
    spawn.out = detail::Redirect::pipe();
    spawn.err = detail::Redirect::append_to(log_);
    process_ = detail::Subprocess::spawn(spawn);
    // "agentd-gateway ready: listening on 127.0.0.1:PORT server=... pid=N"
    const std::string line = ready_line(std::chrono::seconds(20));
    const std::string marker = "listening on ";
    const auto at = line.find(marker);
    const auto end = at == std::string::npos ? at : line.find(' ', at + marker.size());
    const std::string listen =
        at == std::string::npos ? std::string() : line.substr(at + marker.size(), end - at - marker.size());
    const auto colon = listen.rfind(':');
    if (colon == std::string::npos)
      throw std::runtime_error(
          fmt::format("agentd-gateway did not start: it said \"{}\"; its log ends:\n{}", line, log_tail()));
    port_ = static_cast<std::uint16_t>(std::stoul(listen.substr(colon + 1)));
  }
  ~GatewayProcess() {
    if (process_.pid() > 0) process_.terminate(std::chrono::seconds(5));
  }
  GatewayProcess(const GatewayProcess&) = delete;
  GatewayProcess& operator=(const GatewayProcess&) = delete;

  std::uint16_t port() const { return port_; }
  pid_t pid() const { return process_.pid(); }
  std::uint64_t rss() const { return status_kb(pid(), "VmRSS"); }
  std::uint64_t peak_rss() const { return status_kb(pid(), "VmHWM"); }
  std::size_t threads() const { return detail::thread_count(pid()); }
  double cpu() const { return cpu_seconds(pid()); }

 private:
  std::string ready_line(std::chrono::seconds timeout) {
    const auto deadline = Clock::now() + timeout;
    std::string line;
    const int fd = process_.stdout_pipe().get();
    while (Clock::now() < deadline) {
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) continue;
      char c;
      const auto n = ::read(fd, &c, 1);
      if (n <= 0) break;  // it exited
      if (c == '\n') return line;
      line += c;
    }
    throw std::runtime_error(fmt::format("agentd-gateway did not say it was ready ({}); its log ends:\n{}",
                                         line.empty() ? "no output" : "it said \"" + line + "\"",
                                         log_tail()));
  }

  std::string log_tail() const {
    std::ifstream in(log_);
    std::vector<std::string> lines;
    std::string l;
    while (std::getline(in, l)) lines.push_back(l);
    std::string out;
    for (std::size_t i = lines.size() > 20 ? lines.size() - 20 : 0; i < lines.size(); ++i)
      out += lines[i] + "\n";
    return out;
  }

  detail::PrivateDir dir_;
  std::string log_;
  detail::Subprocess process_;
  std::uint16_t port_ = 0;
};

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
    g50.agentd.add(percentile(g, 50));
    g99.agentd.add(percentile(g, 99));
    g50.baseline.add(percentile(b, 50));
    g99.baseline.add(percentile(b, 99));
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

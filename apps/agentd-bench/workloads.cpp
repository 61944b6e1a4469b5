#include "workloads.h"

#include "subprocess.h"  // thread_count
#include "tokens.h"

#include "baselines.h"
#include "model_endpoint.h"
#include "simulation.h"  // examples/simulation: the game's main-side logic

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <thread>
#include <atomic>

namespace agentd::bench {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}
double micros_since(Clock::time_point t0) { return seconds_since(t0) * 1e6; }

void progress(const std::string& what) { fmt::print(stderr, "agentd-bench: {}\n", what); }

void expect(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error(what);
}

std::pair<std::string, std::uint16_t> split_address(const std::string& address) {
  if (address.rfind("unix:", 0) == 0) return {address, 0};
  auto colon = address.rfind(':');
  if (colon == std::string::npos)
    throw std::invalid_argument(fmt::format("--server {}: expected host:port", address));
  int port = std::stoi(address.substr(colon + 1));
  if (port <= 0 || port > 65535)
    throw std::invalid_argument(fmt::format("--server {}: bad port", address));
  return {address.substr(0, colon), static_cast<std::uint16_t>(port)};
}

// Runs body(i) for i in [0, n) on `threads` threads; rethrows the first failure.
void parallel_for(std::size_t n, std::size_t threads, const std::function<void(std::size_t)>& body) {
  threads = std::max<std::size_t>(1, std::min(threads, n));
  std::exception_ptr failure;
  std::mutex mu;
  std::vector<std::thread> pool;
  for (std::size_t t = 0; t < threads; ++t)
    pool.emplace_back([&, t]() {
      try {
        for (std::size_t i = t; i < n; i += threads) {
          {
            std::lock_guard lock(mu);
            if (failure) return;
          }
          body(i);
        }
      } catch (...) {
        std::lock_guard lock(mu);
        if (!failure) failure = std::current_exception();
      }
    });
  for (auto& th : pool) th.join();
  if (failure) std::rethrow_exception(failure);
}

// Synchronous create_agent calls (one round trip each) spread over several threads: what a
// program that does not use create_agents gets (W4's informative row).
std::vector<AgentRef> create_many(Client& c, const std::string& cls, const Value& args,
                                  std::size_t n, std::size_t threads) {
  std::vector<std::optional<AgentRef>> made(n);
  parallel_for(n, threads, [&](std::size_t i) { made[i] = c.create_agent(cls, {}, args); });
  std::vector<AgentRef> out;
  out.reserve(n);
  for (auto& m : made) out.push_back(std::move(*m));
  return out;
}

// Removes what a workload made: everything on our own children, only our agents elsewhere.
void cleanup(Deployment& dep, std::size_t server, const std::vector<AgentRef>& agents,
             std::size_t threads) {
  Client& c = dep.client(server);
  if (dep.owned()) {
    c.delete_all_agents();
    return;
  }
  parallel_for(agents.size(), threads, [&](std::size_t i) { c.delete_agent(agents[i].id()); });
}

// Issues n calls in windows that fit the server's result pool (results read later must not be
// evicted first), reading each window's results before the next.
void run_windowed(std::size_t n, std::size_t window, const std::function<Placeholder(std::size_t)>& issue,
                  const std::function<void(const Msg&)>& check) {
  window = std::max<std::size_t>(1, window);
  std::vector<Placeholder> inflight;
  inflight.reserve(std::min(n, window));
  for (std::size_t start = 0; start < n; start += window) {
    inflight.clear();
    for (std::size_t i = start; i < std::min(n, start + window); ++i) inflight.push_back(issue(i));
    for (auto& p : inflight) check(p.get());
  }
}

std::size_t pool_window(Deployment& dep, std::size_t server) {
  return std::max<std::size_t>(1, dep.max_pool_size(server) / 2);
}

Msg text_msg(std::size_t bytes) { return Msg("bench", std::string(bytes, 'x')); }

void require_class(Deployment& dep, std::size_t server, const std::string& cls) {
  if (!dep.has_class(server, cls))
    throw std::runtime_error(fmt::format(
        "server {} has no agent class {} (start it with the echo_agent and web_agent plugins)",
        server, cls));
}

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

// A fresh directory under the temporary directory for a child's --state-dir, removed with all
// it holds when destroyed. Declare it before the Client of the child that uses it, so that the
// child has exited (with its database closed) when the directory goes.
class TempStateDir {
 public:
  TempStateDir() {
    std::string pattern =
        (std::filesystem::temp_directory_path() / "agentd-bench-state-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr)
      throw std::runtime_error(fmt::format("cannot make a state dir from {}: {}", pattern,
                                           std::strerror(errno)));
    path_ = pattern;
  }
  ~TempStateDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempStateDir(const TempStateDir&) = delete;
  TempStateDir& operator=(const TempStateDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

bool has_class(const ServerInfo& info, const std::string& cls) {
  return std::find(info.classes.begin(), info.classes.end(), cls) != info.classes.end();
}

double mib(std::uint64_t bytes) { return static_cast<double>(bytes) / 1048576.0; }

Target at_most_ratio(double b, std::string text) { return {Target::Kind::ratio_at_most, b, std::move(text)}; }
Target at_least_ratio(double b, std::string text) { return {Target::Kind::ratio_at_least, b, std::move(text)}; }
Target at_most(double b, std::string text) { return {Target::Kind::value_at_most, b, std::move(text)}; }
Target at_least(double b, std::string text) { return {Target::Kind::value_at_least, b, std::move(text)}; }

}  // namespace

// ---- Deployment ----

Deployment::Deployment(const Config& cfg, std::size_t children) : cfg_(cfg) {
  if (cfg.servers.empty()) {
    owned_ = true;
    secrets_ = std::make_unique<detail::PrivateDir>();
    child_token_ = detail::random_token();
    child_token_file_ = secrets_->write_private("token", child_token_);
    for (std::size_t i = 0; i < children; ++i) clients_.push_back(spawn());
  } else {
    for (const auto& s : cfg.servers) {
      auto [host, port] = split_address(s);
      clients_.push_back(Client::connect(host, port, client_options()));
    }
  }
  for (auto& c : clients_) {
    ServerInfo info = c.info();
    classes_.push_back(info.classes);
    pool_sizes_.push_back(info.max_pool_size);
  }
}

ChildOptions Deployment::child_options() const {
  ChildOptions o;
  o.plugin_dirs = {cfg_.plugin_dir};
  o.server_path = cfg_.as_server;
  o.extra_args = {"--log-level", "warn", "--auth-token-file", child_token_file_};
  o.client = client_options();
  return o;
}

ClientOptions Deployment::client_options() const {
  ClientOptions o;
  o.token = owned_ ? child_token_ : cfg_.token;
  if (!owned_ && cfg_.tls_server.empty()) {
    o.tls_ca = cfg_.tls_ca;
    o.tls_cert = cfg_.tls_cert;
    o.tls_key = cfg_.tls_key;
  }
  return o;
}

Client Deployment::connect_tls_server() const {
  ClientOptions o;
  o.token = cfg_.token;
  o.tls_ca = cfg_.tls_ca;
  o.tls_cert = cfg_.tls_cert;
  o.tls_key = cfg_.tls_key;
  auto [host, port] = split_address(cfg_.tls_server);
  return Client::connect(host, port, o);
}

Client Deployment::spawn(const std::vector<std::string>& extra_args) const {
  ChildOptions o = child_options();
  o.extra_args.insert(o.extra_args.end(), extra_args.begin(), extra_args.end());
  return Client::spawn_child(std::move(o));
}

bool Deployment::has_class(std::size_t i, const std::string& cls) const {
  const auto& v = classes_.at(i);
  return std::find(v.begin(), v.end(), cls) != v.end();
}

std::string Deployment::describe() const {
  std::string out = owned_ ? "as_server children started by the bench:" : "servers:";
  for (const auto& c : clients_) out += " " + c.address();
  return out;
}

// ---- W1: call latency ----

// Round trips of a.reply(msg).get() in microseconds, after 50 for warm-up; each answer checked.
std::vector<double> reply_latencies(AgentRef& a, const Msg& msg, std::size_t calls) {
  for (int i = 0; i < 50; ++i) a.reply(msg).get();
  std::vector<double> out;
  out.reserve(calls);
  for (std::size_t i = 0; i < calls; ++i) {
    auto t0 = Clock::now();
    Msg m = a.reply(msg).get();
    out.push_back(micros_since(t0));
    expect(m.content == msg.content, "W1: the echo agent answered something else");
  }
  return out;
}

// The asynchronous echo (examples/async_agents): its reply runs on the server's loop thread
// without a hop to a worker and back, against the bare Cap'n Proto echo, alternating runs.
void run_w1_async(const Config& cfg, Deployment& dep, Report& report) {
  Client& c = dep.client(0);
  AgentRef a = c.create_agent("AsyncEchoAgent", "bench-w1-async");
  Msg msg = text_msg(cfg.payload);
  CapnpEchoServer echo;
  Row reply50{"W1", "async agent reply().get() p50", "us"};
  Row reply99{"W1", "async agent reply().get() p99", "us"};
  for (int r = 0; r < cfg.repeat; ++r) {
    progress(fmt::format("W1 async repeat {}/{}", r + 1, cfg.repeat));
    auto replies = reply_latencies(a, msg, cfg.calls);
    auto capnp = capnp_echo_latency(echo.port(), cfg.calls, cfg.payload);
    reply50.agentd.add(percentile(replies, 50));
    reply99.agentd.add(percentile(replies, 99));
    reply50.baseline.add(percentile(capnp, 50));
    reply99.baseline.add(percentile(capnp, 99));
  }
  for (Row* row : {&reply50, &reply99}) row->baseline_name = "capnp echo";
  reply50.target = at_most_ratio(1.2, "<= 1.2x");
  report.rows.push_back(std::move(reply50));
  report.rows.push_back(std::move(reply99));
  cleanup(dep, 0, {a}, 1);
}

void run_w1(const Config& cfg, Deployment& dep, Report& report) {
  require_class(dep, 0, "EchoAgent");
  Client& c = dep.client(0);
  AgentRef a = c.create_agent("EchoAgent", "bench-w1");
  Msg msg = text_msg(cfg.payload);
  CapnpEchoServer echo;
  Row call50{"W1", "call(\"ping\") p50", "us"}, call99{"W1", "call(\"ping\") p99", "us"};
  Row reply50{"W1", "reply().get() p50", "us"}, reply99{"W1", "reply().get() p99", "us"};
  Row vs_tcp{"W1", "reply().get() p50 vs raw TCP", "us"};
  Row capnp_tcp{"W1", "bare capnp echo p50 vs raw TCP", "us"};
  // CPU is steadier than latency on a shared machine: server CPU per reply (info().cpu_seconds,
  // all server threads) against the bare echo server thread's CPU per call.
  Row cpu{"W1", "server CPU per reply()+get()", "us"};
  for (int r = 0; r < cfg.repeat; ++r) {
    progress(fmt::format("W1 repeat {}/{}", r + 1, cfg.repeat));
    for (int i = 0; i < 50; ++i) a.call("ping");  // warm-up
    std::vector<double> calls, replies;
    for (std::size_t i = 0; i < cfg.calls; ++i) {
      auto t0 = Clock::now();
      Value v = a.call("ping");
      calls.push_back(micros_since(t0));
      expect(v == "pong", "W1: ping did not answer pong");
    }
    for (int i = 0; i < 50; ++i) a.reply(msg).get();
    double cpu0 = c.info().cpu_seconds;
    for (std::size_t i = 0; i < cfg.calls; ++i) {
      auto t0 = Clock::now();
      Msg m = a.reply(msg).get();
      replies.push_back(micros_since(t0));
      expect(m.content == msg.content, "W1: the echo agent answered something else");
    }
    // The info() call itself costs a little server CPU; negligible against cfg.calls replies.
    cpu.agentd.add((c.info().cpu_seconds - cpu0) * 1e6 / cfg.calls);
    double echo_cpu0 = echo.cpu_seconds();
    auto capnp = capnp_echo_latency(echo.port(), cfg.calls, cfg.payload);
    // The echo latency run includes a warm-up of 50 calls.
    cpu.baseline.add((echo.cpu_seconds() - echo_cpu0) * 1e6 / (cfg.calls + 50));
    auto tcp = tcp_pingpong_latency(cfg.calls, cfg.payload);
    call50.agentd.add(percentile(calls, 50));
    call99.agentd.add(percentile(calls, 99));
    reply50.agentd.add(percentile(replies, 50));
    reply99.agentd.add(percentile(replies, 99));
    vs_tcp.agentd.add(percentile(replies, 50));
    capnp_tcp.agentd.add(percentile(capnp, 50));
    for (Row* row : {&call50, &reply50}) row->baseline.add(percentile(capnp, 50));
    for (Row* row : {&call99, &reply99}) row->baseline.add(percentile(capnp, 99));
    for (Row* row : {&vs_tcp, &capnp_tcp}) row->baseline.add(percentile(tcp, 50));
  }
  if (!cfg.tls_server.empty()) {
    // The same replies on the --tls-server, against this run's plaintext ones.
    Client tc = dep.connect_tls_server();
    AgentRef ta = tc.create_agent("EchoAgent", "bench-w1-tls");
    Row tls50{"W1", "reply().get() p50 over TLS", "us"}, tls99{"W1", "reply().get() p99 over TLS", "us"};
    for (int r = 0; r < cfg.repeat; ++r) {
      progress(fmt::format("W1 over TLS repeat {}/{}", r + 1, cfg.repeat));
      auto plain = reply_latencies(a, msg, cfg.calls);
      auto sealed = reply_latencies(ta, msg, cfg.calls);
      tls50.agentd.add(percentile(sealed, 50));
      tls99.agentd.add(percentile(sealed, 99));
      tls50.baseline.add(percentile(plain, 50));
      tls99.baseline.add(percentile(plain, 99));
    }
    for (Row* row : {&tls50, &tls99}) {
      row->baseline_name = "plaintext";
      row->note = "informative: TLS server " + cfg.tls_server;
      report.rows.push_back(std::move(*row));
    }
    tc.delete_agent(ta.id());
  }
  if (!cfg.unix_socket.empty()) {
    // The same replies over the first server's Unix socket, beside a raw Unix-socket ping-pong.
    ClientOptions uo = dep.client_options();
    uo.tls_ca.clear();
    Client uc = Client::connect("unix:" + cfg.unix_socket, 0, uo);
    AgentRef ua = uc.create_agent("EchoAgent", "bench-w1-unix");
    Row unix50{"W1", "reply().get() p50 over Unix socket", "us"};
    Row unix99{"W1", "reply().get() p99 over Unix socket", "us"};
    Row unix_tcp{"W1", "reply().get() p50, Unix socket vs TCP", "us"};
    for (int r = 0; r < cfg.repeat; ++r) {
      progress(fmt::format("W1 over the Unix socket repeat {}/{}", r + 1, cfg.repeat));
      auto over_unix = reply_latencies(ua, msg, cfg.calls);
      auto over_tcp = reply_latencies(a, msg, cfg.calls);
      auto raw = unix_pingpong_latency(cfg.calls, cfg.payload);
      unix50.agentd.add(percentile(over_unix, 50));
      unix99.agentd.add(percentile(over_unix, 99));
      unix50.baseline.add(percentile(raw, 50));
      unix99.baseline.add(percentile(raw, 99));
      unix_tcp.agentd.add(percentile(over_unix, 50));
      unix_tcp.baseline.add(percentile(over_tcp, 50));
    }
    unix50.baseline_name = unix99.baseline_name = "raw Unix socket";
    unix_tcp.baseline_name = "TCP";
    unix50.note = "aim: within 2x of the raw Unix-socket ping-pong (informative)";
    for (Row* row : {&unix50, &unix99, &unix_tcp}) report.rows.push_back(std::move(*row));
    uc.delete_agent(ua.id());
  }
  for (Row* row : {&call50, &call99, &reply50, &reply99, &cpu}) row->baseline_name = "capnp echo";
  for (Row* row : {&vs_tcp, &capnp_tcp}) row->baseline_name = "raw TCP";
  reply50.target = at_most_ratio(1.5, "<= 1.5x");
  capnp_tcp.note = "informative: the agentd column holds the bare Cap'n Proto echo";
  for (Row* row : {&call50, &call99, &reply50, &reply99, &cpu, &vs_tcp, &capnp_tcp})
    report.rows.push_back(std::move(*row));
  cleanup(dep, 0, {a}, 1);
  if (dep.has_class(0, "AsyncEchoAgent")) run_w1_async(cfg, dep, report);
}

// ---- W2: throughput ----

// W2's burst: n replies spread over agents, issued in windows of `window`, all read; replies/s.
double reply_burst(std::vector<AgentRef>& agents, const Msg& msg, std::size_t n, std::size_t window) {
  auto t0 = Clock::now();
  run_windowed(
      n, window, [&](std::size_t i) { return agents[i % agents.size()].reply(msg); },
      [&](const Msg& m) { expect(m.content == msg.content, "W2: wrong echo"); });
  return n / seconds_since(t0);
}

void run_w2(const Config& cfg, Deployment& dep, Report& report) {
  require_class(dep, 0, "EchoAgent");
  Client& c = dep.client(0);
  auto agents = c.create_agents("EchoAgent", cfg.echo_agents);
  Msg msg = text_msg(cfg.payload);
  CapnpEchoServer echo;
  Row row{"W2", fmt::format("{} replies in flight, {} agents", cfg.replies, cfg.echo_agents),
          "replies/s"};
  row.baseline_name = "capnp echo";
  std::size_t window = pool_window(dep, 0);
  if (window < cfg.replies)
    row.note = fmt::format("issued in windows of {} (half the server's --max-pool-size)", window);
  for (int r = 0; r < cfg.repeat; ++r) {
    progress(fmt::format("W2 repeat {}/{}", r + 1, cfg.repeat));
    row.agentd.add(reply_burst(agents, msg, cfg.replies, window));
    row.baseline.add(capnp_echo_throughput(echo.port(), cfg.replies, cfg.payload));
  }
  row.target = at_least_ratio(0.7, ">= 0.7x");
  if (!cfg.tls_server.empty()) {
    // The same burst on the --tls-server, against this run's plaintext bursts.
    Client tc = dep.connect_tls_server();
    auto tls_agents = tc.create_agents("EchoAgent", cfg.echo_agents);
    std::size_t tls_window = std::min(window, std::max<std::size_t>(1, tc.info().max_pool_size / 2));
    Row tls{"W2", fmt::format("{} replies in flight over TLS", cfg.replies), "replies/s"};
    tls.baseline_name = "plaintext";
    tls.note = "informative: TLS server " + cfg.tls_server;
    auto burst = [&](std::vector<AgentRef>& on, std::size_t w) {
      return reply_burst(on, msg, cfg.replies, w);
    };
    for (int r = 0; r < cfg.repeat; ++r) {
      progress(fmt::format("W2 over TLS repeat {}/{}", r + 1, cfg.repeat));
      tls.baseline.add(burst(agents, tls_window));
      tls.agentd.add(burst(tls_agents, tls_window));
    }
    report.rows.push_back(std::move(row));
    report.rows.push_back(std::move(tls));
    tc.delete_all_agents();
  } else {
    report.rows.push_back(std::move(row));
  }
  cleanup(dep, 0, agents, cfg.threads);
}

// ---- W3: the tutorial scenario ----

void run_w3(const Config& cfg, Deployment& dep, Report& report) {
  for (std::size_t s = 0; s < dep.size(); ++s) require_class(dep, s, "WebAgent");
  Value args{{"sleep_ms", cfg.sleep_ms}};
  double sleep_s = cfg.sleep_ms / 1000.0;
  std::size_t n = cfg.web_agents;
  Row child_init{"W3", fmt::format("child-mode init, {} agents", n), "s"};
  Row indep_init{"W3", fmt::format("independent-mode init, {} agents", n), "s"};
  Row sequential{"W3", fmt::format("sequential, {} replies", n), "s"};
  Row distributed{"W3", fmt::format("distributed, {} replies", n), "s"};
  sequential.baseline_name = fmt::format("{} x sleep", n);
  distributed.baseline_name = "sleep";
  for (int r = 0; r < cfg.repeat; ++r) {
    progress(fmt::format("W3 repeat {}/{} (sleep {} ms)", r + 1, cfg.repeat, cfg.sleep_ms));
    {
      auto t0 = Clock::now();
      Client child = dep.spawn();
      std::vector<AgentRef> agents;
      for (std::size_t i = 0; i < n; ++i)
        agents.push_back(child.create_agent("WebAgent", fmt::format("W{}", i), args));
      child_init.agentd.add(seconds_since(t0));
    }
    // Independent mode: fresh connections to the running servers, agents spread over them.
    std::vector<Client> clients;
    std::vector<AgentRef> agents;
    auto t0 = Clock::now();
    for (std::size_t s = 0; s < dep.size(); ++s) {
      auto [host, port] = split_address(dep.client(s).address());
      clients.push_back(Client::connect(host, port, dep.client_options()));
    }
    for (std::size_t i = 0; i < n; ++i)
      agents.push_back(clients[i % clients.size()].create_agent("WebAgent", fmt::format("W{}", i), args));
    indep_init.agentd.add(seconds_since(t0));

    Msg page("user", Value{{"url", "page"}});
    t0 = Clock::now();
    for (auto& a : agents) a.reply(page).get();
    sequential.agentd.add(seconds_since(t0));
    sequential.baseline.add(n * sleep_s);

    t0 = Clock::now();
    std::vector<Placeholder> ps;
    for (auto& a : agents) ps.push_back(a.reply(page));
    for (auto& p : ps) expect(p.get().text().rfind("Answer from", 0) == 0, "W3: odd web answer");
    distributed.agentd.add(seconds_since(t0));
    distributed.baseline.add(sleep_s);
    for (std::size_t i = 0; i < agents.size(); ++i) clients[i % clients.size()].delete_agent(agents[i].id());
  }
  child_init.target = at_most(0.1, "< 0.1 s");
  child_init.note = "spawn an as_server child, wait for its ready line, connect, create the agents";
  distributed.target = at_most_ratio(1.01, "<= 1.01x");
  for (Row* row : {&child_init, &indep_init, &sequential, &distributed})
    report.rows.push_back(std::move(*row));
}

// ---- W4: creation and memory ----

void run_w4(const Config& cfg, Deployment& dep, Report& report) {
  require_class(dep, 0, "EchoAgent");
  Row rate{"W4", fmt::format("create {} agents (create_agents)", cfg.create_n), "agents/s"};
  const std::size_t one_by_one_n = std::min<std::size_t>(cfg.create_n, 10000);
  Row one_by_one{"W4",
                 fmt::format("create {} agents (create_agent, {} threads)", one_by_one_n,
                             cfg.threads),
                 "agents/s"};
  Row rss{"W4", "server RSS per idle agent", "B"};
  Row calls{"W4", "then one reply to each", "calls/s"};
  Msg msg = text_msg(cfg.payload);
  for (int r = 0; r < cfg.repeat; ++r) {
    progress(fmt::format("W4 repeat {}/{} ({} agents)", r + 1, cfg.repeat, cfg.create_n));
    // On our own deployment every repeat gets a fresh server, so RSS is not masked by reuse.
    std::optional<Client> fresh;
    if (dep.owned()) fresh.emplace(dep.spawn());
    Client& c = fresh ? *fresh : dep.client(0);
    ServerInfo before = c.info();
    auto t0 = Clock::now();
    auto agents = c.create_agents("EchoAgent", cfg.create_n);
    rate.agentd.add(cfg.create_n / seconds_since(t0));
    ServerInfo after = c.info();
    rss.agentd.add((static_cast<double>(after.rss_bytes) - static_cast<double>(before.rss_bytes)) /
                   cfg.create_n);
    t0 = Clock::now();
    run_windowed(
        agents.size(), std::max<std::size_t>(1, before.max_pool_size / 2),
        [&](std::size_t i) { return agents[i].reply(msg); },
        [&](const Msg& m) { expect(m.content == msg.content, "W4: wrong echo"); });
    calls.agentd.add(agents.size() / seconds_since(t0));
    if (fresh)
      fresh->delete_all_agents();
    else
      cleanup(dep, 0, agents, cfg.threads);
    // One synchronous create_agent at a time per thread: what a program that does not batch
    // gets (each waits for its constructor and a round trip).
    t0 = Clock::now();
    auto singles = create_many(c, "EchoAgent", Value::object(), one_by_one_n, cfg.threads);
    one_by_one.agentd.add(one_by_one_n / seconds_since(t0));
    if (fresh)
      fresh->delete_all_agents();
    else
      cleanup(dep, 0, singles, cfg.threads);
  }
  rate.target = at_least(50000, ">= 50000/s");
  rss.target = at_most(2048, "< 2048 B");
  rss.note = "(rss after - rss before) / N, from Client::info().rss_bytes";
  one_by_one.note = "informative: synchronous create_agent calls from several threads";
  for (Row* row : {&rate, &rss, &calls, &one_by_one}) report.rows.push_back(std::move(*row));
}

// ---- W5: pipelined chain ----

void run_w5(const Config& cfg, Deployment& dep, Report& report) {
  require_class(dep, 0, "EchoAgent");
  Client& c = dep.client(0);
  auto agents = c.create_agents("EchoAgent", cfg.chain);
  Msg msg = text_msg(cfg.payload);
  Row row{"W5", fmt::format("{}-agent pipelined chain", cfg.chain), "ms"};
  row.baseline_name = "awaited calls";
  row.ratio_inverted = true;
  // Each repeat runs the chain and the awaited calls five times each, alternating, and keeps the
  // median of each: one chain takes a millisecond or two, where a scheduling hiccup weighs a lot.
  constexpr int kInner = 5;
  for (int r = 0; r < cfg.repeat; ++r) {
    progress(fmt::format("W5 repeat {}/{}", r + 1, cfg.repeat));
    std::vector<double> piped_ms, awaited_ms;
    for (int k = 0; k < kInner; ++k) {
      auto t0 = Clock::now();
      Placeholder x = agents[0].reply(msg);
      for (std::size_t i = 1; i < agents.size(); ++i) x = agents[i].reply(x);
      Msg piped = x.get();
      piped_ms.push_back(seconds_since(t0) * 1e3);
      expect(piped.content == msg.content, "W5: the chain changed the message");

      t0 = Clock::now();
      Msg m = msg;
      for (auto& a : agents) m = a.reply(m).get();
      awaited_ms.push_back(seconds_since(t0) * 1e3);
      expect(m.content == msg.content, "W5: the awaited calls changed the message");
    }
    row.agentd.add(percentile(piped_ms, 50));
    row.baseline.add(percentile(awaited_ms, 50));
  }
  row.target = at_least_ratio(10, "speed-up >= 10x");
  row.note = "ratio = awaited / pipelined (aim: 20x)";
  report.rows.push_back(std::move(row));
  cleanup(dep, 0, agents, cfg.threads);
}

// ---- W6: cross-server hand-off ----

void run_w6(const Config& cfg, Deployment& dep, Report& report) {
  if (dep.size() < 2) {
    report.skipped.push_back("W6: needs two servers (give --server twice)");
    return;
  }
  require_class(dep, 0, "EchoAgent");
  require_class(dep, 1, "WebAgent");
  AgentRef producer = dep.client(0).create_agent("EchoAgent", "bench-w6-producer");
  // A web agent that does not sleep: it must receive the whole input, and answers a few bytes.
  AgentRef consumer =
      dep.client(1).create_agent("WebAgent", "bench-w6-consumer", Value{{"sleep_ms", 0}});
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

// ---- W7: blocking concurrency ----

void run_w7_async(const Config& cfg, Deployment& dep, Report& report);
void run_w7_model(const Config& cfg, Deployment& dep, Report& report);

void run_w7(const Config& cfg, Deployment& dep, Report& report) {
  require_class(dep, 0, "EchoAgent");
  Client& c = dep.client(0);
  progress(fmt::format("W7 creating {} agents", cfg.agents));
  auto agents = c.create_agents("EchoAgent", cfg.agents, Value{{"sleep_ms", cfg.block_ms}});
  Msg msg = text_msg(cfg.payload);
  double block_s = cfg.block_ms / 1000.0;
  Row row{"W7", fmt::format("{} agents blocking {} ms, called at once", cfg.agents, cfg.block_ms), "s"};
  row.baseline_name = "one block";
  for (int r = 0; r < cfg.repeat; ++r) {
    progress(fmt::format("W7 repeat {}/{}", r + 1, cfg.repeat));
    auto t0 = Clock::now();
    run_windowed(
        agents.size(), std::max(agents.size(), pool_window(dep, 0)),
        [&](std::size_t i) { return agents[i].reply(msg); },
        [&](const Msg& m) { expect(m.content == msg.content, "W7: wrong echo"); });
    row.agentd.add(seconds_since(t0));
    row.baseline.add(block_s);
  }
  row.target = at_most(1.5 * block_s, fmt::format("< {:.3g} s", 1.5 * block_s));
  report.rows.push_back(std::move(row));
  cleanup(dep, 0, agents, cfg.threads);
  if (dep.has_class(0, "WaitAgent")) run_w7_async(cfg, dep, report);
}

// Calls every agent at once, then reads and checks every answer; returns the seconds it took.
// While the calls still wait (before wait_s has passed), samples server pid's thread count into
// threads (pid 0: not on this machine, no sample).
double all_at_once(std::vector<AgentRef>& agents, const Msg& msg, std::int64_t pid, double wait_s,
                   Series& threads, const std::function<void(const Msg&)>& check) {
  auto t0 = Clock::now();
  std::vector<Placeholder> ps;
  ps.reserve(agents.size());
  for (auto& a : agents) ps.push_back(a.reply(msg));
  if (pid != 0 && seconds_since(t0) < wait_s)
    threads.add(static_cast<double>(detail::thread_count(static_cast<pid_t>(pid))));
  for (auto& p : ps) check(p.get());
  return seconds_since(t0);
}

// Asynchronous agents waiting on a timer (sleep_for): every call in flight at once, none holding
// a thread. The server's threads are counted while all of them wait.
void run_w7_async(const Config& cfg, Deployment& dep, Report& report) {
  // A fresh child when the bench owns its servers: the blocking row grew the shared server's
  // worker pool, which would count here.
  std::optional<Client> fresh;
  if (dep.owned()) fresh.emplace(dep.spawn());
  Client& c = fresh ? *fresh : dep.client(0);
  progress(fmt::format("W7 creating {} asynchronous agents", cfg.async_agents));
  auto agents = c.create_agents("WaitAgent", cfg.async_agents, Value{{"sleep_ms", cfg.wait_ms}});
  Msg msg = text_msg(cfg.payload);
  const double wait_s = cfg.wait_ms / 1000.0;
  const bool same_machine = dep.owned();
  const std::int64_t pid = c.info().pid;
  Row row{"W7", fmt::format("{} async agents waiting {} ms, called at once", cfg.async_agents,
                            cfg.wait_ms),
          "s"};
  row.baseline_name = "one wait";
  Row threads{"W7", "server threads while they all wait", "threads"};
  for (int r = 0; r < cfg.repeat; ++r) {
    progress(fmt::format("W7 async repeat {}/{}", r + 1, cfg.repeat));
    row.agentd.add(all_at_once(agents, msg, same_machine ? pid : 0, wait_s, threads.agentd,
                               [&](const Msg& m) {
                                 expect(m.content == msg.content, "W7: wrong async echo");
                               }));
    row.baseline.add(wait_s);
  }
  const double limit = 2.5 * wait_s;
  row.target = at_most(limit, fmt::format("<= {:.3g} s", limit));
  report.rows.push_back(std::move(row));
  if (!threads.agentd.empty()) {
    threads.target = at_most(63, "< 64");
    report.rows.push_back(std::move(threads));
  }
  if (!fresh) cleanup(dep, 0, agents, cfg.threads);
  if (cfg.model_agents > 0 && dep.owned()) run_w7_model(cfg, dep, report);
}

// Asynchronous agents waiting on real HTTP model calls: a local OpenAI-compatible endpoint
// (--serve-model, a child of the bench) answers each request after --wait-ms; a fresh child
// server has it as model config "delayed", with max_concurrency high enough for every call.
void run_w7_model(const Config& cfg, Deployment& dep, Report& report) {
  const double wait_s = cfg.wait_ms / 1000.0;
  EndpointProcess endpoint(std::chrono::milliseconds(cfg.wait_ms));
  const std::string dir = fmt::format("/tmp/agentd-bench-w7-{}", ::getpid());
  std::filesystem::create_directories(dir);
  const std::string config_path = dir + "/models.yaml";
  {
    std::ofstream out(config_path);
    out << "- config_name: delayed\n"
        << "  model_type: openai_chat\n"
        << "  model_name: bench\n"
        << "  api_key: none\n"
        << "  max_concurrency: " << cfg.model_agents << "\n"
        << "  client_args: {base_url: \"" << endpoint.url() << "\", timeout: 120, max_retries: 0}\n";
  }
  ChildOptions o = dep.child_options();
  o.model_config_path = config_path;
  Client c = Client::spawn_child(o);
  std::filesystem::remove_all(dir);
  const std::int64_t pid = c.info().pid;
  progress(fmt::format("W7 creating {} asynchronous agents asking a model", cfg.model_agents));
  auto agents = c.create_agents("AskAgent", cfg.model_agents, Value{{"model", "delayed"}});
  Row row{"W7", fmt::format("{} async agents each asking a model that takes {} ms (HTTP), at once",
                            cfg.model_agents, cfg.wait_ms),
          "s"};
  row.baseline_name = "one wait";
  Row threads{"W7", "server threads while the model calls wait", "threads"};
  Msg msg("bench", "hello");
  for (int r = 0; r < cfg.repeat; ++r) {
    progress(fmt::format("W7 model repeat {}/{}", r + 1, cfg.repeat));
    row.agentd.add(all_at_once(agents, msg, pid, wait_s, threads.agentd, [](const Msg& m) {
      expect(m.text() == "echo: hello", "W7: wrong model answer");
    }));
    row.baseline.add(wait_s);
  }
  const double limit = 3 * wait_s;
  row.target = at_most(limit, fmt::format("<= {:.3g} s", limit));
  report.rows.push_back(std::move(row));
  if (!threads.agentd.empty()) {
    threads.target = at_most(63, "< 64");
    report.rows.push_back(std::move(threads));
  }
}

// ---- W8: the simulation (guess 2/3 of the average) ----

// AgentScope's large-scale simulation, through the library as the `simulation` example plays it
// (examples/simulation/simulation.h): --sim-participants participants with a simulated model
// latency of --sim-latency-ms over --sim-servers fresh child servers (Cluster::spawn_children;
// participants made with Cluster::create_agents), groups beside them, one
// round (main -> groups -> participants). Server RSS per idle participant is measured over the
// participants' creation alone (groups come after); threads are sampled on every server while
// the round runs.
void run_w8(const Config& cfg, Deployment& dep, Report& report) {
  if (!dep.owned()) {
    report.skipped.push_back("W8: starts its own child servers (not with --server)");
    return;
  }
  if (!dep.has_class(0, "ParticipantAgent")) {
    report.skipped.push_back("W8: no ParticipantAgent (the simulation_agents plugin is not in --plugin-dir)");
    return;
  }
  const std::size_t n = cfg.sim_participants;
  const std::size_t m = std::max<std::size_t>(1, cfg.sim_servers);
  Row init{"W8", fmt::format("create {} participants + groups over {} servers", n, m), "s"};
  Row round{"W8", fmt::format("one round, {} participants (latency {} ms) over {} servers", n,
                              cfg.sim_latency_ms, m),
            "s"};
  Row threads{"W8", "server threads during the round (max over servers)", "threads"};
  Row created{"W8", "server threads after creating the agents (max over servers)", "threads"};
  Row cpu{"W8", "servers' CPU during the round (all servers)", "s"};
  Row rss{"W8", "server RSS per idle participant", "B"};
  std::size_t groups = 0;
  for (int r = 0; r < cfg.repeat; ++r) {
    progress(fmt::format("W8 repeat {}/{} ({} participants, {} servers)", r + 1, cfg.repeat, n, m));
    ClusterOptions co;
    co.client = dep.client_options();
    Cluster cluster = Cluster::spawn_children(m, dep.child_options(), co);
    std::vector<std::int64_t> pids;
    std::uint64_t rss_before = 0;
    for (std::size_t i = 0; i < cluster.size(); ++i) {
      const ServerInfo info = cluster.server(i).info();
      pids.push_back(info.pid);
      rss_before += info.rss_bytes;
    }
    simulation::GameOptions o;
    o.participants = n;
    o.groups_per_server = cfg.sim_groups_per_server;
    o.latency_ms = cfg.sim_latency_ms;
    simulation::Game game(cluster, o);
    auto t0 = Clock::now();
    game.create_participants();
    const double participants_s = seconds_since(t0);
    std::uint64_t rss_after = 0;
    for (std::size_t i = 0; i < cluster.size(); ++i) rss_after += cluster.server(i).info().rss_bytes;
    rss.agentd.add((static_cast<double>(rss_after) - static_cast<double>(rss_before)) / n);
    t0 = Clock::now();
    game.create_groups();
    init.agentd.add(participants_s + seconds_since(t0));
    groups = game.group_count();

    // Creating agents runs their constructors on workers, and on a contended machine the pool's
    // starvation check adds idle threads that leave after 30 s. The round is measured once
    // they have (when there are more than the target allows), so its row counts what the round
    // uses; the creation's peak is its own row.
    std::size_t created_peak = 0;
    auto threads_of = [](std::int64_t pid) { return detail::thread_count(static_cast<pid_t>(pid)); };
    for (auto pid : pids) created_peak = std::max(created_peak, threads_of(pid));
    created.agentd.add(static_cast<double>(created_peak));
    for (auto waited = Clock::now(); seconds_since(waited) < 40;) {
      std::size_t now = 0;
      for (auto pid : pids) now = std::max(now, threads_of(pid));
      if (now < 64) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
    }
    std::atomic<bool> done{false};
    std::size_t most = 0;
    std::thread sampler([&] {
      while (!done) {
        for (auto pid : pids) most = std::max(most, threads_of(pid));
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    });
    double cpu_before = 0;
    for (std::size_t i = 0; i < cluster.size(); ++i) cpu_before += cluster.server(i).info().cpu_seconds;
    simulation::RoundResult res;
    try {
      res = game.play_round(1);
    } catch (...) {
      done = true;
      sampler.join();
      throw;
    }
    done = true;
    sampler.join();
    double cpu_after = 0;
    for (std::size_t i = 0; i < cluster.size(); ++i) cpu_after += cluster.server(i).info().cpu_seconds;
    cpu.agentd.add(cpu_after - cpu_before);
    expect(res.count == static_cast<std::int64_t>(n),
           fmt::format("W8: {} guesses for {} participants", res.count, n));
    expect(!res.winner.empty() && std::abs(res.winner_guess - res.target) <= 100,
           "W8: no winner");
    round.agentd.add(res.seconds);
    round.baseline.add(cfg.sim_latency_ms / 1000.0);
    threads.agentd.add(static_cast<double>(most));
    progress(fmt::format("W8 round {:.3f} s (guess {:.3f} s, closest {:.3f} s), average {:.3f}, "
                         "target {:.3f}, winner {} ({})",
                         res.seconds, res.guess_seconds, res.closest_seconds, res.average,
                         res.target, res.winner, res.winner_guess));
    // The children stop with the cluster; nothing to delete.
  }
  // The two targets (1,000,000 in <= 15 s, 100,000 in <= 2.5 s, latency 1 s) joined by a line:
  // the latency plus a fixed and a per-participant overhead.
  const double limit = cfg.sim_latency_ms / 1000.0 + 0.1111 + 13.889e-6 * static_cast<double>(n);
  round.baseline_name = "one latency";
  round.target = at_most(limit, fmt::format("<= {:.3g} s", limit));
  round.note = "targets: 100,000 <= 2.5 s, 1,000,000 <= 15 s (latency 1 s); between: a line";
  init.note = fmt::format("informative; {} groups", groups);
  threads.target = at_most(63, "< 64");
  threads.note = "sampled every 50 ms; after the creation's idle workers left (up to 40 s)";
  created.note = "informative: idle workers the pool added while constructors queued";
  cpu.note = "informative: on cores of their own the round takes about the latency plus this "
             "over the cores";
  rss.target = at_most(1536, "<= 1.5 KiB");
  rss.note = "(rss after - rss before) / N over all servers, participants only";
  for (Row* row : {&init, &round, &cpu, &threads, &created, &rss}) report.rows.push_back(std::move(*row));
}

// ---- W10: streamed replies ----

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

// ---- W9: bulk replies ----

// The bulk-load scenario: one reply to each of --bulk-n agents, every placeholder kept and all
// calls in flight before the first get(), then all read in order. Nothing windows the calls, so
// the server gathers completions by the hundred thousand per loop turn.
void run_w9(const Config& cfg, Deployment& dep, Report& report) {
  require_class(dep, 0, "EchoAgent");
  Row create{"W9", fmt::format("create {} agents (create_agents)", cfg.bulk_n), "s"};
  Row replies{"W9", fmt::format("{} replies in flight at once, then read in order", cfg.bulk_n),
              "replies/s"};
  Row total{"W9", "reply issue + read time", "s"};
  Row rss{"W9", "server RSS after the replies", "MiB"};
  for (int r = 0; r < cfg.repeat; ++r) {
    progress(fmt::format("W9 repeat {}/{} ({} agents)", r + 1, cfg.repeat, cfg.bulk_n));
    std::optional<Client> fresh;
    if (dep.owned()) fresh.emplace(dep.spawn());
    Client& c = fresh ? *fresh : dep.client(0);
    auto t0 = Clock::now();
    auto agents = c.create_agents("EchoAgent", cfg.bulk_n);
    create.agentd.add(seconds_since(t0));
    t0 = Clock::now();
    std::vector<Placeholder> ps;
    ps.reserve(agents.size());
    for (std::size_t i = 0; i < agents.size(); ++i)
      ps.push_back(agents[i].reply(Msg("bench", Value(static_cast<std::int64_t>(i)))));
    for (std::size_t i = 0; i < ps.size(); ++i)
      expect(ps[i].get().content == Value(static_cast<std::int64_t>(i)), "W9: wrong echo");
    const double s = seconds_since(t0);
    replies.agentd.add(agents.size() / s);
    total.agentd.add(s);
    rss.agentd.add(c.info().rss_bytes / 1048576.0);
    ps.clear();
    if (fresh)
      fresh->delete_all_agents();
    else
      cleanup(dep, 0, agents, cfg.threads);
  }
  replies.note = "every reply must arrive (a lost completion fails the workload)";
  rss.note = "informative: agents, their memories and the finished results";
  for (Row* row : {&create, &replies, &total, &rss}) report.rows.push_back(std::move(*row));
}

// ---- W11: the cost of durability ----

// W1's sequential replies and W2's burst on two fresh children, one without and one with
// --state-dir (a temporary directory), alternating within each repeat so that both see the same
// machine load; the agentd column is the server with the state dir, the baseline the one without.
void run_w11(const Config& cfg, Deployment& dep, Report& report) {
  if (!dep.owned()) {
    report.skipped.push_back(
        "W11: needs servers the bench starts (it compares children with and without --state-dir)");
    return;
  }
  TempStateDir dir;  // outlives the durable child
  Client plain = dep.spawn();
  Client durable = dep.spawn({"--state-dir", dir.path()});
  const ServerInfo plain_info = plain.info(), durable_info = durable.info();
  expect(has_class(plain_info, "EchoAgent"), "W11: the children have no EchoAgent class");
  expect(!durable_info.state_dir.empty(), "W11: the child did not take --state-dir");
  expect(plain_info.state_dir.empty(), "W11: the child without --state-dir has a state dir");
  struct Side {
    Client& client;
    AgentRef agent;
    std::vector<AgentRef> agents;
  };
  Side sides[2] = {{plain, plain.create_agent("EchoAgent", "bench-w11"),
                    plain.create_agents("EchoAgent", cfg.echo_agents)},
                   {durable, durable.create_agent("EchoAgent", "bench-w11"),
                    durable.create_agents("EchoAgent", cfg.echo_agents)}};
  const Msg msg = text_msg(cfg.payload);
  const std::size_t window = std::max<std::size_t>(
      1, std::min(plain_info.max_pool_size, durable_info.max_pool_size) / 2);
  Row p50{"W11", "reply().get() p50, with --state-dir", "us"};
  Row p99{"W11", "reply().get() p99, with --state-dir", "us"};
  Row cpu1{"W11", "server CPU per sequential reply, with --state-dir", "us"};
  Row rate{"W11", fmt::format("{} replies in flight, {} agents, with --state-dir", cfg.replies,
                              cfg.echo_agents),
           "replies/s"};
  Row cpu2{"W11", "server CPU per reply in flight, with --state-dir", "us"};
  std::size_t durable_calls = 2 + cfg.echo_agents;  // creations
  for (int r = 0; r < cfg.repeat; ++r) {
    progress(fmt::format("W11 repeat {}/{} (without and with --state-dir)", r + 1, cfg.repeat));
    // The first side alternates, so a drift in the machine's load does not favour one.
    for (int k = 0; k < 2; ++k) {
      const int s = (k + r) % 2;  // 0: without, 1: with
      Side& side = sides[s];
      double cpu0 = side.client.info().cpu_seconds;
      auto lat = reply_latencies(side.agent, msg, cfg.calls);
      double cpu_seq = (side.client.info().cpu_seconds - cpu0) * 1e6 / (cfg.calls + 50);
      cpu0 = side.client.info().cpu_seconds;
      double burst = reply_burst(side.agents, msg, cfg.replies, window);
      double cpu_burst = (side.client.info().cpu_seconds - cpu0) * 1e6 / cfg.replies;
      Series Row::*col = s == 1 ? &Row::agentd : &Row::baseline;
      (p50.*col).add(percentile(lat, 50));
      (p99.*col).add(percentile(lat, 99));
      (cpu1.*col).add(cpu_seq);
      (rate.*col).add(burst);
      (cpu2.*col).add(cpu_burst);
      if (s == 1) durable_calls += cfg.calls + 50 + cfg.replies;
    }
  }
  const ServerInfo after = durable.info();
  expect(after.state_error.empty(), "W11: the state store failed: " + after.state_error);
  for (Row* row : {&p50, &p99, &cpu1, &rate, &cpu2}) row->baseline_name = "no state dir";
  rate.target = at_least_ratio(0.5, ">= 0.5x");
  p50.note = "W1's sequential replies to one EchoAgent (memory and a counter saved per call)";
  rate.note = fmt::format("W2's burst on fresh children; {}", window < cfg.replies
                              ? fmt::format("issued in windows of {}", window)
                              : std::string("all in flight at once"));
  cpu2.note = "all server threads (info().cpu_seconds), the state store's writer included";
  Row size{"W11", "state DB size after the run", "MiB"};
  size.agentd.add(mib(after.state_bytes));
  size.note = fmt::format(
      "informative: {:.0f} B per call over {} calls (agentd.db + WAL; each EchoAgent reply adds "
      "two messages to memory, all kept); commits are not counted by info()",
      static_cast<double>(after.state_bytes) / durable_calls, durable_calls);
  for (Row* row : {&p50, &p99, &cpu1, &rate, &cpu2, &size}) report.rows.push_back(std::move(*row));
}

// ---- W12: soak ----

// --soak-calls replies over --soak-connections connections (each its own Client and thread, to
// agents of its own that keep no memory) to one fresh child with --state-dir, at most
// --soak-window in flight per connection; the server's RSS after the first 30% of the calls
// against the end (and its peak in between).
void run_w12(const Config& cfg, Deployment& dep, Report& report) {
  if (!dep.owned()) {
    report.skipped.push_back("W12: needs servers the bench starts (a fresh child with --state-dir)");
    return;
  }
  const std::size_t conns = std::max<std::size_t>(1, cfg.soak_connections);
  const std::size_t window = std::max<std::size_t>(1, cfg.soak_window);
  const std::size_t total = std::max<std::size_t>(conns, cfg.soak_calls);
  // Results stay readable until evicted by size: room for twice what may be in flight, so none
  // is evicted before its get().
  const std::size_t pool = std::max<std::size_t>(8192, 2 * conns * window);
  TempStateDir dir;  // outlives the child
  std::vector<std::string> args{"--max-pool-size", std::to_string(pool)};
  if (!cfg.soak_without_state) args.insert(args.end(), {"--state-dir", dir.path()});
  Client server = dep.spawn(args);
  const ServerInfo info0 = server.info();
  // FlakyAgent (examples/echo_agent) echoes without adding to memory or state, so what grows is
  // only what agentd itself keeps.
  const std::string cls = "FlakyAgent";
  expect(has_class(info0, cls), "W12: the child has no FlakyAgent class (echo_agent plugin)");
  expect(info0.state_dir.empty() == cfg.soak_without_state,
         "W12: the child did not take --state-dir");
  // Over loopback TCP (the child's advertised address), as independent clients would connect.
  auto [host, port] = split_address(info0.advertise_address.empty() ? server.address()
                                                                     : info0.advertise_address);
  progress(fmt::format("W12 soak: {} connections to {}, {} agents each, {} calls, {} in flight "
                       "per connection, --max-pool-size {}{}",
                       conns, info0.advertise_address.empty() ? server.address()
                                                              : info0.advertise_address,
                       cfg.soak_agents, total, window, pool,
                       cfg.soak_without_state ? ", WITHOUT --state-dir" : ", --state-dir"));
  std::vector<Client> clients;
  std::vector<std::vector<AgentRef>> agents;
  clients.reserve(conns);
  for (std::size_t i = 0; i < conns; ++i) {
    clients.push_back(Client::connect(host, port, dep.client_options()));
    agents.push_back(clients.back().create_agents(cls, std::max<std::size_t>(1, cfg.soak_agents)));
  }
  const Msg msg = text_msg(cfg.payload);
  std::atomic<std::size_t> done{0}, errors{0}, running{conns};
  std::mutex first_error_mu;
  std::string first_error;
  auto record_error = [&](const std::string& what) {
    ++errors;
    std::lock_guard lock(first_error_mu);
    if (first_error.empty()) first_error = what;
  };
  const auto t0 = Clock::now();
  std::vector<std::thread> threads;
  for (std::size_t t = 0; t < conns; ++t) {
    const std::size_t n = total / conns + (t < total % conns ? 1 : 0);
    threads.emplace_back([&, t, n]() {
      auto& mine = agents[t];
      std::vector<Placeholder> inflight;
      inflight.reserve(std::min(n, window));
      for (std::size_t start = 0; start < n; start += window) {
        inflight.clear();
        const std::size_t end = std::min(n, start + window);
        for (std::size_t i = start; i < end; ++i) {
          try {
            inflight.push_back(mine[i % mine.size()].reply(msg));
          } catch (const std::exception& e) {
            record_error(e.what());
            ++done;
          }
        }
        for (auto& p : inflight) {
          try {
            if (p.get().content != msg.content) record_error("a reply answered something else");
          } catch (const std::exception& e) {
            record_error(e.what());
          }
          ++done;
        }
      }
      --running;
    });
  }
  // This thread watches: RSS once 30% of the calls are done (warm-up: connections, agents, the
  // result pool filled, and with --state-dir the calls waiting for their commit at their steady
  // number; a 3,000,000-call soak shows RSS flat from about 300,000 calls on), the peak after it,
  // progress every 5 s.
  const std::size_t warm_calls = total * 3 / 10;
  std::optional<std::uint64_t> rss_warm;
  std::uint64_t rss_peak = 0;
  auto last_report = Clock::now();
  while (running.load() > 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    const std::size_t now_done = done.load();
    if (!rss_warm && now_done >= warm_calls) rss_warm = server.info().rss_bytes;
    if (rss_warm) rss_peak = std::max(rss_peak, server.info().rss_bytes);
    if (Clock::now() - last_report >= std::chrono::seconds(5)) {
      last_report = Clock::now();
      const ServerInfo i = server.info();
      progress(fmt::format("W12 soak: {}/{} calls, {:.0f} calls/s, {} errors, server RSS {:.1f} "
                           "MiB, state {:.1f} MiB",
                           now_done, total, now_done / seconds_since(t0), errors.load(),
                           mib(i.rss_bytes), mib(i.state_bytes)));
    }
  }
  for (auto& th : threads) th.join();
  const double secs = seconds_since(t0);
  const ServerInfo end = server.info();
  if (!rss_warm) rss_warm = end.rss_bytes;  // finished between two looks: no growth to see
  progress(fmt::format("W12 soak: {} calls in {:.1f} s, {} errors{}", total, secs, errors.load(),
                       first_error.empty() ? std::string() : " (first: " + first_error + ")"));

  Row calls{"W12", fmt::format("calls over {} connections", conns), "calls"};
  calls.agentd.add(static_cast<double>(total));
  calls.note = fmt::format("replies to {} {}s per connection (no memory kept), at most {} in "
                           "flight per connection, over loopback TCP; one run whatever --repeat{}",
                           cfg.soak_agents, cls, window,
                           cfg.soak_without_state ? "; WITHOUT --state-dir (--soak-without-state)"
                                                  : "");
  Row errs{"W12", "errors", "calls"};
  errs.agentd.add(static_cast<double>(errors.load()));
  errs.target = at_most(0, "0");
  if (!first_error.empty()) errs.note = "first: " + first_error;
  Row rate{"W12", "throughput", "calls/s"};
  rate.agentd.add(total / secs);
  Row warm{"W12", "server RSS after 30% of the calls", "MiB"};
  warm.agentd.add(mib(*rss_warm));
  Row peak{"W12", "server RSS peak after warm-up", "MiB"};
  peak.agentd.add(mib(std::max(rss_peak, end.rss_bytes)));
  Row last{"W12", "server RSS at the end", "MiB"};
  last.agentd.add(mib(end.rss_bytes));
  Row growth{"W12", "server RSS growth after warm-up", "%"};
  growth.agentd.add((static_cast<double>(end.rss_bytes) - static_cast<double>(*rss_warm)) /
                    static_cast<double>(*rss_warm) * 100);
  growth.target = at_most(5, "< 5%");
  Row size{"W12", "state DB size at the end", "MiB"};
  size.agentd.add(mib(end.state_bytes));
  size.note = fmt::format("agentd.db + WAL; results kept up to --max-pool-size {}{}", pool,
                          end.state_error.empty() ? "" : "; store failed: " + end.state_error);
  for (Row* row : {&calls, &errs, &rate, &warm, &peak, &last, &growth, &size})
    report.rows.push_back(std::move(*row));
}

}  // namespace agentd::bench

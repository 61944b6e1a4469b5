#include "server.h"

#include "connection_guard.h"
#include "counting_stream.h"
#include "model_config.h"
#include "model_reload.h"
#include "restore.h"
#include "value_codec.h"

#include <agentd/error.h>

#include <grp.h>
#include <malloc.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <thread>

namespace agentd::detail {

namespace {

std::chrono::milliseconds seconds_to_ms(double s) {
  return std::chrono::milliseconds(static_cast<std::int64_t>(s * 1000));
}

ResultPool::Limits pool_limits(const ServerOptions& o) {
  ResultPool::Limits l;
  l.max_size = o.max_pool_size;
  l.max_age = seconds_to_ms(o.max_expire_time);
  return l;
}

// kj says "::bind(...): Address already in use; toString() = ..."; keeps the OS's reason.
std::string bind_failure(const kj::Exception& e) {
  std::string why = e.getDescription().cStr();
  if (auto colon = why.find("): "); colon != std::string::npos) why = why.substr(colon + 3);
  if (auto semi = why.find(';'); semi != std::string::npos) why = why.substr(0, semi);
  return why;
}

// --server-id, else the id a previous run saved in --state-dir (placeholders naming it stay
// valid), else a new one.
std::string initial_id(const ServerOptions& o, StateStore* store) {
  if (!o.server_id.empty()) return o.server_id;
  std::string saved = store != nullptr ? store->server_id() : std::string();
  return saved.empty() ? new_id().substr(0, 12) : saved;
}

// Constructors and destructors run on a pool of their own (AgentHost), up to a quarter of
// --max-workers (at least 2): creation goes on while every call worker is blocked.
std::size_t lifecycle_workers(const ServerOptions& o) {
  return std::max<std::size_t>(2, o.max_workers / 4);
}

AgentHost::Watch watch_options(const ServerOptions& o) {
  AgentHost::Watch w;
  w.call_timeout = seconds_to_ms(o.call_timeout);
  for (const auto& [cls, seconds] : o.class_call_timeouts) w.class_timeouts[cls] = seconds_to_ms(seconds);
  w.slow_call_warn = seconds_to_ms(o.slow_call_warn);
  return w;
}

std::size_t min_workers(const ServerOptions& o) {
  std::size_t n = std::max(2u, std::thread::hardware_concurrency());
  return std::min(n, o.max_workers);
}

// What peer connections over TLS trust, as messages name it.
std::string peer_tls_trust(const ServerOptions& o) {
  if (!o.peer_tls_ca.empty()) return "--peer-tls-ca " + o.peer_tls_ca;
  if (!o.tls_client_ca.empty()) return "--tls-client-ca " + o.tls_client_ca + ", no --peer-tls-ca";
  return "the system's CAs: no --peer-tls-ca";
}

}  // namespace

Server::Server(ServerOptions options, kj::AsyncIoContext& io, std::vector<AgentClass> extra_classes,
               ConnectorFactory connector)
    : options_(std::move(options)),
      io_(io),
      creds_(load_credentials(options_)),
      tls_(load_tls(options_)),
      store_(options_.state_dir.empty() ? nullptr
                                        : std::make_unique<StateStore>(options_.state_dir)),
      id_(initial_id(options_, store_.get())),
      services_(models_),
      bridge_(io.unixEventPort),
      workers_(min_workers(options_), options_.max_workers),
      lifecycle_(1, lifecycle_workers(options_)),
      scheduler_(io.provider->getTimer(), bridge_, workers_),
      model_http_(io, &workers_, &bridge_),
      host_(catalog_, services_, workers_, lifecycle_, bridge_, scheduler_,
            pool_limits(options_)),
      peers_(io,
             PeerPool::Options{.connect_timeout = seconds_to_ms(options_.peer_connect_timeout),
                               .fetch_timeout = seconds_to_ms(options_.peer_fetch_timeout),
                               .token = creds_.peer_token,
                               .tls = tls_.peers.get(),
                               .tls_trust = peer_tls_trust(options_)},
             &bytes_.peer),
      rpc_{.server_id = id_,
           .advertise_address = advertise_,
           .host = host_,
           .store = store_.get(),
           .peers = peers_,
           .catalog = catalog_,
           .models = models_,
           .workers = workers_,
           .started = std::chrono::steady_clock::now(),
           .request_stop = [this] { request_stop(); },
           .set_model_configs =
               [this](const std::string& yaml) {
                 auto version = models_.replace(
                     configs_for_reload(yaml, "setModelConfigs", loaded_model_names()));
                 spdlog::info("model configs replaced over RPC (version {})", version);
                 // `agentctl reload` reloads what SIGHUP does: the token file too.
                 reload_tokens_logged("agentctl reload");
                 return version;
               },
           .bytes = &bytes_,
           .client_backlog_limit = options_.max_client_backlog_mb << 20,
           .max_message_bytes = options_.max_message_bytes,
           .close_connection = {}},  // set per connection (serve())
      bootstrap_(make_agent_server(rpc_)),
      gate_{.tokens = creds_.tokens, .throttle = {}},
      pre_login_(io.provider->getTimer(), options_.max_unauthenticated_connections,
                 static_cast<std::int64_t>(options_.login_timeout * 1000) * kj::MILLISECONDS),
      stop_promise_(nullptr),
      tasks_(task_errors_) {
  host_.set_limits(AgentHost::Limits{
      .max_agents = options_.max_agents,
      .max_queued_calls = options_.max_queued_calls,
      .max_queued_calls_per_agent = options_.max_queued_calls_per_agent});
  host_.set_watch(watch_options(options_));
  if (!options_.trace_file.empty()) {
    trace_file_ = std::make_unique<TraceFile>(options_.trace_file, id_);
    host_.set_span_sink([file = trace_file_.get()](const SpanRecord& s) { file->write(s); });
  }
  for (auto& cls : extra_classes) catalog_.add(std::move(cls), "the calling program");
  for (const auto& dir : options_.plugin_dirs) plugins_.load_dir(dir, catalog_);
  const std::vector<std::string> from_dirs = plugins_.loaded();
  for (const auto& p : options_.plugins) {
    // A bare name may be found in a --plugin-dir loaded above: not loaded twice. (The same
    // --plugin given twice still is, and is refused as a class registered twice.)
    auto path = PluginLoader::find(p, options_.plugin_dirs);
    std::error_code ec;
    if (std::none_of(from_dirs.begin(), from_dirs.end(), [&](const std::string& l) {
          return std::filesystem::equivalent(l, path, ec);
        }))
      plugins_.load(path, catalog_);
  }
  class_names_ = catalog_.names();
  if (!options_.model_config_path.empty())
    models_.replace(load_model_configs(options_.model_config_path));
  auto paf = kj::newPromiseAndFulfiller<void>();
  stop_fulfiller_ = kj::mv(paf.fulfiller);
  stop_promise_ = kj::mv(paf.promise);
  tasks_.add(bridge_.run());
  tasks_.add(sweep_loop());
  if (options_.stop_on_stdin_eof) tasks_.add(watch_stdin());
  if (connector) services_.set_connector(connector(*this));
  if (store_) restore();
}

void Server::restore() {
  restore_from_store(host_, *store_, catalog_, io_.waitScope,
                     RestoreOptions{id_, options_.max_pool_size,
                                    seconds_to_ms(options_.max_expire_time),
                                    options_.drop_missing_classes, options_.state_dir});
}

std::vector<std::string> Server::read_auth_tokens(const std::string& file) {
  auto tokens = read_token_file(file, "--auth-token-file");
  for (const auto& t : tokens)
    if (t.size() < 16)
      spdlog::warn("--auth-token-file {}: a token of {} characters is easy to guess; use long "
                   "random ones (`openssl rand -hex 32`)",
                   file, t.size());
  return tokens;
}

Server::Credentials Server::load_credentials(const ServerOptions& o) {
  Credentials c;
  if (!o.auth_token_file.empty()) {
    auto tokens = read_auth_tokens(o.auth_token_file);
    c.tokens = TokenSet(tokens);
    c.peer_token = tokens.front();
  }
  if (!o.peer_token_file.empty())
    c.peer_token = read_token_file(o.peer_token_file, "--peer-token-file").front();
  return c;
}

Server::Tls Server::load_tls(const ServerOptions& o) {
  Tls t;
  if (o.tls_cert.empty()) return t;
  t.server = TlsConfig::server(TlsFiles{.cert = o.tls_cert, .key = o.tls_key, .ca = o.tls_client_ca});
  // To peers: this server's certificate as its client certificate (for peers requiring mutual
  // TLS), trusting --peer-tls-ca, else --tls-client-ca, else the system's CAs.
  t.peers = TlsConfig::client(TlsFiles{.cert = o.tls_cert,
                                       .key = o.tls_key,
                                       .ca = o.peer_tls_ca.empty() ? o.tls_client_ca : o.peer_tls_ca,
                                       .ca_name = o.peer_tls_ca.empty() ? "--tls-client-ca"
                                                                        : "--peer-tls-ca"});
  return t;
}

Server::~Server() {
  if (store_) {
    // Everything submitted is committed; the agents destroyed below stay in the store.
    store_->flush();
    host_.set_store(nullptr);
    store_->close();
  }
  if (unix_listener_) ::unlink(options_.unix_socket.c_str());
  bridge_.close();
  host_.remove_all_at_exit();
  lifecycle_.submit(
      [usage = std::make_shared<ServerServices::UsageMap>(services_.take_usage())]() mutable {
        usage.reset();
      });
  workers_.stop();
  lifecycle_.stop();
  services_.close();
}

std::uint16_t Server::listen() {
  kj::Own<kj::NetworkAddress> addr;
  try {
    addr = io_.provider->getNetwork()
               .parseAddress(to_kj(options_.host), static_cast<uint>(options_.port))
               .wait(io_.waitScope);
  } catch (const kj::Exception& e) {
    throw Error(ErrorCode::config_error,
                fmt::format("--host {}: cannot resolve: {}", options_.host, e.getDescription().cStr()));
  }
  try {
    listener_ = addr->listen();
  } catch (const kj::Exception& e) {
    std::string why = bind_failure(e);
    throw Error(ErrorCode::config_error,
                fmt::format("cannot listen on {}:{}: {}{}", options_.host, options_.port, why,
                            options_.port != 0 ? " (is another server using this port? pick "
                                                 "another with --port, or --port 0 for a free one)"
                                               : ""));
  }
  auto port = static_cast<std::uint16_t>(listener_->getPort());
  if (options_.advertise_address.empty()) {
    std::string host = options_.host;
    if (host == "0.0.0.0" || host == "::" || host == "*") {
      char name[256] = {};
      host = ::gethostname(name, sizeof name - 1) == 0 ? name : "127.0.0.1";
    }
    advertise_ = fmt::format("{}:{}", host, port);
  } else {
    advertise_ = options_.advertise_address;
  }
  rpc_.advertise_address = advertise_;
  if (options_.metrics_port != 0) {
    try {
      auto metrics_addr = io_.provider->getNetwork()
                              .parseAddress(to_kj(options_.host),
                                            static_cast<uint>(options_.metrics_port))
                              .wait(io_.waitScope);
      metrics_ = std::make_unique<MetricsEndpoint>(metrics_addr->listen(),
                                                   io_.provider->getTimer(),
                                                   [this] { return render_metrics(metrics()); });
    } catch (const kj::Exception& e) {
      listener_ = nullptr;
      throw Error(ErrorCode::config_error,
                  fmt::format("--metrics-port: cannot listen on {}:{}: {} (pick another port, "
                              "or 0 to turn metrics off)",
                              options_.host, options_.metrics_port, bind_failure(e)));
    }
    spdlog::info("metrics at http://{}:{}/metrics", options_.host, metrics_->port());
  }
  if (!options_.unix_socket.empty()) {
    try {
      listen_unix();
    } catch (...) {
      listener_ = nullptr;
      metrics_ = nullptr;
      throw;
    }
  }
  accepting_ = accept_loop(*listener_, false).eagerlyEvaluate([](kj::Exception&& e) {
    spdlog::error("accepting connections failed: {}", e.getDescription().cStr());
  });
  if (unix_listener_)
    accepting_unix_ = accept_loop(*unix_listener_, true).eagerlyEvaluate([](kj::Exception&& e) {
      spdlog::error("accepting connections on --unix-socket failed: {}", e.getDescription().cStr());
    });
  return port;
}

void Server::listen_unix() {
  const std::string& path = options_.unix_socket;
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode))
      throw Error(ErrorCode::config_error,
                  fmt::format("--unix-socket {}: exists and is not a socket (remove it or pick "
                              "another path)",
                              path));
    // A socket file: in use if something accepts on it, else left over from a crash.
    int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    std::strncpy(sa.sun_path, path.c_str(), sizeof sa.sun_path - 1);
    bool live = fd >= 0 && ::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0;
    if (fd >= 0) ::close(fd);
    if (live)
      throw Error(ErrorCode::config_error,
                  fmt::format("--unix-socket {}: another server is listening there", path));
    ::unlink(path.c_str());
  }
  try {
    auto addr = io_.provider->getNetwork().parseAddress(to_kj("unix:" + path)).wait(io_.waitScope);
    unix_listener_ = addr->listen();
  } catch (const kj::Exception& e) {
    throw Error(ErrorCode::config_error,
                fmt::format("--unix-socket {}: cannot listen: {}", path, bind_failure(e)));
  }
  gid_t gid = static_cast<gid_t>(-1);
  if (!options_.unix_socket_group.empty()) {
    struct group* g = ::getgrnam(options_.unix_socket_group.c_str());
    if (g == nullptr) {
      unix_listener_ = nullptr;
      ::unlink(path.c_str());
      throw Error(ErrorCode::config_error,
                  fmt::format("--unix-socket-group {}: no such group", options_.unix_socket_group));
    }
    gid = g->gr_gid;
  }
  if (::chmod(path.c_str(), 0660) != 0 ||
      (gid != static_cast<gid_t>(-1) && ::chown(path.c_str(), static_cast<uid_t>(-1), gid) != 0)) {
    int err = errno;
    unix_listener_ = nullptr;
    ::unlink(path.c_str());
    throw Error(ErrorCode::config_error,
                fmt::format("--unix-socket {}: cannot set its mode or group: {}", path,
                            std::strerror(err)));
  }
  spdlog::info("also listening on unix:{} (mode 0660{})", path,
               options_.unix_socket_group.empty() ? "" : ", group " + options_.unix_socket_group);
}

kj::Promise<void> Server::sweep_loop() {
  return io_.provider->getTimer().afterDelay(1 * kj::SECONDS).then([this]() {
    host_.sweep_results();
    // Memory freed by one thread and allocated by another (calls, completions, the state
    // store's writer) leaves free pages scattered over glibc's arenas: hand them back to the
    // system every 10 s, on a worker (it walks every arena). as_server itself links jemalloc
    // (apps/as_server), where this does nothing; it serves servers in programs on glibc's
    // malloc (local mode).
    if (++sweeps_ % 10 == 0) workers_.submit([] { ::malloc_trim(0); });
    return sweep_loop();
  });
}

kj::Promise<void> Server::watch_stdin() {
  auto in = io_.lowLevelProvider->wrapInputFd(STDIN_FILENO);
  auto buf = kj::heapArray<kj::byte>(256);
  auto read = in->tryRead(buf.begin(), 1, buf.size());
  return read.then([this, in = kj::mv(in), buf = kj::mv(buf)](size_t n) mutable -> kj::Promise<void> {
    if (n == 0) {
      spdlog::info("standard input closed (parent gone): stopping");
      request_stop();
      return kj::READY_NOW;
    }
    return watch_stdin();
  }, [this](kj::Exception&&) {
    request_stop();
  });
}

void Server::handle_signals() {
  tasks_.add(signal_loop(SIGINT));
  tasks_.add(signal_loop(SIGTERM));
  tasks_.add(signal_loop(SIGHUP));
}

kj::Promise<void> Server::signal_loop(int signo) {
  return io_.unixEventPort.onSignal(signo).then([this, signo](siginfo_t) {
    if (signo == SIGHUP) {
      if (notifier_)
        notifier_->notify(fmt::format("RELOADING=1\nMONOTONIC_USEC={}",
                                      std::chrono::duration_cast<std::chrono::microseconds>(
                                          std::chrono::steady_clock::now().time_since_epoch())
                                          .count()));
      KJ_DEFER(if (notifier_) notifier_->notify("READY=1\nSTATUS=" + status_text()));
      try {
        if (options_.model_config_path.empty()) {
          spdlog::info("SIGHUP: no --model-config-path to reload");
        } else {
          auto v = reload_models();
          spdlog::info("SIGHUP: reloaded model configs from {} (version {})",
                       options_.model_config_path, v);
        }
      } catch (const Error& e) {
        spdlog::error("SIGHUP: kept the previous model configs: {}", e.message());
      }
      reload_tokens_logged("SIGHUP");
    } else {
      spdlog::info("{}: stopping", signo == SIGINT ? "SIGINT" : "SIGTERM");
      request_stop();
    }
    return signal_loop(signo);
  });
}

void Server::reload_tokens_logged(const char* why) {
  if (options_.auth_token_file.empty()) return;
  try {
    auto closed = reload_tokens();
    spdlog::info("{}: reloaded the tokens from {} ({} connection(s) logged in with a token no "
                 "longer there closed)",
                 why, options_.auth_token_file, closed);
  } catch (const Error& e) {
    spdlog::error("{}: kept the previous tokens: {}", why, e.message());
  }
}

std::uint64_t Server::reload_models() {
  return models_.replace(
      read_configs_for_reload(options_.model_config_path, loaded_model_names()));
}

std::vector<std::string> Server::loaded_model_names() const {
  std::vector<std::string> names;
  for (auto& n : models_.names())
    if (n != "echo") names.push_back(std::move(n));  // the built-in one is always there
  return names;
}

void Server::request_stop() {
  if (stop_fulfiller_ && stop_fulfiller_->isWaiting()) stop_fulfiller_->fulfill();
}

kj::Promise<void> Server::run() {
  return kj::mv(stop_promise_).then([this]() {
    stopping_ = true;
    if (notifier_) notifier_->notify("STOPPING=1\nSTATUS=stopping: " + status_text());
    accepting_ = nullptr;  // stop accepting: cancel the pending accept, then close the socket
    listener_ = nullptr;
    accepting_unix_ = nullptr;
    if (unix_listener_) {
      unix_listener_ = nullptr;
      ::unlink(options_.unix_socket.c_str());
    }
    host_.begin_stop();
    auto deadline = io_.provider->getTimer().now() +
                    static_cast<std::int64_t>(options_.shutdown_grace * 1000) * kj::MILLISECONDS;
    if (host_.running_calls() > 0)
      spdlog::info("waiting up to {} s for {} running call(s)", options_.shutdown_grace,
                   host_.running_calls());
    return drain(deadline).then([this, deadline]() { return settle(deadline); });
  });
}

kj::Promise<void> Server::settle(kj::TimePoint deadline) {
  // The last calls' completions are posted to the bridge, gather in their session's outbox for
  // a loop turn, leave as messages queued behind the connection's earlier writes, and are then
  // written. A marker posted now runs after every completion posted before it; a few more turns
  // let the outboxes flush and the writes start; then wait for the writes to finish.
  auto marker = kj::newPromiseAndFulfiller<void>();
  bridge_.post([f = kj::mv(marker.fulfiller)]() mutable { f->fulfill(); });
  const auto limit = std::min(deadline, io_.provider->getTimer().now() + 2 * kj::SECONDS);
  return marker.promise.then([]() { return kj::evalLater([]() {}); })
      .then([]() { return kj::evalLater([]() {}); })
      .then([]() { return kj::evalLater([]() {}); })
      .then([this, limit]() { return wait_for_writes(limit, 0); });
}

kj::Promise<void> Server::wait_for_writes(kj::TimePoint limit, int quiet_checks) {
  auto& timer = io_.provider->getTimer();
  // Twice in a row with nothing in flight: no message is still on its way to a socket.
  quiet_checks = writes_in_flight_ == 0 ? quiet_checks + 1 : 0;
  if (quiet_checks >= 2 || timer.now() >= limit) return kj::READY_NOW;
  return timer.afterDelay(1 * kj::MILLISECONDS).then([this, limit, quiet_checks]() {
    return wait_for_writes(limit, quiet_checks);
  });
}

kj::Promise<void> Server::drain(kj::TimePoint deadline) {
  auto& timer = io_.provider->getTimer();
  if (host_.running_calls() == 0) {
    // The last calls' commits, so their completions can go out; a disk that stalls past the
    // grace period does not hold the stop (what it has not committed was never acknowledged).
    const auto left = deadline - timer.now();
    if (store_ && !store_->flush_for(std::chrono::milliseconds(
                      std::max<std::int64_t>(0, left / kj::MILLISECONDS)))) {
      spdlog::warn("grace period over; the state store's last commit has not finished (the disk "
                   "stalls): exiting without it, so the calls in it were never reported done");
      store_stalled_ = true;
    }
    return kj::READY_NOW;
  }
  if (timer.now() >= deadline) {
    spdlog::warn("grace period over; {} call(s) still running are abandoned", host_.running_calls());
    return kj::READY_NOW;
  }
  return timer.afterDelay(10 * kj::MILLISECONDS).then([this, deadline]() { return drain(deadline); });
}

void Server::attach_notifier(const SdNotifier& notifier) {
  notifier_ = &notifier;
  if (!notifier.enabled()) return;
  // Half the watchdog timeout (sd_watchdog_enabled(3)); STATUS= refreshes at most every 5 s.
  auto interval = 5 * kj::SECONDS;
  if (auto wd = notifier.watchdog_timeout(); wd.count() > 0)
    interval = std::min(interval, wd.count() / 2 * kj::MICROSECONDS);
  tasks_.add(notify_loop(interval));
}

kj::Promise<void> Server::notify_loop(kj::Duration interval) {
  // Runs on this loop: a wedged loop stops the pings, and systemd restarts us.
  std::string state = std::string("STATUS=") + (stopping_ ? "stopping: " : "serving: ") + status_text();
  if (notifier_->watchdog_timeout().count() > 0) state = "WATCHDOG=1\n" + state;
  notifier_->notify(state);
  return io_.provider->getTimer().afterDelay(interval).then(
      [this, interval]() { return notify_loop(interval); });
}

std::string Server::status_text() const {
  const auto watch = host_.watch_stats();
  return fmt::format("{} agent(s), {} running, {} queued, {} completed, {} failed call(s), "
                     "workers {}/{} busy{}",
                     host_.size(), host_.running_calls(), host_.queued_calls(),
                     host_.calls_completed(), host_.calls_failed(), workers_.busy(),
                     workers_.max_threads(),
                     watch.slow_now == 0 ? std::string()
                                         : fmt::format(", {} slow call(s) (over --slow-call-warn)",
                                                       watch.slow_now));
}

MetricsSnapshot Server::metrics() const {
  MetricsSnapshot m;
  m.agents = host_.size();
  m.calls_ok = host_.calls_completed();
  m.calls_error = host_.calls_failed();
  m.calls_by_class = host_.calls_by_class();
  m.calls_queued = host_.queued_calls();
  m.calls_running = host_.running_calls();
  m.latency = host_.call_latency();
  const auto results = host_.result_stats();
  m.result_pool_size = results.size;
  m.result_pool_evictions = results.evictions;
  m.peer_fetches = peers_.fetches();
  auto usage = models_.total_usage();
  m.model_calls = usage.calls;
  m.model_errors = usage.errors;
  m.prompt_tokens = usage.prompt_tokens;
  m.completion_tokens = usage.completion_tokens;
  m.bytes = bytes_;
  m.workers = workers_.threads();
  m.workers_busy = workers_.busy();
  m.workers_max = workers_.max_threads();
  const auto watch = host_.watch_stats();
  m.calls_slow = watch.slow_now;
  m.calls_slow_total = watch.slow_total;
  m.calls_timed_out = watch.timed_out;
  return m;
}

}  // namespace agentd::detail

// Server: the wiring (the constructor and destructor), credentials and TLS, reloads. Listening
// is in listeners.cpp, accepting and serving connections in server_connections.cpp, signals,
// stdin, sd_notify and the stop in lifecycle.cpp, the stats in server_stats.cpp.
#include "server.h"

#include "model_config.h"
#include "model_reload.h"
#include "restore.h"
#include "value_codec.h"

#include <agentd/error.h>

#include <algorithm>
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

// --server-id, else the id a previous run saved in --state-dir (placeholders naming it stay
// valid), else a new one.
std::string initial_id(const ServerOptions& o, StateStore* store) {
  if (!o.server_id.empty()) return o.server_id;
  std::string saved = store != nullptr ? store->server_id() : std::string();
  return saved.empty() ? new_id().substr(0, 12) : saved;
}

// Constructors and destructors run on a pool of their own (AgentHost), up to a quarter of
// --max-workers (at least 2): creation goes on while every call worker is blocked.
std::size_t lifecycle_workers(const ServerOptions& o) { return std::max<std::size_t>(2, o.max_workers / 4); }
// The lifecycle pool grows only for constructors stuck this long. A burst of short constructors
// stalls for milliseconds at a time (Python's garbage collector or a descheduled thread holding
// the GIL, two busy CPUs); growing at the call workers' 1 ms left up to max/4 threads idling for
// 30 s after every large create_agents. A constructor that really blocks (a connection, a file)
// waits 50 ms more for its thread.
constexpr std::chrono::milliseconds kLifecycleStarvedAfter{50};

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
      store_(options_.state_dir.empty() ? nullptr : std::make_unique<StateStore>(options_.state_dir)),
      id_(initial_id(options_, store_.get())),
      services_(models_),
      bridge_(io.unixEventPort),
      workers_(min_workers(options_), options_.max_workers),
      lifecycle_(1, lifecycle_workers(options_), std::chrono::seconds(30), kLifecycleStarvedAfter),
      scheduler_(io.provider->getTimer(), bridge_, workers_),
      model_http_(io, &workers_, &bridge_),
      tools_(io, model_http_, bridge_,
             options_.tool_config_path.empty() ? ToolConfig{} : read_tool_config(options_.tool_config_path)),
      tool_handle_(std::make_shared<ToolRegistryHandle>(tools_, bridge_)),
      host_(catalog_, services_, workers_, lifecycle_, bridge_, scheduler_, pool_limits(options_)),
      peers_(io,
             PeerPool::Options{.connect_timeout = seconds_to_ms(options_.peer_connect_timeout),
                               .fetch_timeout = seconds_to_ms(options_.peer_fetch_timeout),
                               .token = creds_.peer_token,
                               .tls = tls_.peers.get(),
                               .tls_trust = peer_tls_trust(options_)},
             &bytes_.peer),
      rpc_{.server_id = id_,
           .host = host_,
           .peers = peers_,
           .server_info = [this] { return to_server_info(stats()); },
           .request_stop = [this] { request_stop(); },
           .set_model_configs =
               [this](const std::string& yaml) {
                 auto version =
                     models_.replace(configs_for_reload(yaml, "setModelConfigs", loaded_model_names()));
                 spdlog::info("model configs replaced over RPC (version {})", version);
                 // `agentctl reload` reloads what SIGHUP does: the token file and tool configs too.
                 reload_tokens_logged("agentctl reload");
                 reload_tools_logged("agentctl reload");
                 return version;
               },
           .list_tools = [this](bool start) { return tools_.servers(start); },
           .call_tool =
               [this](std::string server, std::string tool, Value args,
                      std::optional<std::chrono::milliseconds> t) {
                 return tools_.call(std::move(server), std::move(tool), std::move(args),
                                    ToolCallOptions{.timeout = t});
               },
           .client_backlog_limit = options_.max_client_backlog_mb << 20,
           .max_message_bytes = options_.max_message_bytes,
           .close_connection = {}},  // set per connection (serve())
      bootstrap_(make_agent_server(rpc_)),
      gate_{.tokens = creds_.tokens, .throttle = {}},
      pre_login_(io.provider->getTimer(), options_.max_unauthenticated_connections,
                 static_cast<std::int64_t>(options_.login_timeout * 1000) * kj::MILLISECONDS),
      stop_promise_(nullptr),
      tasks_(task_errors_) {
  host_.set_limits(AgentHost::Limits{.max_agents = options_.max_agents,
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
    if (std::none_of(from_dirs.begin(), from_dirs.end(),
                     [&](const std::string& l) { return std::filesystem::equivalent(l, path, ec); }))
      plugins_.load(path, catalog_);
  }
  plugins_.load_python(options_.agent_dirs, catalog_);
  class_names_ = catalog_.names();
  if (!options_.model_config_path.empty()) models_.replace(load_model_configs(options_.model_config_path));
  auto paf = kj::newPromiseAndFulfiller<void>();
  stop_fulfiller_ = kj::mv(paf.fulfiller);
  stop_promise_ = kj::mv(paf.promise);
  tasks_.add(bridge_.run());
  tasks_.add(sweep_loop());
  if (options_.stop_on_stdin_eof) tasks_.add(watch_stdin());
  if (connector) services_.set_connector(connector(*this));
  services_.set_tools(tool_handle_);
  if (tools_.size() > 0) spdlog::info("tool servers from {}: {}", options_.tool_config_path, tools_.size());
  tools_.start();
  if (store_) restore();
}

void Server::restore() {
  restore_from_store(host_, *store_, catalog_, io_.waitScope,
                     RestoreOptions{id_, options_.max_pool_size, seconds_to_ms(options_.max_expire_time),
                                    options_.drop_missing_classes, options_.state_dir});
}

std::vector<std::string> Server::read_auth_tokens(const std::string& file) {
  auto tokens = read_token_file(file, "--auth-token-file");
  for (const auto& t : tokens)
    if (t.size() < 16)
      spdlog::warn(
          "--auth-token-file {}: a token of {} characters is easy to guess; use long "
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
  t.peers =
      TlsConfig::client(TlsFiles{.cert = o.tls_cert,
                                 .key = o.tls_key,
                                 .ca = o.peer_tls_ca.empty() ? o.tls_client_ca : o.peer_tls_ca,
                                 .ca_name = o.peer_tls_ca.empty() ? "--tls-client-ca" : "--peer-tls-ca"});
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
  tool_handle_->close();  // agents' tool calls from now on fail with stopping
  bridge_.close();
  host_.remove_all_at_exit();
  lifecycle_.submit([usage = std::make_shared<ServerServices::UsageMap>(services_.take_usage())]() mutable {
    usage.reset();
  });
  workers_.stop();
  lifecycle_.stop();
  services_.close();
}

void Server::reload_tokens_logged(const char* why) {
  if (options_.auth_token_file.empty()) return;
  try {
    auto closed = reload_tokens();
    spdlog::info(
        "{}: reloaded the tokens from {} ({} connection(s) logged in with a token no "
        "longer there closed)",
        why, options_.auth_token_file, closed);
  } catch (const Error& e) {
    spdlog::error("{}: kept the previous tokens: {}", why, e.message());
  }
}

void Server::reload_tools_logged(const char* why) {
  if (options_.tool_config_path.empty()) return;
  try {
    tools_.reconfigure(read_tool_config(options_.tool_config_path));
    spdlog::info("{}: reloaded the tool servers from {} ({})", why, options_.tool_config_path, tools_.size());
  } catch (const Error& e) {
    spdlog::error("{}: kept the previous tool servers: {}", why, e.message());
  }
}

std::uint64_t Server::reload_models() {
  return models_.replace(read_configs_for_reload(options_.model_config_path, loaded_model_names()));
}

std::vector<std::string> Server::loaded_model_names() const {
  std::vector<std::string> names;
  for (auto& n : models_.names())
    if (n != "echo") names.push_back(std::move(n));  // the built-in one is always there
  return names;
}

}  // namespace agentd::detail

// Server: the parts of one agent server wired together (the "main()" of as_server, reusable by
// local mode). Construct, listen() (unless local), then await run(); all on one KJ loop thread.
#pragma once

#include <agentd/agent.h>

#include "agent_host.h"
#include "server_services.h"
#include "async_http.h"
#include "tool_registry.h"
#include "async_loop.h"
#include "bridge.h"
#include "lanes.h"
#include "login_gate.h"
#include "tls.h"
#include "metrics.h"
#include "model_registry.h"
#include "peer_pool.h"
#include "plugin_loader.h"
#include "pre_login.h"
#include "result_pool.h"
#include "rpc_server.h"
#include "sd_notify.h"
#include "trace_file.h"
#include "server_config.h"
#include "server_stats.h"
#include "task_errors.h"
#include "worker_pool.h"

#include <capnp/rpc-twoparty.h>
#include <kj/async-io.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

namespace agentd::detail {

class Server;
// Makes the server's AgentConnector once the server exists (main() passes the client layer's).
using ConnectorFactory = std::function<AgentConnector(Server& server)>;

class Server {
 public:
  // Loads plugins (and extra_classes, e.g. a local-mode program's own) and model configs.
  // Throws Error (plugin_error, config_error) before anything starts. io is borrowed.
  // connector makes how agents here reach agents they name by reference (empty: they cannot).
  Server(ServerOptions options, kj::AsyncIoContext& io, std::vector<AgentClass> extra_classes = {},
         ConnectorFactory connector = {});
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds host:port (and host:metrics-port when set) and starts accepting. Returns the bound
  // port. Throws Error(config_error) when an address cannot be resolved or bound (a busy port).
  std::uint16_t listen();
  // The bound --metrics-port after listen(); 0 when metrics are off.
  std::uint16_t metrics_port() const { return metrics_ ? metrics_->port() : 0; }

  // Serves until a stop is requested (signal, stop RPC, stdin EOF, request_stop()), then stops
  // accepting, fails queued calls, and lets running calls finish within the grace period.
  kj::Promise<void> run();

  // Handles SIGINT/SIGTERM (stop) and SIGHUP (reload model configs and --auth-token-file, each
  // kept as it was when its file is bad, logged as an error). The signals must have been
  // captured with kj::UnixEventPort::captureSignal() before any thread was started.
  void handle_signals();

  void request_stop();

  // No agent code is running (after run(): every running call finished within the grace).
  // False: calls still running, or a state store commit still stuck, past the grace period
  // (main() then exits without waiting for them).
  bool idle() const { return host_.running_calls() == 0 && !store_stalled_; }

  // The AgentServer itself, past any gate (local mode uses it without a network; connections
  // get it through their Gate's login).
  wire::AgentServer::Client bootstrap() { return bootstrap_; }

  // Any thread: runs fn on this server's loop thread (now, when called there); dropped once
  // the server is stopping.
  void on_loop(kj::Function<void()> fn) { host_.on_loop(kj::mv(fn)); }
  kj::AsyncIoContext& io() { return io_; }
  // Loop thread: the server at origin ("host:port") over this server's pooled peer connection
  // to it (usable at once), and a promise that settles when that connection is lost or cannot
  // be made.
  wire::AgentServer::Client peer(const std::string& origin) { return peers_.server_at(origin); }
  kj::Promise<void> peer_lost(const std::string& origin) { return peers_.lost(origin); }

  // Clients must present one of --auth-token-file's tokens.
  bool requires_token() const { return !creds_.tokens.empty(); }
  bool serves_tls() const { return tls_.server != nullptr; }
  bool requires_client_certificates() const {
    return tls_.server && tls_.server->requires_client_certificates();
  }
  const std::string& id() const { return id_; }
  const std::string& advertise_address() const { return advertise_; }
  const std::vector<std::string>& class_names() const { return class_names_; }

  // Re-reads --model-config-path (SIGHUP). Returns the new version; throws Error(config_error).
  // An empty file is refused while configs are loaded (model_reload.h).
  std::uint64_t reload_models();
  // Re-reads --tool-config-path (if any) into the tool registry; a bad file keeps the old one
  // (logged at error, saying `why`).
  void reload_tools_logged(const char* why);
  // Re-reads --auth-token-file (SIGHUP; nothing without one): from now on its tokens are the
  // ones that log in, and the connections logged in with a token no longer there are closed
  // (returns how many). Throws Error(config_error), keeping the tokens there were, when the file
  // cannot be read, may be read by others, or holds no token. The peer token stays as read at
  // start. Loop thread.
  std::size_t reload_tokens();
  // reload_tokens(), logging what happened under why ("SIGHUP", "agentctl reload"); a file that
  // cannot be used keeps the previous tokens (logged as an error). Loop thread.
  void reload_tokens_logged(const char* why);
  // The tokens of --auth-token-file (warning about short ones); throws as read_token_file().
  static std::vector<std::string> read_auth_tokens(const std::string& file);
  // The loaded model config names, without the built-in echo.
  std::vector<std::string> loaded_model_names() const;

  // Keeps the service manager informed through notifier (borrowed; must outlive this server):
  // WATCHDOG=1 (at half its watchdog timeout) and STATUS= with agents and calls from this loop,
  // RELOADING=1 then READY=1 around a SIGHUP reload, STOPPING=1 when a stop begins.
  // Call once, after listen(); READY=1 itself is the caller's (it knows when it is ready).
  void attach_notifier(const SdNotifier& notifier);
  // One snapshot of this server's counters (server_stats.cpp), which AgentServer.info, /metrics
  // and STATUS= report. Loop thread.
  ServerStats stats() const;
  // TODO(cleanup): tests/unit/session and tests/fuzz still call metrics(); stats() is the one.
  ServerStats metrics() const { return stats(); }
  // status_text(stats()) (server_stats.h): for STATUS= and logs. Loop thread.
  std::string status_text() const;

 private:
  // Restores the agents and results in store_ (the constructor, before serving; the policy is
  // host/restore.h); throws Error(config_error) naming the agents that cannot come back and the
  // database file.
  void restore();
  kj::Promise<void> accept_loop(kj::ConnectionReceiver& listener, bool local);
  void listen_unix();  // listeners.cpp
  // lifecycle.cpp: housekeeping, signals, stdin, sd_notify, the stop.
  kj::Promise<void> sweep_loop();
  kj::Promise<void> drain(kj::TimePoint deadline);
  // After the last call: until its completions are written to the clients (bounded).
  kj::Promise<void> settle(kj::TimePoint deadline);
  kj::Promise<void> wait_for_writes(kj::TimePoint limit, int quiet_checks);
  kj::Promise<void> watch_stdin();
  kj::Promise<void> signal_loop(int signo);
  kj::Promise<void> notify_loop(kj::Duration interval);

  ServerOptions options_;
  kj::AsyncIoContext& io_;
  // The tokens clients log in with and the one this server presents to peers (read at start).
  struct Credentials {
    TokenSet tokens;
    std::string peer_token;
  };
  static Credentials load_credentials(const ServerOptions& o);
  Credentials creds_;
  // --tls-cert/--tls-key (null: plaintext), and the client side this server's peer connections
  // use (null unless this server serves TLS).
  struct Tls {
    std::unique_ptr<TlsConfig> server;
    std::unique_ptr<TlsConfig> peers;
  };
  static Tls load_tls(const ServerOptions& o);
  Tls tls_;
  // --state-dir (null: memory only). Before id_ (a restart keeps its server id) and before the
  // host, which borrows it and is destroyed first.
  std::unique_ptr<StateStore> store_;
  std::string id_;
  std::string advertise_;
  const std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
  Traffic bytes_;
  std::size_t writes_in_flight_ = 0;  // on client connections (see settle())

  // Declaration order is destruction order reversed: plugins outlive every agent they made.
  ClassCatalog catalog_;
  PluginLoader plugins_;
  std::vector<std::string> class_names_;
  ModelRegistry models_;
  ServerServices services_;
  Bridge bridge_;
  WorkerPool workers_;
  WorkerPool lifecycle_;     // agent constructors and destructors (never behind blocked calls)
  LoopScheduler scheduler_;  // where asynchronous agents run (this thread's AsyncLoop)
  AsyncHttp model_http_;     // their model calls (this thread's current_async_http())
  // --tool-config-path's MCP tool servers (none configured: an empty registry), and the handle
  // agents' Tools hold (closed before the registry goes).
  ToolRegistry tools_;
  std::shared_ptr<ToolRegistryHandle> tool_handle_;
  AgentHost host_;  // before the two above: its suspended calls may use them
  PeerPool peers_;
  RpcContext rpc_;
  wire::AgentServer::Client bootstrap_;
  GateContext gate_;  // shared by every connection's gate (the bootstrap capability)
  // The connections not logged in yet (--max-unauthenticated-connections, --login-timeout).
  PreLoginQueue pre_login_;
  struct Connection;                   // one accepted connection with its own RPC system
  std::set<Connection*> connections_;  // the live ones (each removes itself when destroyed)
  // local: from the Unix socket, plaintext even when TCP clients must use TLS. Until the login,
  // the connection holds a place in pre_login_. (server_connections.cpp)
  kj::Promise<void> serve(kj::Own<kj::AsyncIoStream> stream, bool local = false);
  // net::accept_connection() (the first byte tells TLS from plaintext; then any TLS
  // handshake), then serve_rpc(). slot is the connection's place in pre_login_, owned by
  // serve()'s promise (outlives this one's).
  kj::Promise<void> handshake(kj::Own<kj::AsyncIoStream> stream, std::string peer, bool local,
                              PreLoginSlot& slot);
  // The RPC connection, its bootstrap the Gate; a login there frees slot (see handshake()).
  // tls: stream is a TLS session; tls_expected: a plaintext client on a TLS server, whose login
  // is refused saying so.
  kj::Promise<void> serve_rpc(kj::Own<kj::AsyncIoStream> stream, std::string peer, bool tls,
                              bool tls_expected, PreLoginSlot& slot);
  kj::Own<kj::ConnectionReceiver> listener_;
  kj::Promise<void> accepting_ = nullptr;          // the accept loop on listener_ (goes first)
  kj::Own<kj::ConnectionReceiver> unix_listener_;  // --unix-socket
  kj::Promise<void> accepting_unix_ = nullptr;
  bool accept_failing_ = false;  // the last accept failed (logged once)
  std::uint64_t sweeps_ = 0;     // sweep_loop() turns
  kj::Own<kj::PromiseFulfiller<void>> stop_fulfiller_;
  kj::Promise<void> stop_promise_;
  bool stopping_ = false;
  bool store_stalled_ = false;  // drain(): the last commit did not finish within the grace
  const SdNotifier* notifier_ = nullptr;
  TaskErrors task_errors_{"server task", spdlog::level::err};
  kj::TaskSet tasks_;
  // --lane-threads (null: none); after host_, which its threads call into: stopped first.
  std::unique_ptr<Lanes> lanes_;
  std::unique_ptr<TraceFile> trace_file_;     // --trace-file; written by workers (stopped first)
  std::unique_ptr<MetricsEndpoint> metrics_;  // first to go: its requests read everything above
};

}  // namespace agentd::detail

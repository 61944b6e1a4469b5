#include "client_core.h"

#include "counting_stream.h"
#include "pooled_connector.h"
#include "server.h"
#include "tls.h"
#include "tokens.h"

#include <capnp/rpc-twoparty.h>
#include <fmt/format.h>
#include <kj/async-io.h>

namespace agentd::detail {

namespace {

// Everything the loop thread owns: the session state and, in local mode, the server it talks
// to in this process. Created and destroyed on the loop thread.
struct ClientLoop {
  explicit ClientLoop(kj::AsyncIoContext& io) : state(io) {}
  ~ClientLoop() {
    // The capabilities into the local server go before the server does; the connection, the
    // tasks (one runs the server) and the bridge after it.
    state.session = nullptr;
    state.server = nullptr;
    local = nullptr;
  }
  LoopState state;
  kj::Own<Server> local;
};

SendLimits send_limits(const ClientOptions& o) {
  SendLimits l;
  l.max_message_bytes = std::min(o.max_message_bytes, kMaxMessageBytes);
  l.timeout = o.timeout;
  l.retry_initial = o.overload_retry_initial;
  l.retry_max = std::max(o.overload_retry_max, o.overload_retry_initial);
  return l;
}

}  // namespace

ClientCore::ClientCore(Target target, ClientOptions options, std::unique_ptr<ChildProcess> child)
    : options_(options), child_dir_(target.child_dir), child_(std::move(child)) {
  std::promise<void> started;
  auto ready = started.get_future();
  thread_ = std::thread([this, target = std::move(target), started = std::move(started)]() mutable {
    thread_main(std::move(target), std::move(started));
  });
  try {
    ready.get();
  } catch (...) {
    thread_.join();
    throw;
  }
}

ClientCore::ClientCore(Attached attached, ClientOptions options) : options_(options) {
  attached_ = std::make_unique<LoopState>(attached.io);
  LoopState& loop = *attached_;
  loop.tasks.add(loop.bridge.run());
  loop.server = kj::mv(attached.server);
  loop.where = attached.address;
  loop.limits = send_limits(options_);
  address_ = std::move(attached.address);
  server_id_ = std::move(attached.server_id);
  port_ = attached.port;
  open_session(loop);
  KJ_IF_MAYBE(lost, attached.lost) {
    // The connection is gone: refuse new calls (the owner makes a new core for the address)
    // and fail the ones still waiting. The state itself stays until detach().
    auto close = [this]() {
      bridge_.store(nullptr);
      fail_all_tickets(*attached_, Error::retryable(ErrorCode::disconnected,
                                                    "lost the connection to as_server at " +
                                                        address_ + " before the call finished"));
    };
    // (Copies: then() would keep a reference to an lvalue lambda.)
    loop.tasks.add(lost->then([close]() { close(); }, [close](kj::Exception&&) { close(); }));
  }
  loop_ = &loop;
  bridge_.store(&loop.bridge);
}

void ClientCore::detach() {
  if (!attached_) return;
  bridge_.store(nullptr);
  LoopState& loop = *attached_;
  loop.bridge.close();
  fail_all_tickets(loop, Error::retryable(ErrorCode::disconnected,
                                          "the server holding the connection to " + address_ +
                                              " is stopping"));
  loop.session = nullptr;
  loop.server = nullptr;
  loop_ = nullptr;
  attached_.reset();
}

ClientCore::~ClientCore() {
  post([this]() {
    if (quit_ && quit_->isWaiting()) quit_->fulfill();
  });
  if (thread_.joinable()) thread_.join();
  if (child_) child_->stop(std::chrono::seconds(15));
}

void ClientCore::check_not_on_loop(const std::string& what) {
  AsyncLoop* loop = current_async_loop();
  if (loop != nullptr && loop->on_loop_thread())
    throw Error(ErrorCode::bad_request,
                fmt::format("{} would block the server's event loop: inside an asynchronous "
                            "agent, co_await the placeholder (reply() / call_async()) instead",
                            what));
}

void ClientCore::check_open(const std::string& what) const {
  if (!open()) throw Error(ErrorCode::disconnected, what + ": the client is closed");
}

void ClientCore::thread_main(Target target, std::promise<void> started) {
  bool announced = false;
  try {
    auto io = kj::setupAsyncIo();
    // Outlives the connection (declared before the loop state that holds it).
    std::unique_ptr<TlsConfig> tls;
    if (target.mode != Mode::local && (!options_.tls_ca.empty() || !options_.tls_cert.empty()))
      tls = TlsConfig::client(TlsFiles{.cert = options_.tls_cert,
                                       .key = options_.tls_key,
                                       .ca = options_.tls_ca,
                                       .cert_name = "tls_cert",
                                       .key_name = "tls_key",
                                       .ca_name = "tls_ca"});
    ClientLoop client_loop(io);
    LoopState& loop = client_loop.state;
    auto quit = kj::newPromiseAndFulfiller<void>();
    quit_ = kj::mv(quit.fulfiller);
    loop.tasks.add(loop.bridge.run());
    if (target.mode == Mode::local) {
      ServerOptions so;
      so.plugins = target.local.plugins;
      so.plugin_dirs = target.local.plugin_dirs;
      so.model_config_path = target.local.model_config_path;
      so.max_workers = target.local.max_workers;
      so.server_id = "local-" + new_id().substr(0, 8);
      client_loop.local = kj::heap<Server>(so, io, target.local.classes, pooled_agent_connector());
      loop.server = client_loop.local->bootstrap();
      server_id_ = client_loop.local->id();
      address_ = "local";
      loop.tasks.add(client_loop.local->run());
    } else {
      auto& timer = io.provider->getTimer();
      auto connect_ms = options_.connect_timeout.count() * kj::MILLISECONDS;
      // "unix:PATH" reaches a server's --unix-socket (plaintext: the file's permissions guard it).
      const bool unix_socket = target.host.rfind("unix:", 0) == 0;
      if (unix_socket) tls.reset();
      std::string where =
          unix_socket ? target.host : fmt::format("{}:{}", target.host, target.port);
      try {
        auto addr = timer.timeoutAfter(connect_ms, io.provider->getNetwork().parseAddress(
                                                       to_kj(target.host), target.port))
                        .wait(io.waitScope);
        auto raw = timer.timeoutAfter(connect_ms, addr->connect()).wait(io.waitScope);
        if (tls) {
          try {
            raw = timer.timeoutAfter(connect_ms, tls->connect(kj::mv(raw), target.host))
                      .wait(io.waitScope);
          } catch (const kj::Exception& e) {
            throw Error(ErrorCode::disconnected,
                        fmt::format("TLS handshake with as_server at {} failed: {} (a server "
                                    "without --tls-cert closes TLS connections: connect without "
                                    "tls_ca to a plaintext server; otherwise its certificate must "
                                    "be signed by a CA in tls_ca and name {})",
                                    where, e.getDescription().cStr(), target.host));
          }
        }
        loop.stream = kj::heap<CountingStream>(kj::mv(raw), loop.bytes);
      } catch (const Error&) {
        throw;
      } catch (const kj::Exception& e) {
        throw Error(ErrorCode::disconnected,
                    fmt::format("cannot connect to as_server at {}: {}; is it running there?",
                                where, e.getDescription().cStr()));
      }
      loop.rpc = kj::heap<capnp::TwoPartyClient>(*loop.stream);
      // Log in at the gate; info goes pipelined on the server the login returns.
      auto login = loop.rpc->bootstrap().castAs<wire::Gate>().loginRequest();
      login.setToken(to_kj(client_token(options_.token)));
      auto logged_in = login.send();
      loop.server = logged_in.getServer();
      auto info_sent = loop.server.infoRequest().send();
      try {
        auto answer = timer.timeoutAfter(connect_ms, kj::mv(logged_in)).wait(io.waitScope);
        if (answer.hasError()) {
          Error refused = read_error(answer.getError());
          throw Error(ErrorCode::unauthenticated,
                      fmt::format("as_server at {} refused the login: {}", where,
                                  refused.message()));
        }
      } catch (const kj::Exception& e) {
        if (tls)
          throw Error(ErrorCode::disconnected,
                      fmt::format("as_server at {} closed the TLS connection before answering: "
                                  "it may require a client certificate signed by its "
                                  "--tls-client-ca (tls_cert and tls_key): {}",
                                  where, e.getDescription().cStr()));
        throw Error(ErrorCode::disconnected,
                    fmt::format("{} accepted the connection but did not answer as an as_server: {}",
                                where, e.getDescription().cStr()));
      }
      try {
        auto info = timer.timeoutAfter(connect_ms, kj::mv(info_sent)).wait(io.waitScope);
        server_id_ = to_std(info.getInfo().getServerId());
        address_ = to_std(info.getInfo().getAdvertiseAddress());
        if (address_.empty()) address_ = where;
      } catch (const kj::Exception& e) {
        throw Error(ErrorCode::disconnected,
                    fmt::format("{} accepted the connection but did not answer as an as_server: {}",
                                where, e.getDescription().cStr()));
      }
      port_ = target.port;
    }
    loop.where = address_;
    loop.limits = send_limits(options_);
    open_session(loop);
    loop_ = &loop;
    bridge_.store(&loop.bridge);
    announced = true;
    started.set_value();
    quit.promise.wait(io.waitScope);
    // Release every capability while the loop still runs, and let the releases reach the
    // server (a ping answered after them proves it): dropping thousands of queued releases
    // with the connection would unwind one deeply nested promise chain.
    // Calls still held for want of room on the connection go first.
    auto sent = kj::newPromiseAndFulfiller<void>();
    after_calls_sent(loop, [f = kj::mv(sent.fulfiller)]() mutable { f->fulfill(); });
    if (loop.rpc) {
      try {
        auto* server = &loop.server;
        io.provider->getTimer()
            .timeoutAfter(2 * kj::SECONDS,
                          sent.promise.then([server]() {
                            return server->pingRequest().send().ignoreResult();
                          }))
            .wait(io.waitScope);
      } catch (const kj::Exception&) {
        // The server is gone or slow: nothing is left to flush.
      }
    }
    // Shut down on this thread: refuse posts, drop capabilities, then the connection.
    bridge_.store(nullptr);
    loop.bridge.close();
    fail_all_tickets(loop, Error(ErrorCode::disconnected, "the client was closed"));
    loop.session = nullptr;
    loop_ = nullptr;
  } catch (...) {
    bridge_.store(nullptr);
    loop_ = nullptr;
    if (!announced) started.set_exception(std::current_exception());
  }
}

}  // namespace agentd::detail

#include "client_core.h"

#include "counting_stream.h"
#include "call_done.h"
#include "dial.h"
#include "endpoint.h"
#include "subprocess.h"
#include "tls.h"
#include "lanes.h"
#include "tokens.h"

#include <capnp/rpc-twoparty.h>
#include <fmt/format.h>
#include <kj/async-io.h>
#include <spdlog/spdlog.h>

#include <optional>
#include <random>

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
  kj::Own<ClientCore::InProcess> local;
};

SendLimits send_limits(const ClientOptions& o) {
  SendLimits l;
  l.max_message_bytes = std::min(o.max_message_bytes, kMaxMessageBytes);
  l.timeout = o.timeout;
  l.retry_initial = o.overload_retry_initial;
  l.retry_max = std::max(o.overload_retry_max, o.overload_retry_initial);
  l.create_retry = o.agent_limit_retry;
  return l;
}

// Where Client::connect(host, port) goes; a host and port that make no endpoint fail as a
// connection that cannot be made.
net::Endpoint endpoint_of(const std::string& host, std::uint16_t port) {
  try {
    return net::Endpoint::from(host, port);
  } catch (const Error& e) {
    throw Error(ErrorCode::disconnected,
                fmt::format("cannot connect to as_server at {}:{}: {}", host, port, e.message()));
  }
}

// Loop thread: dials to with TLS when tls is set, logs in with token and asks the server who it
// is; each stage bounded by limit. bytes and tls are borrowed and outlive the connection.
kj::Promise<kj::Own<net::Dialed>> open_connection(kj::AsyncIoContext& io, const net::Endpoint& to,
                                                  TlsConfig* tls, ByteCount& bytes, std::string token,
                                                  std::chrono::milliseconds limit) {
  return net::dial(io, to, {.tls = tls, .bytes = &bytes, .token = std::move(token), .stage_limit = limit});
}

// Why a dial to the as_server at to failed, as the client tells it: disconnected, or
// unauthenticated when the login is refused. nullopt when it did not fail.
std::optional<Error> dial_error(const net::Dialed& d, const net::Endpoint& to, bool tls) {
  const std::string where = to.text();
  if (d.refused)
    return Error(ErrorCode::unauthenticated,
                 fmt::format("as_server at {} refused the login: {}", where, d.refused->message()));
  if (!d.failed) return std::nullopt;
  const std::string why = d.failed->getDescription().cStr();
  switch (d.stage) {
    case net::DialStage::resolve:
    case net::DialStage::connect:
      return Error(ErrorCode::disconnected,
                   fmt::format("cannot connect to as_server at {}: {}; is it running there?", where, why));
    case net::DialStage::tls:
      return Error(ErrorCode::disconnected,
                   fmt::format("TLS handshake with as_server at {} failed: {} (a server "
                               "without --tls-cert closes TLS connections: connect without "
                               "tls_ca to a plaintext server; otherwise its certificate must "
                               "be signed by a CA in tls_ca and name {})",
                               where, why, to.host));
    case net::DialStage::login:
      if (tls && !to.is_unix())
        return Error(ErrorCode::disconnected,
                     fmt::format("as_server at {} closed the TLS connection before answering: "
                                 "it may require a client certificate signed by its "
                                 "--tls-client-ca (tls_cert and tls_key): {}",
                                 where, why));
      [[fallthrough]];
    case net::DialStage::info:
      break;
  }
  return Error(ErrorCode::disconnected,
               fmt::format("{} accepted the connection but did not answer as an as_server: {}", where, why));
}

}  // namespace

// Independent mode: connects again after the connection was lost (ClientOptions::reconnect_*),
// on the loop thread. Lives in thread_main, beside the loop state it serves; its timers and
// connection attempts are tasks of that loop state, destroyed before it.
struct ClientCore::Reconnector {
  Reconnector(ClientCore& c, LoopState& l, kj::AsyncIoContext& i, net::Endpoint e, TlsConfig* t)
      : core(c), loop(l), io(i), to(std::move(e)), tls(t) {}
  ClientCore& core;
  LoopState& loop;
  kj::AsyncIoContext& io;
  net::Endpoint to;
  TlsConfig* tls;  // null: plaintext
  bool trying = false;
  std::chrono::steady_clock::time_point lost_at{};
  std::chrono::milliseconds delay{0};
  unsigned attempts = 0;
  std::string last_error;

  // loop.on_lost: start trying (once per loss).
  void lost() {
    if (trying) return;
    trying = true;
    lost_at = std::chrono::steady_clock::now();
    delay = std::chrono::milliseconds(0);
    attempts = 0;
    last_error = "no attempt finished yet";
    spdlog::warn("lost the connection to as_server at {}; reconnecting (for up to {} ms)", loop.where,
                 core.options_.reconnect_deadline.count());
    schedule();
  }

  void schedule() {
    const auto& o = core.options_;
    // The first attempt waits too: a server that just went is rarely back at once, and clients
    // that lost the same server come back apart (jitter).
    delay = delay.count() == 0 ? std::max(o.reconnect_initial, std::chrono::milliseconds(1))
                               : std::min(std::max(o.reconnect_max, o.reconnect_initial), delay * 2);
    thread_local std::minstd_rand rng{std::random_device{}()};
    std::int64_t ms = delay.count() / 2 + static_cast<std::int64_t>(rng() % (delay.count() / 2 + 1));
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(lost_at + o.reconnect_deadline -
                                                                            std::chrono::steady_clock::now())
                          .count();
    ms = std::max<std::int64_t>(0, std::min<std::int64_t>(ms, left));
    loop.tasks.add(
        io.provider->getTimer().afterDelay(ms * kj::MILLISECONDS).then([this]() { return attempt(); }));
  }

  kj::Promise<void> attempt() {
    const auto& o = core.options_;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(lost_at + o.reconnect_deadline -
                                                                            std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      give_up();
      return kj::READY_NOW;
    }
    ++attempts;
    return open_connection(io, to, tls, loop.bytes, client_token(o.token), std::min(o.connect_timeout, left))
        .then([this](kj::Own<net::Dialed> c) {
          if (auto error = dial_error(*c, to, tls != nullptr)) {
            last_error = error->message();
            schedule();
            return;
          }
          connected(kj::mv(c));
        });
  }

  void connected(kj::Own<net::Dialed> c) {
    trying = false;
    // The old connection's capabilities go before it does; the connection itself on the next
    // turn, once nothing on this turn's stack refers to it.
    loop.session = nullptr;
    loop.server = nullptr;
    if (loop.rpc) {
      auto old = kj::mv(loop.rpc).attach(kj::mv(loop.stream));
      loop.tasks.add(kj::evalLater([old = kj::mv(old)]() mutable { old = nullptr; }));
    }
    loop.stream = kj::mv(c->stream);
    loop.rpc = kj::mv(c->rpc);
    loop.server = kj::mv(c->server);
    if (!c->server_id.empty()) core.set_server_id(c->server_id);
    set_server(loop, c->server_id);
    spdlog::info("reconnected to as_server at {} (server {}) after {} attempt(s)", loop.where, c->server_id,
                 attempts);
    open_session(loop);
    connection_restored(loop);
  }

  void give_up() {
    trying = false;
    const auto tried =
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - lost_at);
    connection_down(
        loop, Error::retryable(ErrorCode::disconnected,
                               fmt::format("lost the connection to as_server at {} and could not reconnect "
                                           "within {} ms ({} attempt(s) over {} ms; the reconnect deadline: "
                                           "C++ ClientOptions::reconnect_deadline, Python "
                                           "reconnect_deadline=); last error: {}",
                                           loop.where, core.options_.reconnect_deadline.count(), attempts,
                                           tried.count(), last_error)));
  }
};

// What runs one connection, on its loop's thread: the TLS configuration (it outlives the
// connection), the reconnector and the loop state. Destroyed in reverse: the loop state's tasks,
// which refer to the reconnector, go first.
struct ClientCore::Run {
  explicit Run(kj::AsyncIoContext& i) : io(i), client_loop(i) {}
  kj::AsyncIoContext& io;
  std::unique_ptr<TlsConfig> tls;
  std::optional<Reconnector> reconnector;
  ClientLoop client_loop;
};

void ClientCore::set_server_id(std::string id) {
  std::lock_guard lock(server_ids_mu_);
  if (id == *server_id_.load()) return;
  server_ids_.push_back(std::move(id));
  server_id_.store(&server_ids_.back());
}

void ClientCore::report_child_loss(LoopState& loop) {
  // The child usually exits just before its socket closes; give it a moment to be reaped.
  auto* self = this;
  auto* loop_ptr = &loop;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  auto check = kj::heap<std::function<kj::Promise<void>()>>();
  auto* check_ptr = check.get();
  *check_ptr = [self, loop_ptr, deadline, check_ptr]() -> kj::Promise<void> {
    std::optional<int> status = self->child_ ? self->child_->exit_status() : std::nullopt;
    if (!status && std::chrono::steady_clock::now() < deadline)
      return loop_ptr->io.provider->getTimer().afterDelay(20 * kj::MILLISECONDS).then([check_ptr]() {
        return (*check_ptr)();
      });
    const pid_t pid = self->child_ ? self->child_->started_pid() : -1;
    std::string what = status ? describe_wait_status(*status) : "closed the connection but is still running";
    std::string tail = self->child_ ? self->child_->stderr_tail(10, status ? std::chrono::milliseconds(500)
                                                                           : std::chrono::milliseconds(0))
                                    : std::string{};
    connection_down(
        *loop_ptr,
        Error::retryable(
            ErrorCode::disconnected,
            fmt::format("the child as_server (pid {}) at {} {}; {}{} (child mode does not "
                        "restart it: make a new client)",
                        pid, loop_ptr->where, what,
                        tail.empty() ? "it wrote nothing to stderr" : "its last stderr lines:\n", tail)));
    return kj::READY_NOW;
  };
  loop.tasks.add((*check_ptr)().attach(kj::mv(check)));
}

ClientCore::ClientCore(Target target, ClientOptions options, std::unique_ptr<ChildProcess> child)
    : options_(options), child_dir_(target.child_dir), child_(std::move(child)) {
  open_lanes(target);
  if (options_.single_thread) {
    if (target.mode == Mode::local)
      throw Error(ErrorCode::bad_args,
                  "ClientOptions::single_thread is for Client::connect and Client::spawn_child; a "
                  "local client's agents run in this process and need its loop thread");
    thread_loop_ = ThreadLoop::for_this_thread();
    run_ = std::make_unique<Run>(thread_loop_->io());
    try {
      open_run(*run_, target);
    } catch (...) {
      // Nothing of a start that failed stays; what KJ threw becomes an agentd::Error.
      stop_posts();
      loop_ = nullptr;
      run_.reset();
      try {
        throw;
      } catch (const kj::Exception& e) {
        throw Error(ErrorCode::disconnected, e.getDescription().cStr());
      }
    }
    return;
  }
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
  set_server_id(std::move(attached.server_id));
  port_ = attached.port;
  open_session(loop);
  KJ_IF_MAYBE (lost, attached.lost) {
    // The connection is gone: refuse new calls (the owner makes a new core for the address)
    // and fail the ones still waiting. The state itself stays until detach().
    auto close = [this]() {
      stop_posts();
      fail_all_tickets(*attached_,
                       Error::retryable(ErrorCode::disconnected, "lost the connection to as_server at " +
                                                                     address_ + " before the call finished"));
    };
    // (Copies: then() would keep a reference to an lvalue lambda.)
    loop.tasks.add(lost->then([close]() { close(); }, [close](kj::Exception&&) { close(); }));
  }
  loop_ = &loop;
  bridge_.store(&loop.bridge);
}

void ClientCore::retire_bridge(LoopState& loop) {
  stop_posts();
  loop.bridge.run_queued();
  loop.bridge.close();
}

void ClientCore::detach() {
  if (!attached_) return;
  LoopState& loop = *attached_;
  retire_bridge(loop);
  fail_all_tickets(loop, Error::retryable(ErrorCode::disconnected, "the server holding the connection to " +
                                                                       address_ + " is stopping"));
  loop.session = nullptr;
  loop.server = nullptr;
  loop_ = nullptr;
  attached_.reset();
}

ClientCore::~ClientCore() { close(); }

void ClientCore::open_lanes(const Target& target) {
  if (options_.lane_spin < std::chrono::microseconds(0) || options_.lane_spin > ClientOptions::kMaxLaneSpin)
    throw Error(ErrorCode::bad_args,
                fmt::format("ClientOptions::lane_spin is {} us; it must be between 0 (never poll) and {} us",
                            options_.lane_spin.count(), ClientOptions::kMaxLaneSpin.count()));
  if (options_.lanes == LaneUse::off) return;
  const char* refused = target.mode == Mode::local ? "a local client's agents are in this process"
                        : options_.single_thread   ? "a single_thread client runs its own connection"
                        : !options_.tls_ca.empty() ? "lanes are plaintext, and this client uses TLS"
                                                   : nullptr;
  if (refused != nullptr && options_.lanes == LaneUse::automatic) return;
  if (refused != nullptr)
    throw Error(ErrorCode::bad_args,
                fmt::format("ClientOptions::lanes is LaneUse::on, but lanes cannot be used here: {} "
                            "(use LaneUse::automatic or off)",
                            refused));
  // A child's lanes go to its loopback port: the Unix socket this client connects by is removed
  // once connected.
  const bool child = target.mode == Mode::child && child_ != nullptr;
  lanes_ = std::make_unique<LaneSet>(*this, child ? child_->host() : target.host,
                                     child ? child_->port() : target.port, client_token(options_.token));
}

void ClientCore::close() {
  if (lanes_) lanes_->close();  // a call on a lane fails now rather than at its answer
  std::lock_guard lock(close_mu_);
  if (run_) {
    if (thread_loop_->on_owner_thread() && !thread_loop_->running()) {
      shut_run(*run_);
      run_.reset();
    } else {
      // Its loop's objects belong to the thread that made it: leave them (and the connection)
      // rather than touch them here.
      spdlog::error(
          "a single-thread client (ClientOptions::single_thread) of as_server at {} was closed {}; "
          "its connection is left open: close it on the thread that made it, outside its callbacks",
          address_, thread_loop_->on_owner_thread() ? "inside one of its callbacks" : "on another thread");
      stop_posts();
      (void)run_.release();
      (void)new std::shared_ptr<ThreadLoop>(std::move(thread_loop_));
    }
    thread_loop_.reset();
  }
  post([this]() {
    if (quit_ && quit_->isWaiting()) quit_->fulfill();
  });
  if (thread_.joinable()) thread_.join();
  {
    // The loop is gone: nothing will answer the waits still open.
    std::lock_guard waits(waits_mu_);
    closed_ = true;
    for (auto& [id, fail] : open_waits_) fail();
    open_waits_.clear();
  }
  if (child_) child_->stop(std::chrono::seconds(15));
}

std::uint64_t ClientCore::watch_close(std::function<void()> fail) {
  std::lock_guard lock(waits_mu_);
  if (closed_ || !open()) {
    fail();
    return 0;
  }
  open_waits_.emplace_back(next_wait_, std::move(fail));
  return next_wait_++;
}

void ClientCore::unwatch_close(std::uint64_t id) {
  if (id == 0) return;
  std::lock_guard lock(waits_mu_);
  for (auto it = open_waits_.begin(); it != open_waits_.end(); ++it)
    if (it->first == id) {
      open_waits_.erase(it);
      return;
    }
}

void ClientCore::check_not_on_loop(const std::string& what) {
  AsyncLoop* loop = current_async_loop();
  if (loop != nullptr && loop->on_loop_thread())
    throw Error(ErrorCode::bad_request,
                fmt::format("{} would block the server's event loop: inside an asynchronous "
                            "agent, co_await the placeholder (reply() / call_async()) instead",
                            what));
}

void ClientCore::check_thread(const std::string& what) const {
  if (thread_loop_ && !thread_loop_->on_owner_thread())
    throw Error(ErrorCode::bad_request,
                fmt::format("{}: this client runs its connection on the thread that made it "
                            "(ClientOptions::single_thread); wait on it from that thread, or make a "
                            "client without single_thread to share it between threads",
                            what));
}

void ClientCore::check_open(const std::string& what) const {
  if (!open()) throw closed_error(what);
}

void ClientCore::thread_main(Target target, std::promise<void> started) {
  bool announced = false;
  try {
    auto io = kj::setupAsyncIo();
    Run run(io);
    // However this ends, posts stop before the run (and its bridge) is destroyed.
    KJ_DEFER(stop_posts());
    auto quit = kj::newPromiseAndFulfiller<void>();
    quit_ = kj::mv(quit.fulfiller);
    open_run(run, target);
    announced = true;
    started.set_value();
    quit.promise.wait(io.waitScope);
    shut_run(run);
  } catch (...) {
    loop_ = nullptr;  // posts stopped already: the KJ_DEFER above ran as the exception left
    if (!announced) started.set_exception(std::current_exception());
  }
}

void ClientCore::open_run(Run& run, Target& target) {
  kj::AsyncIoContext& io = run.io;
  ClientLoop& client_loop = run.client_loop;
  LoopState& loop = client_loop.state;
  if (target.mode != Mode::local && (!options_.tls_ca.empty() || !options_.tls_cert.empty()))
    run.tls = TlsConfig::client(TlsFiles{.cert = options_.tls_cert,
                                         .key = options_.tls_key,
                                         .ca = options_.tls_ca,
                                         .cert_name = "tls_cert",
                                         .key_name = "tls_key",
                                         .ca_name = "tls_ca"});
  loop.tasks.add(loop.bridge.run());
  if (target.mode == Mode::local) {
    client_loop.local = target.in_process(io);
    loop.server = client_loop.local->bootstrap();
    set_server_id(client_loop.local->server_id());
    address_ = "local";
    loop.tasks.add(client_loop.local->run());
  } else {
    // "unix:PATH" reaches a server's --unix-socket (plaintext: the file's permissions guard it).
    net::Endpoint to = endpoint_of(target.host, target.port);
    if (to.is_unix()) run.tls.reset();
    auto c = open_connection(io, to, run.tls.get(), loop.bytes, client_token(options_.token),
                             options_.connect_timeout)
                 .wait(io.waitScope);
    if (auto error = dial_error(*c, to, run.tls != nullptr)) throw *error;
    loop.stream = kj::mv(c->stream);
    loop.rpc = kj::mv(c->rpc);
    loop.server = kj::mv(c->server);
    set_server_id(c->server_id);
    set_server(loop, c->server_id);
    address_ = c->advertised.empty() ? to.text() : c->advertised;
    if (target.mode == Mode::independent && options_.reconnect_deadline.count() > 0) {
      run.reconnector.emplace(*this, loop, io, to, run.tls.get());
      loop.on_lost = [r = &*run.reconnector]() { r->lost(); };
      loop.look_up_lost_calls = true;
    } else if (target.mode == Mode::child) {
      loop.on_lost = [this, &loop]() { report_child_loss(loop); };
    }
    port_ = target.port;
  }
  loop.where = address_;
  loop.limits = send_limits(options_);
  open_session(loop);
  loop_ = &loop;
  bridge_.store(&loop.bridge);
}

void ClientCore::shut_run(Run& run) {
  kj::AsyncIoContext& io = run.io;
  LoopState& loop = run.client_loop.state;
  // Release every capability while the loop still runs, and let the releases reach the
  // server (a ping answered after them proves it): dropping thousands of queued releases
  // with the connection would unwind one deeply nested promise chain.
  // Calls still held for want of room on the connection go first.
  auto sent = kj::newPromiseAndFulfiller<void>();
  after_calls_sent(loop, [f = kj::mv(sent.fulfiller)]() mutable { f->fulfill(); });
  if (loop.rpc && loop.connected && !loop.down) {
    try {
      auto* server = &loop.server;
      io.provider->getTimer()
          .timeoutAfter(2 * kj::SECONDS,
                        sent.promise.then([server]() { return server->pingRequest().send().ignoreResult(); }))
          .wait(io.waitScope);
    } catch (const kj::Exception&) {
      // The server is gone or slow: nothing is left to flush.
    }
  }
  // Shut down on this thread: refuse posts, drop capabilities, then the connection.
  retire_bridge(loop);
  loop.on_lost = nullptr;  // closing: a loss now is the end
  fail_all_tickets(loop, Error(ErrorCode::disconnected, "the client was closed"));
  loop.session = nullptr;
  loop_ = nullptr;
}

}  // namespace agentd::detail

// ClientCore: one client connection, behind every Client, AgentRef and Placeholder made from it.
// A KJ event-loop thread owns the connection and its session (loop_state.h): over TCP to an
// as_server (independent mode, or a child process the core stops when it goes), or to a Server
// in this process (local mode, which the local layer above gives as an InProcess). User threads reach that
// thread through post() and block on plain condition variables (sync.h) for answers. A
// single-thread core (ClientOptions::single_thread) has no loop thread: the thread that made it
// runs the loop (thread_loop.h) while it waits, so posts and answers cross no thread. An attached core has no
// thread: it lives on a server's loop and uses a connection the server owns; that is how a server's agents
// reach other agents (pooled_connector.h).
#pragma once

#include <agentd/client.h>

#include "agent_services.h"
#include "call_batch.h"
#include "child_process.h"
#include "kj_errors.h"
#include "loop_state.h"
#include "result_slot.h"
#include "sync.h"
#include "thread_loop.h"
#include "value_codec.h"

#include <kj/function.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace agentd::detail {

class ClientCore;
class LaneSet;

// Whether the calling thread holds a reply back for its lane (lanes.h), on any client. Read by
// every post(), so kept trivial (no thread-local wrapper call).
inline thread_local bool t_lane_held = false;
// The calling thread's held reply (of whichever client) goes on its client's RPC connection.
void release_held_reply();

class ClientCore {
 public:
  enum class Mode { independent, child, local };

  // Local mode: what the client talks to instead of a connection (local/local_mode.cpp makes a
  // Server). Made on the loop thread, and destroyed there after the capabilities into it.
  class InProcess {
   public:
    virtual ~InProcess() noexcept(false) = default;  // as KJ objects' are
    virtual wire::AgentServer::Client bootstrap() = 0;
    virtual std::string server_id() const = 0;
    virtual kj::Promise<void> run() = 0;  // the loop runs it as a task
  };
  using MakeInProcess = std::function<kj::Own<InProcess>(kj::AsyncIoContext& io)>;

  struct Target {
    Mode mode = Mode::independent;
    std::string host;
    std::uint16_t port = 0;
    MakeInProcess in_process;  // local mode
    // Child mode: the child's private directory (its Unix socket), kept until the child stops.
    std::shared_ptr<void> child_dir;
  };

  // Starts the loop thread and returns once it has connected (or started the local server) and
  // opened the session; throws Error (disconnected, or what the local Server throws) otherwise.
  // child, when given, is the as_server at target, stopped when the core goes.
  ClientCore(Target target, ClientOptions options, std::unique_ptr<ChildProcess> child = nullptr);

  // A core on another loop, over a connection it does not own.
  struct Attached {
    kj::AsyncIoContext& io;             // that loop's
    wire::AgentServer::Client server;   // usable at once (a promise capability is fine)
    kj::Maybe<kj::Promise<void>> lost;  // settles when the connection goes (none: it cannot)
    std::string address;                // "host:port", as placeholders made here name it
    std::string server_id;
    std::uint16_t port = 0;
  };
  // On attached.io's loop thread. Opens the session at once (pipelined).
  ClientCore(Attached attached, ClientOptions options);
  // On that loop thread, before the connection's owner goes: closes the core (posts are
  // dropped, waits fail with disconnected) and releases its capabilities and loop state.
  void detach();

  // On a user thread, never the loop thread (loop-thread code holds no reference to the core):
  // closes the session, joins the loop thread, then stops the child. An attached core must have
  // been detached (its owner keeps it until then).
  ~ClientCore();
  // The same as the destructor, now (Client::close): later calls and waits fail with
  // disconnected. A user thread, never the loop thread. Idempotent.
  void close();
  ClientCore(const ClientCore&) = delete;
  ClientCore& operator=(const ClientCore&) = delete;

  // Any thread: run fn on the loop thread. Dropped once the client is closed: false then, and
  // a caller waiting for what fn would set must fail instead (closed_error).
  bool post(kj::Function<void()> fn) {
    // A reply this thread holds back for its lane goes first: it was made before fn (on this
    // client, or on another, to which this thread may turn back: at most one is held).
    if (t_lane_held) detail::release_held_reply();
    return post_unordered(kj::mv(fn));
  }
  // post() without releasing a held reply first (what the lanes themselves post).
  bool post_unordered(kj::Function<void()> fn) {
    // Held until the function is handed over: the loop thread's stop_posts() waits for it, so
    // the bridge (and its eventfd) is not destroyed under a post that found it.
    std::lock_guard lock(post_mu_);
    Bridge* b = bridge_.load();
    if (b == nullptr) return false;
    if (thread_loop_ && thread_loop_->on_owner_thread()) {
      // A single-thread client on its own thread: queued on its loop, with no eventfd to wake.
      loop_->tasks.add(kj::evalLater(kj::mv(fn)));
      return true;
    }
    b->post(kj::mv(fn));
    return true;
  }
  static Error closed_error(const std::string& what) {
    return Error(ErrorCode::disconnected, what + ": the client is closed");
  }

  // Any thread but the loop's: run body on the loop thread and wait for what it sets.
  // body gets the loop state and the Sync to fill; a rejected promise becomes an Error.
  template <typename T>
  T sync(std::string what, kj::Function<kj::Promise<void>(LoopState&, Sync<T>&)> body) {
    auto st = std::make_shared<Sync<T>>();
    // Holds the Sync, and the core only by pointer (never a reference count): see
    // PlaceholderState.
    post([self = this, st, what, body = kj::mv(body)]() mutable {
      LoopState* loop = self->loop_;
      // Calls issued before this request go first.
      after_calls_sent(*loop, [loop, st, what, body = kj::mv(body)]() mutable {
        kj::Promise<void> p = nullptr;
        try {
          p = body(*loop, *st);
        } catch (const Error& e) {
          st->fail(e);
          return;
        } catch (const kj::Exception& e) {
          st->fail(error_from_kj(e, what));
          return;
        }
        // The task holds st, so continuations may keep a reference to it.
        loop->tasks.add(p.catch_([st, what](kj::Exception&& e) { st->fail(error_from_kj(e, what)); }));
      });
    });
    return wait_counted(*st, what);
  }

  // Any thread but the loop's: send spec on the session and wait for its CallDone, which
  // decode turns into the answer (or throws Error).
  template <typename T>
  T call_sync(std::string what, OutSpec spec, std::function<T(wire::CallDone::Reader)> decode) {
    auto st = std::make_shared<Sync<T>>();
    post([self = this, st, spec = std::move(spec), decode = std::move(decode)]() mutable {
      Ticket t;
      t.on_done = [st, decode = std::move(decode)](wire::CallDone::Reader d) {
        try {
          st->set(decode(d));
        } catch (const Error& e) {
          st->fail(e);
        }
      };
      t.on_fail = [st](const Error& e) { st->fail(e); };
      send_spec(*self->loop_, std::move(spec), std::move(t));
    });
    return wait_counted(*st, what);
  }

  // Throws Error(bad_request) when called on a server's event-loop thread (inside an
  // asynchronous agent), where waiting would block that loop for good.
  static void check_not_on_loop(const std::string& what);

  // A single-thread client (ClientOptions::single_thread): throws Error(bad_request) naming what
  // unless called on the thread that made it. Other clients: nothing.
  void check_thread(const std::string& what) const;
  // A single-thread client, on its thread: sends what was issued now (a call reaches the server
  // at once, not at the next wait). Other clients: nothing (their loop thread sends it).
  void kick() {
    if (thread_loop_) thread_loop_->kick();
  }

  // The lanes (ClientOptions::lanes), or null. Any thread.
  LaneSet* lanes() const { return lanes_.get(); }

  // Any thread: false once the client is closed (posts are then dropped).
  bool open() const { return bridge_.load() != nullptr; }
  // Any thread: throws Error(disconnected, retryable) "<what>: the client is closed" unless open.
  void check_open(const std::string& what) const;

  // Loop thread only, while the loop runs: the session state.
  LoopState& loop() { return *loop_; }

  // Any thread (set before the constructor returns).
  const ClientOptions& options() const { return options_; }
  const std::string& address() const { return address_; }
  // The server id changes when the client reconnects to a restarted server; the reference stays
  // valid (every id seen is kept).
  const std::string& server_id() const { return *server_id_.load(); }
  std::uint16_t port() const { return port_; }

  // Any thread: what ClientStats reports as requests and waits.
  std::atomic<std::uint64_t> requests_{0};
  std::atomic<std::uint64_t> waits_{0};

 private:
  // What runs the connection: the loop thread's (thread_main), or a single-thread client's
  // (run_, on the thread that made it). Defined in client_core.cpp.
  struct Run;
  // Posts are refused from now on, and none still uses the bridge when it returns: called
  // before the bridge goes (with its loop state), wherever that happens.
  void stop_posts() {
    std::lock_guard lock(post_mu_);
    bridge_.store(nullptr);
  }
  // Loop thread, shutting the connection down: stop_posts(), then runs what other threads posted
  // before that (so a call made as the client closed is failed with the others rather than left
  // unsent, its get() waiting for good), then closes the bridge.
  void retire_bridge(LoopState& loop);
  void thread_main(Target target, std::promise<void> started);
  // On the loop's thread: connects (or starts the local server) and opens the session.
  void open_run(Run& run, Target& target);
  // On the loop's thread, at close: lets sent calls and releases reach the server, then fails
  // what still waits and drops the connection's capabilities.
  void shut_run(Run& run);
  // Loop thread: records a server id (the first, or a restarted server's).
  void set_server_id(std::string id);
  struct Reconnector;
  // Loop thread, child mode: the connection to the child went; find out how it ended and fail
  // everything with that.
  void report_child_loss(LoopState& loop);
  // The constructors, connected: makes lanes_ when options_ ask for lanes (checked here).
  void open_lanes(const Target& target);

  // A user thread's wait for an answer posted for (counted as one request and one wait).
  // close() fails the wait at once ("the client is closed"): the loop that would have answered
  // is gone, and the answer would otherwise be waited for until the timeout.
  template <typename T>
  T wait_counted(Sync<T>& st, const std::string& what) {
    check_not_on_loop(what);
    check_thread(what);
    requests_.fetch_add(1, std::memory_order_relaxed);
    waits_.fetch_add(1, std::memory_order_relaxed);
    const std::uint64_t id = watch_close([&st, &what] { st.fail(closed_error(what)); });
    struct Unwatch {
      ClientCore* core;
      std::uint64_t id;
      ~Unwatch() { core->unwatch_close(id); }
    } unwatch{this, id};
    return st.wait(options_.timeout, what);
  }
  // Any thread: fail runs once, at close() (at once when closed already), unless unwatched
  // before. Returns the id for unwatch_close(), which waits for a fail running meanwhile.
  std::uint64_t watch_close(std::function<void()> fail);
  void unwatch_close(std::uint64_t id);

  ClientOptions options_;
  std::shared_ptr<void> child_dir_;  // removed after child_ has stopped
  std::unique_ptr<ChildProcess> child_;
  std::thread thread_;
  // A single-thread client's loop (that thread's) and connection; null otherwise.
  std::shared_ptr<ThreadLoop> thread_loop_;
  std::unique_ptr<Run> run_;
  std::mutex close_mu_;  // close(): one closer at a time
  // User threads' waits that close() fails (wait_counted).
  std::mutex waits_mu_;
  bool closed_ = false;                                                      // guarded by waits_mu_
  std::uint64_t next_wait_ = 1;                                              // guarded by waits_mu_
  std::vector<std::pair<std::uint64_t, std::function<void()>>> open_waits_;  // guarded by waits_mu_
  std::atomic<Bridge*> bridge_{nullptr};
  std::mutex post_mu_;                   // post() holds it while it uses *bridge_; see stop_posts()
  LoopState* loop_ = nullptr;            // loop thread only
  std::unique_ptr<LoopState> attached_;  // an attached core's state, until detach()
  kj::Own<kj::PromiseFulfiller<void>> quit_;
  std::string address_;
  std::atomic<const std::string*> server_id_{&no_server_id_};
  std::mutex server_ids_mu_;
  std::deque<std::string> server_ids_;  // guarded by server_ids_mu_; never shrinks
  const std::string no_server_id_;
  std::uint16_t port_ = 0;
  std::unique_ptr<LaneSet> lanes_;  // ClientOptions::lanes; after everything it uses
};

// What a server's agents hold to reach another server (AgentLink in agent_services.h): a core
// attached to that server's loop (local/pooled_connector.h makes them; connect_agent reads them).
struct ClientLink final : AgentLink {
  explicit ClientLink(std::shared_ptr<ClientCore> c) : core(std::move(c)) {}
  std::shared_ptr<ClientCore> core;
};

}  // namespace agentd::detail

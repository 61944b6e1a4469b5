// AgentHost: the agents of one server and their mailboxes.
//
// Every agent is an actor: its calls run one at a time, in the order they were enqueued, on the
// worker pool; different agents run in parallel. A call whose input is a placeholder waits in
// the mailbox until that input is there, and the calls behind it wait too (sequential semantics).
// Asynchronous agents (AsyncAgent) run their calls as coroutines on the loop thread, started and
// resumed at the top of a loop turn by the LoopScheduler; a suspended call keeps its agent busy
// exactly as a running blocking call does.
//
// The host owns the results of its calls (a ResultPool) and is the only one that touches them.
// It keeps lifecycle (create, clone, remove) and coordination; the jobs are in files of their
// own: mailbox.h (the queued calls and which runs next), call_runner.h (one path that runs a
// call's agent code, for blocking and asynchronous agents alike), persistence.h (what a call
// changed, as state store changes), call_stats.h (counters and the span ring), call_watch.h
// (deadlines, slow calls), restore.h (agents back from the store at start); create, clone and
// remove are in host_lifecycle.cpp, the exit path in host_exit.cpp.
//
// Threads and the lock. One mutex, private to the host and NOT recursive, guards the agents,
// their mailboxes, the pool and the statistics. Nothing that may call back into the host runs
// under it: pool waiters, calls' on_done, creation callbacks and the like are collected while
// it is held (defer()) and run, in order, by the thread that held it, right after it unlocks.
// - Loop thread (the one that constructed the host): creation, cloning, removal, enqueue(),
//   begin_stop() and the set_*() calls (before serving). CreateDone, on_done, when_result()
//   waiters and on_chunk run there, without the lock. CreateDone, on_done and after_saved()'s
//   function are also destroyed there (they hold KJ objects): a lambda that carries one through
//   another thread moves it on rather than keeping a copy. Asynchronous agents' code runs there,
//   without the lock.
// - Any thread: on_loop(), the result-pool members, input_waiter() and the waiter it returns,
//   after_saved(), and the read-only queries (exists, info, list, the counters and spans).
// - Worker threads (the WorkerPool): blocking agent code, without the lock; then they take it to
//   finish the call, and run what that deferred after unlocking. A worker whose call's change
//   finds the state store idle commits it itself after unlocking, as the writer thread would
//   (StateStore::submit_to_lead; below).
// - The lifecycle pool: constructors and destructors (agent code, without the lock).
// - The state store's writer thread (or that worker): runs each batch's completions under the
//   lock (done scope, set_store()), then what they deferred after unlocking; completions never
//   take the lock themselves (a submit() that fails at once runs its completion inline, and the
//   host only submits under the lock, except after_saved()).
// - The call watch's thread (call_watch.h): its tick takes the lock.
// Lock order: the host lock first, then the locks it calls into (the bridge's, a worker pool's,
// the store's queue, the call watch's), which never call back. Blocking agent code never runs
// on the loop thread.
// Commit before publish: with a state store, a call's outcome reaches its waiters only after what
// the call changed is committed (commit_and_publish()).
#pragma once

#include <agentd/agent.h>
#include <agentd/error.h>
#include <agentd/client.h>

#include "call_runner.h"
#include "call_stats.h"
#include "mailbox.h"
#include "result_pool.h"
#include "span_record.h"
#include "state_store.h"

#include <kj/async.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <list>
#include <map>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <variant>
#include <vector>

namespace agentd::detail {

class Bridge;
class CallWatch;
class ClassCatalog;
class LoopScheduler;
class WorkerPool;
class AgentServices;

// A call whose caller is answered before the host's bookkeeping after it (AgentHost::finished):
// a lane's (server/lanes.cpp) run on the lane's own thread. The lane thread points
// t_early_answer at one around run_here(); finished() counts the call and keeps its span (so
// what the caller asks the server next includes it), calls send on that thread with the call's
// final outcome (out_msg or out_error, and its usage), then publishes it to the result pool and
// pumps its agent while the caller already reads the answer (a consumer of its result waits for
// the publication; the agent's next call waits in its mailbox). Not with a state store: a
// durable call is answered after its commit, as any call is.
struct EarlyAnswer {
  const Call* call = nullptr;
  // Writes the call's answer; false when it cannot go early (the caller then gets the published
  // outcome as usual). Must not throw: finished() goes on after it.
  kj::Function<bool(const Call&)> send;
  bool sent = false;
};
inline thread_local EarlyAnswer* t_early_answer = nullptr;

struct AgentInfoRow {
  std::string id;
  std::string name;
  std::string class_name;
  std::uint32_t queued = 0;
  std::uint64_t completed = 0;
  std::uint64_t failed = 0;
  std::int64_t last_call_unix_ms = 0;
  std::uint64_t model_calls = 0;
  std::int64_t prompt_tokens = 0;
  std::int64_t completion_tokens = 0;
};

// A page of agents (AgentServer.queryAgents): matched of total agents passed the filter; rows
// are those at [offset, offset + limit) in the requested order.
struct AgentPageRows {
  std::vector<AgentInfoRow> rows;
  std::uint64_t matched = 0;
  std::uint64_t total = 0;
};

// The row of the agent in slot (lock held).
AgentInfoRow row_of(const AgentSlot& slot);

// What a new agent starts from besides its constructor: a restart restores it, a clone copies
// it (applied on the constructor's worker: memory first, then load_state(state)).
struct AgentSeed {
  Value state;
  std::vector<Msg> memory;
  bool persist = true;  // false: already in the state store (a restart)
};

// Durability (as_server --state-dir): with a StateStore set, every call's effect on its agent
// (memory added, save_state()) and its result are committed together before the call's outcome
// is published to anyone; creation and deletion are committed before they are acknowledged
// (see after_saved()). Agents keep running meanwhile: an agent's next call may start before the
// previous one's commit, since commits are applied in order and a crash loses both or neither
// unreported.
class AgentHost : private CallRunner::Host {
 public:
  // catalog, services, workers, lifecycle, bridge and scheduler are borrowed and outlive the
  // host. Agent calls run on workers; constructors and destructors (creation, deletion) on
  // lifecycle, so a pool full of blocked calls never holds up making or removing agents.
  // Construct on the loop thread (the thread on_loop() runs things on), and destroy it there:
  // the calls of asynchronous agents still suspended then are destroyed unfinished.
  AgentHost(const ClassCatalog& catalog, AgentServices& services, WorkerPool& workers, WorkerPool& lifecycle,
            Bridge& bridge, LoopScheduler& scheduler, ResultPool::Limits result_limits);
  ~AgentHost() override;

  // Runs fn on the loop thread: now when called there, else through the bridge. Any thread.
  void on_loop(kj::Function<void()> fn);

  // ---- Results of reply / method_async calls, by call id. Any thread. ----

  // Announces call_id, to be produced by a call on agent_id that is about to be enqueued.
  // False when the id is taken (pending, finished or recently evicted).
  bool announce_result(const std::string& call_id, const std::string& agent_id);
  // Runs w on the loop thread once call_id's outcome is there (ResultPool::when_ready says when
  // an unknown or evicted id fails instead). Registered before the call is enqueued, it cannot
  // miss its outcome, however small the pool.
  void when_result(const std::string& call_id, kj::Function<void(const OutcomePtr&)> w,
                   bool wait_for_unknown);
  // announce_result() and when_result() in one look-up, for a thread that is not the loop's (a
  // lane, server/lanes.h): w runs on the thread that publishes the outcome (often the caller
  // itself, inside run_here()), without the lock, and must only hand the outcome on. False (w
  // dropped) when the id is taken. Called before the call is queued.
  bool announce_result_here(const std::string& call_id, const std::string& agent_id, ResultPool::Waiter w);
  // Gives call, queued on agent_id with input_ready == false, the outcome of producer_call_id
  // (a call on this server) as its input once it is there.
  void feed_from_result(const std::string& producer_call_id, const std::string& agent_id,
                        const std::shared_ptr<Call>& call);
  // The finished outcome of call_id, if the pool has it.
  OutcomePtr peek_result(const std::string& call_id) const;
  struct ResultStats {
    std::size_t size = 0;  // pending and finished
    std::uint64_t evictions = 0;
    ResultPool::Limits limits;
  };
  ResultStats result_stats() const;
  // Evicts results by age (call about once a second).
  void sweep_results();
  using CreateDone = std::function<void(std::variant<AgentInfoRow, Error>)>;

  // Creates an agent (its constructor runs on a worker). The id is reserved at once, so calls
  // may be enqueued before construction ends; if the constructor throws they fail with its error.
  // Empty id: one is generated. done runs on the loop thread.
  // Returns the id, or an error right away for an unknown class or a taken id.
  // seed: what the agent starts from after its constructor (a restart or a clone).
  std::variant<std::string, Error> create(const std::string& class_name, const std::string& name, Value args,
                                          std::string id, CreateDone done,
                                          std::shared_ptr<AgentSeed> seed = nullptr);
  // Creates an agent of source's class with source's args and a copy of its memory and saved
  // state, taken in source's call order (after the calls queued before). done as for create.
  // Returns an error right away for an unknown source or a taken id.
  std::optional<Error> clone(const std::string& source_id, const std::string& name, std::string id,
                             CreateDone done);

  // ---- The state store (as_server --state-dir). ----
  // Set before serving (restore first); nullptr detaches it (before the server's agents are
  // destroyed at exit, which must not delete them from the store). Borrowed.
  void set_store(StateStore* store);
  // Runs fn on the loop thread once everything the host submitted to the store so far is
  // committed (at once without a store): deletions are acknowledged after it.
  void after_saved(kj::Function<void()> fn);
  // An unknown call id either never ran here or finished this long ago or earlier (the result
  // pool's forgotten horizon); nullopt: nothing finished was ever forgotten. Any thread.
  std::optional<std::chrono::milliseconds> forgotten_age() const;
  // A restart: results finished at or before unix_ms (the store's horizon) are forgotten.
  void forget_until(std::int64_t unix_ms);
  // Puts a finished result restored from the store into the pool.
  void restore_result(const std::string& call_id, const std::string& agent_id, OutcomePtr outcome);

  bool exists(const std::string& id) const;
  std::optional<AgentInfoRow> info(const std::string& id) const;
  std::string class_of(const std::string& id) const;

  // Removes an agent: queued calls fail with unknown_agent, a running call finishes first, the
  // agent is destroyed on a worker. False when there is no such agent.
  bool remove(const std::string& id);
  std::size_t remove_all();
  // The server's exit (host_exit.cpp): removes every agent at once (queued calls fail with
  // stopping; the state store, if any, must be detached: nothing is recorded), and runs the
  // destructors of the idle ones on the lifecycle pool in a few large tasks. Agents with a call
  // still running are destroyed when it returns. Quick for a million agents.
  void remove_all_at_exit();

  std::vector<AgentInfoRow> list() const;
  // A page of the agents, filtered and ordered as query says (limit capped at kMaxQueryLimit).
  // Linear in the number of agents (selection, not a full sort), under the host lock.
  static constexpr std::uint32_t kMaxQueryLimit = 1000;
  static constexpr std::size_t kMaxQuerySearch = 1024;  // a longer search matches nothing
  AgentPageRows query(const AgentQuery& query) const;
  std::size_t size() const;

  // Queues call on agent id. An unknown agent fails the call at once (results published).
  // Reply and method_async calls must already be announced in the result pool.
  // A call with input_ready == false waits for the callback from input_waiter().
  void enqueue(const std::string& id, std::shared_ptr<Call> call);

  // enqueue() from a thread that is not the loop's and not a worker (a lane's, server/lanes.h):
  // when call is a blocking agent's and can start at once (its agent idle, its input there), it
  // runs here, on the calling thread, as a worker would run it (leading its commit with a state
  // store); else (its agent busy, asynchronous, or the call has a deadline: the caller must be
  // free to answer with the timeout) it waits in its mailbox and runs where it would have. What else becomes
  // runnable meanwhile (its agent's next call, a chain's next link) goes to the workers, so the
  // caller is free as soon as its own call has finished.
  void run_here(const std::string& id, std::shared_ptr<Call> call);

  // The callback that delivers a queued call's input (a resolved placeholder, e.g. fetched from
  // another server) and runs what can run. Any thread; takes the lock. Safe after the agent or
  // the call is gone (does nothing).
  ResultPool::Waiter input_waiter(const std::string& agent_id, const std::shared_ptr<Call>& call);

  // ---- Limits (README "Running as_server"). 0: no limit. Set before serving. ----
  struct Limits {
    std::size_t max_agents = 0;
    std::size_t max_queued_calls = 0;            // waiting or running, whole host
    std::size_t max_queued_calls_per_agent = 0;  // waiting or running, one agent
  };
  void set_limits(Limits limits);
  // The overloaded error (retryable) a call on agent_id gets when queueing it would pass a
  // queue limit; nothing when it may be queued (or the agent is unknown: enqueue fails it).
  std::optional<Error> admit(const std::string& agent_id) const;
  // Announces call_id and fails it with e at once, so the placeholders that consume it fail
  // too (a call refused that no client will retry). Nothing when the id is taken.
  void refuse_result(const std::string& call_id, const std::string& agent_id, Error e);

  // ---- Deadlines and slow calls (call_watch.h; call_watch.cpp). ----
  struct Watch {
    std::chrono::milliseconds call_timeout{0};  // a call's deadline after enqueue; 0: none
    // By agent class, over call_timeout (0: no deadline for that class).
    std::map<std::string, std::chrono::milliseconds> class_timeouts;
    // Calls in progress this long are logged once at warn and counted; 0: never.
    std::chrono::milliseconds slow_call_warn{0};
  };
  // Before serving (starts the watch's thread when anything is to be watched).
  void set_watch(Watch w);
  struct WatchStats {
    std::size_t slow_now = 0;      // in progress past slow_call_warn now
    std::uint64_t slow_total = 0;  // ever reported as slow
    std::uint64_t timed_out = 0;   // failed by their deadline
  };
  WatchStats watch_stats() const;

  // Refuse new work; fail queued (not running) calls with `stopping`.
  void begin_stop();
  std::size_t running_calls() const;
  // No call running and no outcome on its way out: every finished call's outcome has been
  // handed on (posted to the loop, or written by a lane) by the thread that finished it. A stop
  // waits for this, then for the loop to deliver what was posted (Server::settle).
  bool settled() const;
  std::size_t queued_calls() const;

  std::uint64_t calls_completed() const;
  std::uint64_t calls_failed() const;
  // Finished calls by agent class: class -> {ok, error}. "(none)" holds calls that failed before
  // reaching an agent (e.g. an unknown agent id).
  std::map<std::string, std::pair<std::uint64_t, std::uint64_t>> calls_by_class() const;
  // Run times of the calls that ran (failed ones included; not calls failed before running).
  LatencyHistogram call_latency() const;

  // Trace spans of finished calls, kept in a ring of kMaxSpans (oldest dropped first).
  static constexpr std::size_t kMaxSpans = CallStats::kMaxSpans;
  // The newest min(limit, kept) spans, oldest first; limit 0: all kept.
  std::vector<SpanRecord> recent_spans(std::size_t limit) const;
  // Called on the worker that finished a call, without the host lock, once per span.
  // Set before any call runs.
  void set_span_sink(std::function<void(const SpanRecord&)> sink) { span_sink_ = std::move(sink); }

 private:
  // The host lock. On release, runs what was deferred while it was held (in order, without the
  // lock; what those run may take it again).
  class Locked {
   public:
    explicit Locked(const AgentHost& host) : host_(host), lock_(host.mu_) {}
    // What a deferred callback throws reaches the caller, as it did when callbacks ran inline.
    ~Locked() noexcept(false);
    Locked(const Locked&) = delete;
    Locked& operator=(const Locked&) = delete;

   private:
    const AgentHost& host_;
    std::unique_lock<std::mutex> lock_;
  };
  // Lock held: fn runs once the lock is released (on the thread that held it).
  void defer(kj::Function<void()> fn);
  void defer(ResultPool::Ready ready) { deferred_.append(std::move(ready)); }

  // CallRunner::Host: the thread running a call, without the lock.
  StateStore* store() const override { return store_.load(); }
  bool skip_expired(const AgentSlot& slot, Call& call) override;
  // What Agent::emit_chunk feeds while call runs: hands each chunk to call.on_chunk on the loop
  // thread (through on_loop(), so in order with the call's completion). Empty when nobody reads.
  std::function<void(std::string_view)> chunk_sink(const Call& call) override;
  // Takes the lock: counts the call, keeps its span, commits and publishes it, and pumps its
  // agent; the waiters it released run after unlocking. A worker keeps the first blocking call
  // that becomes runnable meanwhile (mailbox.h, Continuation). A lane's call is answered after
  // it is counted and before the rest (EarlyAnswer).
  void finished(const std::shared_ptr<AgentSlot>& slot, std::shared_ptr<Call> call) override;
  // Under the lock: counts a finished call (its agent's and the server's) and keeps its span,
  // copied to span when there is a span sink (returned: whether there is).
  bool count_finished_locked(AgentSlot& slot, const Call& call, SpanRecord& span);

  // All with the lock held.
  // Mailboxes' dispatch: a blocking call goes to a worker (or this worker's continuation), an
  // asynchronous one to the loop thread (at the top of a turn: never here, under the lock).
  void dispatch(const std::shared_ptr<AgentSlot>& slot, std::shared_ptr<Call> call);
  // A call that failed without running: counted, and published.
  void fail(std::shared_ptr<Call> call, Error error);
  void publish(const std::shared_ptr<Call>& call);
  // Runs call's on_done on the loop thread and destroys it there, before the Call (whose last
  // owner may be a worker or the watch's thread): it holds the RPC's own objects, a call context
  // and a promise fulfiller, which must not be destroyed off the loop thread.
  void run_on_done(std::shared_ptr<Call> call);
  // Commits call.change, then publishes the call; without one publishes at once. Not null: a
  // worker's change went to this idle store, and the caller must lead() (or pass_lead()) its
  // commit once the lock is released.
  StateStore* commit_and_publish(const std::shared_ptr<AgentSlot>& slot, const std::shared_ptr<Call>& call);
  void destroy_agent(AgentSlot& slot);
  void enqueue_locked(const std::string& id, std::shared_ptr<Call> call);
  ResultPool::Waiter input_waiter_locked(const std::string& agent_id, const std::shared_ptr<Call>& call);
  // save: record the deletion in the store (not when the server's agents go at exit, or when
  // remove_all() records one change for all).
  bool remove_one(const std::string& id, bool save);
  // A worker's loop: runs call, then each call handed to this worker as it finished.
  void worker_loop(std::shared_ptr<AgentSlot> slot, std::shared_ptr<Call> call);
  // Hands a dispatched blocking call to the worker pool (without the lock).
  void to_workers(std::shared_ptr<AgentSlot> slot, std::shared_ptr<Call> call);

  // call_watch.cpp. Lock held, except watch_tick (the watch's thread) and skip_expired (the
  // worker, before agent code).
  void watch_enqueue(const std::shared_ptr<AgentSlot>& slot, const std::shared_ptr<Call>& call);
  void watch_dispatch(const std::shared_ptr<AgentSlot>& slot, const std::shared_ptr<Call>& call);
  void watch_finish(AgentSlot& slot, Call& call);
  void watch_tick(std::chrono::steady_clock::time_point now);
  // Any thread but the watch's, without the lock: stops the watch's thread. watch_ is taken out
  // under the lock (the tick reads it under the lock) and destroyed after it, which joins the
  // thread (its tick takes the lock).
  void stop_watch();
  void expire(const std::shared_ptr<AgentSlot>& slot, const std::shared_ptr<Call>& call);
  // where: the call's state at its deadline.
  enum class Stalled { queued, waiting_for_worker, running };
  Error timeout_error(const AgentSlot& slot, const Call& call, Stalled where) const;

  const ClassCatalog& catalog_;
  AgentServices& services_;
  std::atomic<StateStore*> store_{nullptr};
  WorkerPool& workers_;
  WorkerPool& lifecycle_;
  Bridge& bridge_;
  LoopScheduler& scheduler_;
  const std::thread::id loop_thread_;

  mutable std::mutex mu_;  // not recursive: see the top of this file
  // What runs once the lock is released (defer()); guarded by it.
  mutable ResultPool::Ready deferred_;
  ResultPool results_;
  std::unordered_map<std::string, std::shared_ptr<AgentSlot>> agents_;
  // The same slots in a dense array (AgentSlot::dense_index), for query(): a scan of a million
  // agents that walks a vector, prefetching ahead, instead of chasing the map's nodes.
  std::vector<AgentSlot*> dense_;
  void index_add(AgentSlot& slot);
  void index_remove(AgentSlot& slot);
  Mailboxes mailboxes_;
  // Calls answered early and counted but not yet taken from their mailbox (AgentSlot::
  // answered_early): running_calls() and queued_calls() leave them out, as the counts include them.
  std::size_t answered_early_ = 0;
  // Threads between releasing the lock and having handed on what it released: the deferred
  // work of a Locked (outcomes it posts to the loop), or an early answer being written.
  // running_calls() may already be 0 for their calls; settled() is not.
  mutable std::atomic<int> in_transit_{0};
  CallStats stats_;
  std::function<void(const SpanRecord&)> span_sink_;
  bool stopping_ = false;
  Limits limits_;
  Watch watch_options_;
  std::uint64_t timed_out_ = 0;
  std::uint64_t slow_total_ = 0;
  std::unique_ptr<CallWatch> watch_;  // null: nothing watched; stopped first in ~AgentHost
  // Last: destroyed first, with the asynchronous calls still suspended (they use the above).
  CallRunner runner_{*this};
};

}  // namespace agentd::detail

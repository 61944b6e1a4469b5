// AgentHost: the agents of one server and their mailboxes.
//
// Every agent is an actor: its calls run one at a time, in the order they were enqueued, on the
// worker pool; different agents run in parallel. A call whose input is a placeholder waits in
// the mailbox until that input is there, and the calls behind it wait too (sequential semantics).
//
// The host owns the results of its calls (a ResultPool) and is the only one that touches them.
//
// Thread-safe: one recursive mutex, private to the host, guards the agents and the pool. The
// loop thread enqueues calls; workers run agent code without the lock, then take it to publish
// the result, hand inputs to waiting calls and pick up the next runnable call themselves (a
// dependent call continues on the same worker: no thread hop between links of a chain).
// Blocking agent code (constructors, reply, observe, call, destructors) never runs on the loop
// thread. Asynchronous agents (AsyncAgent) run their calls as coroutines on the loop thread,
// started and resumed at the top of a loop turn by the LoopScheduler, without the lock; a
// suspended call keeps its agent busy exactly as a running blocking call does.
// What must run on the loop thread (answers to RPCs) is handed there through the bridge: see
// when_result() and on_loop().
#pragma once

#include <agentd/agent.h>
#include <agentd/error.h>

#include "call_stats.h"
#include "result_pool.h"
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

struct AgentInfoRow {
  std::string id;
  std::string name;
  std::string class_name;
  std::uint32_t queued = 0;
  std::uint64_t completed = 0;
  std::uint64_t failed = 0;
};

// One queued call. The host owns it from enqueue() until its completion has run.
struct Call {
  // snapshot: reads the agent's args, save_state() and memory (clone_agent), in call order.
  enum class Kind { reply, observe, method, method_async, memory, snapshot };
  Kind kind = Kind::reply;
  std::string call_id;  // reply / method_async: the result pool key
  std::string method;   // method / method_async
  Value args;           // method / method_async

  // The input (reply / observe). Not ready while a placeholder is unresolved.
  bool input_ready = true;
  OutcomePtr input;  // null: no input (an empty Msg is passed)

  // Set by enqueue(): the span's enqueue time (steady for the queue wait, wall for export).
  std::chrono::steady_clock::time_point enqueued;
  std::chrono::system_clock::time_point enqueued_wall;
  // Call ids of the placeholders this call consumes as input (set before enqueue()).
  std::vector<std::string> consumed;

  // Its deadline (call_watch.h): timeout after enqueue, when timeout > 0; timeout_by names what
  // set it (an option, or the caller) for the message. A caller may set timeout before enqueue;
  // else the host's defaults apply (set_watch()).
  std::chrono::milliseconds timeout{0};
  const char* timeout_by = "the call's own timeout";
  std::chrono::steady_clock::time_point deadline{};
  // Set (host lock) when the deadline passed after the call was dispatched: its timeout was
  // published then, and what it produces is discarded. Read by its worker without the lock.
  std::atomic<bool> expired{false};
  // Set by the worker just before agent code (after which it no longer checks expired).
  std::atomic<bool> running{false};

  // Filled on the worker.
  std::chrono::steady_clock::time_point started;  // when agent code began to run
  std::optional<Msg> out_msg;
  Value out_value;
  std::vector<Msg> out_memory;
  std::optional<Error> out_error;
  // The agent's model use during this call (an agent runs one call at a time, so the change in
  // its usage counter is this call's).
  std::uint64_t model_calls = 0;
  std::int64_t prompt_tokens = 0;
  std::int64_t completion_tokens = 0;

  // reply / method_async: set when the caller reads the reply's chunks (Agent::emit_chunk).
  // Runs on the loop thread, once per chunk in emission order, all before the call's outcome
  // reaches its waiters; empty: chunks are dropped.
  std::function<void(std::string&& chunk)> on_chunk;

  // Runs on the loop thread once the call has run or failed (method, observe, memory).
  kj::Function<void(Call&)> on_done;
  bool has_on_done = false;  // kj::Function has no "empty" test

  // With a state store: what the call changed, made by the thread that ran it and committed
  // before the call's outcome is published (a pointer: queued calls stay small).
  std::unique_ptr<StateStore::Change> change;
  // With a state store, a call with a call id: its slot in the run journal from the moment its
  // agent code starts until its outcome is committed and published.
  std::uint32_t journal_slot = RunJournal::kNoSlot;
};

// What a new agent starts from besides its constructor: a restart restores it, a clone copies
// it (applied on the constructor's worker: memory first, then load_state(state)).
struct AgentSeed {
  Value state;
  std::vector<Msg> memory;
  bool persist = true;  // false: already in the state store (a restart)
};

struct AgentSlot;

// The trace span of one agent call that ran (AgentServer.traces, --trace-file).
struct SpanRecord {
  std::uint64_t seq = 0;  // 1, 2, ... in finishing order
  std::string call_id;
  std::string agent_id;
  std::string agent_class;
  const char* kind = "";
  std::string method;
  std::vector<std::string> consumed;
  std::int64_t enqueued_unix_ns = 0;
  std::int64_t queue_wait_ns = 0;  // enqueue -> start
  std::int64_t run_ns = 0;
  std::string outcome;  // "ok" or the error code's name
  std::string error_message;
  std::uint64_t model_calls = 0;  // model calls made while this call ran, with their tokens
  std::int64_t prompt_tokens = 0;
  std::int64_t completion_tokens = 0;
};

// Durability (as_server --state-dir): with a StateStore set, every call's effect on its agent
// (memory added, save_state()) and its result are committed together before the call's outcome
// is published to anyone; creation and deletion are committed before they are acknowledged
// (see after_saved()). Agents keep running meanwhile: an agent's next call may start before the
// previous one's commit, since commits are applied in order and a crash loses both or neither
// unreported.
class AgentHost {
 public:
  // catalog, services, workers, lifecycle, bridge and scheduler are borrowed and outlive the
  // host. Agent calls run on workers; constructors and destructors (creation, deletion) on
  // lifecycle, so a pool full of blocked calls never holds up making or removing agents.
  // Construct on the loop thread (the thread on_loop() runs things on), and destroy it there:
  // the calls of asynchronous agents still suspended then are destroyed unfinished.
  AgentHost(const ClassCatalog& catalog, AgentServices& services, WorkerPool& workers,
            WorkerPool& lifecycle, Bridge& bridge, LoopScheduler& scheduler,
            ResultPool::Limits result_limits);
  ~AgentHost();

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
  std::variant<std::string, Error> create(const std::string& class_name, const std::string& name,
                                          Value args, std::string id, CreateDone done,
                                          std::shared_ptr<AgentSeed> seed = nullptr);
  // Creates an agent of source's class with source's args and a copy of its memory and saved
  // state, taken in source's call order (after the calls queued before). done as for create.
  // Returns an error right away for an unknown source or a taken id.
  std::optional<Error> clone(const std::string& source_id, const std::string& name,
                             std::string id, CreateDone done);

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
  std::size_t size() const;

  // Queues call on agent id. An unknown agent fails the call at once (results published).
  // Reply and method_async calls must already be announced in the result pool.
  // A call with input_ready == false waits for the callback from input_waiter().
  void enqueue(const std::string& id, std::shared_ptr<Call> call);

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
    std::size_t slow_now = 0;     // in progress past slow_call_warn now
    std::uint64_t slow_total = 0;  // ever reported as slow
    std::uint64_t timed_out = 0;   // failed by their deadline
  };
  WatchStats watch_stats() const;

  // Refuse new work; fail queued (not running) calls with `stopping`.
  void begin_stop();
  std::size_t running_calls() const;
  std::size_t queued_calls() const;

  std::uint64_t calls_completed() const;
  std::uint64_t calls_failed() const;
  // Finished calls by agent class: class -> {ok, error}. "(none)" holds calls that failed before
  // reaching an agent (e.g. an unknown agent id).
  std::map<std::string, std::pair<std::uint64_t, std::uint64_t>> calls_by_class() const;
  // Run times of the calls that ran (failed ones included; not calls failed before running).
  LatencyHistogram call_latency() const;

  // Trace spans of finished calls, kept in a ring of kMaxSpans (oldest dropped first).
  static constexpr std::size_t kMaxSpans = 4096;
  // The newest min(limit, kept) spans, oldest first; limit 0: all kept.
  std::vector<SpanRecord> recent_spans(std::size_t limit) const;
  // Called on the worker that finished a call, without the host lock, once per span.
  // Set before any call runs.
  void set_span_sink(std::function<void(const SpanRecord&)> sink) { span_sink_ = std::move(sink); }

 private:
  // All with the lock held.
  void pump(const std::shared_ptr<AgentSlot>& slot);
  void run_on_worker(std::shared_ptr<AgentSlot> slot, std::shared_ptr<Call> call);
  // The thread about to run call's agent code (no lock): with a store, its run journal slot.
  void note_running(const AgentSlot& slot, Call& call);
  // span: filled when a span sink is set (written after the lock is released).
  void finish_call(const std::shared_ptr<AgentSlot>& slot, SpanRecord* span);
  void publish(const std::shared_ptr<Call>& call);
  // Worker thread, without the lock: runs call (and the calls it hands over to this thread).
  void worker_run(std::shared_ptr<AgentSlot> slot, std::shared_ptr<Call> call);
  void fail(std::shared_ptr<Call> call, Error error);
  // What Agent::emit_chunk feeds while call runs: hands each chunk to call.on_chunk on the loop
  // thread (through on_loop(), so in order with the call's completion). Empty when nobody reads.
  std::function<void(std::string_view)> chunk_sink(const Call& call);
  void destroy_agent(AgentSlot& slot);

  // call_watch.cpp. Lock held, except watch_tick (the watch's thread) and skip_expired (the
  // worker, before agent code).
  void watch_enqueue(const std::shared_ptr<AgentSlot>& slot, const std::shared_ptr<Call>& call);
  void watch_dispatch(const std::shared_ptr<AgentSlot>& slot, const std::shared_ptr<Call>& call);
  void watch_finish(AgentSlot& slot, Call& call);
  void watch_tick(std::chrono::steady_clock::time_point now);
  void expire(const std::shared_ptr<AgentSlot>& slot, const std::shared_ptr<Call>& call);
  bool skip_expired(const AgentSlot& slot, Call& call) const;
  // where: the call's state at its deadline.
  enum class Stalled { queued, waiting_for_worker, running };
  Error timeout_error(const AgentSlot& slot, const Call& call, Stalled where) const;

  // Asynchronous agents. start_async (lock held, any thread) schedules run_async on the loop
  // thread, which runs the call's coroutine (no lock held) until it finishes or suspends.
  struct AsyncRun;
  void start_async(std::shared_ptr<AgentSlot> slot, std::shared_ptr<Call> call);
  void run_async(std::shared_ptr<AgentSlot> slot, std::shared_ptr<Call> call);
  AsyncRun drive_async(std::shared_ptr<AgentSlot> slot, std::shared_ptr<Call> call);
  // Loop thread, without the lock: the coroutine of call has finished.
  void finish_async(const std::shared_ptr<AgentSlot>& slot, std::shared_ptr<Call> call);

  // The thread that ran call (no lock): fills call.change with what it changed in the store.
  void record_change(AgentSlot& slot, Call& call);
  // The put_agent change of a new agent (its constructor's worker, no lock).
  StateStore::Change initial_change(AgentSlot& slot, const Agent& agent);
  // Into c, what the store lacks of the agent (the thread running it, no lock): its
  // save_state() when its bytes changed since the last save, the messages added to its memory
  // since then (all of them, replacing the stored ones, after a clear()).
  void record_own_state(AgentSlot& slot, const Agent& agent, StateStore::Change& c);
  void record_new_memory(AgentSlot& slot, const Memory& memory, StateStore::Change& c);
  // save: record the deletion in the store (not when the server's agents go at exit, or when
  // remove_all() records one change for all).
  bool remove_one(const std::string& id, bool save);
  // Commits call.change, then publishes the call (lock held); without one publishes at once.
  void commit_and_publish(const std::shared_ptr<AgentSlot>& slot, const std::shared_ptr<Call>& call);

  const ClassCatalog& catalog_;
  AgentServices& services_;
  std::atomic<StateStore*> store_{nullptr};
  WorkerPool& workers_;
  WorkerPool& lifecycle_;
  Bridge& bridge_;
  LoopScheduler& scheduler_;
  const std::thread::id loop_thread_;
  // The frames of asynchronous calls that have started and not finished (loop thread only).
  std::unordered_set<void*> async_frames_;

  // Recursive: pool waiters run under it and call back into the host.
  mutable std::recursive_mutex mu_;
  ResultPool results_;
  std::unordered_map<std::string, std::shared_ptr<AgentSlot>> agents_;
  std::size_t running_ = 0;
  std::uint64_t completed_ = 0;
  std::uint64_t failed_ = 0;
  std::map<std::string, std::pair<std::uint64_t, std::uint64_t>> by_class_;
  LatencyHistogram latency_;
  std::vector<SpanRecord> spans_;  // ring: spans_[span_seq_ % kMaxSpans] is written next
  std::uint64_t span_seq_ = 0;     // spans recorded so far
  std::function<void(const SpanRecord&)> span_sink_;
  bool stopping_ = false;
  Limits limits_;
  std::size_t queued_ = 0;  // calls in every mailbox (waiting or running)
  Watch watch_options_;
  std::uint64_t timed_out_ = 0;
  std::uint64_t slow_total_ = 0;
  std::unique_ptr<CallWatch> watch_;  // null: nothing watched; stopped first in ~AgentHost
};

}  // namespace agentd::detail

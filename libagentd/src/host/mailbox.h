// The mailboxes of an AgentHost's agents and how their calls are scheduled (private to the
// host's files).
//
// Call: one queued call. AgentSlot: one agent with its mailbox. Mailboxes: which call of an
// agent runs next (pump), and the host's counts of calls queued and running; not thread-safe,
// the host calls it under its lock. Continuation: a worker finishing a blocking call keeps the
// first blocking call that becomes runnable meanwhile, instead of handing it to the pool (no
// thread hop between the links of a chain).
#pragma once

#include <agentd/agent.h>
#include <agentd/error.h>

#include "result_pool.h"
#include "run_journal.h"
#include "state_store.h"

#include <kj/function.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace agentd::detail {

class UsageCounter;

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
  // The trace the caller made it in (CallSpec.traceId), for its span; empty: none.
  std::string trace_id;

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

  // Filled by the thread that runs it (call_runner.h).
  std::chrono::steady_clock::time_point started;  // when agent code began to run
  std::optional<Msg> out_msg;
  Value out_value;
  std::vector<Msg> out_memory;
  std::optional<Error> out_error;
  // The agent's model use during this call (an agent runs one call at a time, so the change in
  // its usage counter is this call's); its outcome carries it (publish()).
  std::uint64_t model_calls = 0;
  std::int64_t prompt_tokens = 0;
  std::int64_t completion_tokens = 0;
  std::vector<ToolCallSpan> tool_calls;  // its MCP tool calls, for its span

  // reply / method_async: set when the caller reads the reply's chunks (Agent::emit_chunk).
  // Runs on the loop thread, once per chunk in emission order, all before the call's outcome
  // reaches its waiters; empty: chunks are dropped.
  std::function<void(std::string&& chunk)> on_chunk;

  // Runs on the loop thread once the call has run or failed (method, observe, memory), without
  // the host lock (it may call the host).
  kj::Function<void(Call&)> on_done;
  bool has_on_done = false;  // kj::Function has no "empty" test

  // With a state store: what the call changed, made by the thread that ran it and committed
  // before the call's outcome is published (a pointer: queued calls stay small).
  std::unique_ptr<StateStore::Change> change;
  // With a state store, a call with a call id: its slot in the run journal from the moment its
  // agent code starts until its outcome is committed and published.
  std::uint32_t journal_slot = RunJournal::kNoSlot;
  // Its entry among the host's CallWatch's calls in progress, once dispatched (call_watch.h).
  std::size_t watch_entry = SIZE_MAX;
};

// One agent of an AgentHost with its mailbox. Every field is guarded by the host lock unless it
// says otherwise.
struct AgentSlot {
  std::string id;
  std::string name;
  std::string class_name;
  std::unique_ptr<Agent> agent;  // touched by the thread running the head call, else loop thread
  AsyncAgent* async = nullptr;   // agent, when it is an AsyncAgent (its calls run on the loop)
  // A list, not a deque: an empty std::deque allocates ~600 bytes, and most agents sit idle.
  std::list<std::shared_ptr<Call>> mailbox;
  bool busy = true;                     // a call (or the constructor) is running
  bool constructing = true;             // the constructor is (busy, with no call at the head)
  std::shared_ptr<UsageCounter> usage;  // this agent's model use (AgentServices::usage_counter)
  bool removed = false;
  // Its head call was answered early (EarlyAnswer) and counted, but is still in the mailbox until
  // finish_head(): the counts of calls queued and running leave it out.
  bool answered_early = false;
  std::uint64_t completed = 0;
  std::uint64_t failed = 0;
  std::int64_t last_call_unix_ms = 0;  // when a call of it last finished (wall clock); 0: none
  std::uint32_t dense_index = 0;       // its place in the host's dense array of agents
  // What the state store holds of this agent (touched only by the thread running its call):
  // the memory's clear count and length at the last save, and a hash of its saved state.
  std::uint64_t saved_clears = 0;
  std::size_t saved_memory = 0;
  std::size_t saved_state_hash = 0;
};

const char* kind_name(Call::Kind k);

// The model use c's outcome reports (zeros until its runner has measured it).
inline CallUsage call_usage(const Call& c) { return {c.model_calls, c.prompt_tokens, c.completion_tokens}; }

// A call that only reads its agent (memory, a clone's snapshot): it changes nothing the state
// store would have to save, so a store that cannot write does not fail it.
inline bool reads_only(const Call& c) {
  return c.kind == Call::Kind::memory || c.kind == Call::Kind::snapshot;
}

// Not thread-safe: its owner (the host) calls every member under its lock, hooks included.
class Mailboxes {
 public:
  struct Hooks {
    // call, the head of slot's mailbox with its input there, is to run now (slot is busy).
    std::function<void(const std::shared_ptr<AgentSlot>& slot, std::shared_ptr<Call> call)> dispatch;
    // call failed without running (it has left its mailbox; counted in slot's failures).
    std::function<void(std::shared_ptr<Call> call, Error error)> fail;
  };
  explicit Mailboxes(Hooks hooks) : hooks_(std::move(hooks)) {}

  // Queues call last in slot's mailbox, stamping its enqueue time; pump() runs it when it can.
  void push(AgentSlot& slot, const std::shared_ptr<Call>& call);
  // Dispatches slot's head call when slot is idle and the call's input is there; a call whose
  // input is an error fails with it without running, and the next one is looked at. A call
  // waiting for its input holds back the calls behind it (its input's waiter pumps again).
  void pump(const std::shared_ptr<AgentSlot>& slot);
  // The dispatched head call of slot has finished: takes it out; slot is idle.
  std::shared_ptr<Call> finish_head(AgentSlot& slot);
  // Takes the calls that have not started; a running call stays at the head until it reports.
  std::list<std::shared_ptr<Call>> take_waiting(AgentSlot& slot);
  // Takes call out of slot's mailbox before it ran (its deadline passed).
  void drop(AgentSlot& slot, std::list<std::shared_ptr<Call>>::iterator call);
  // An agent's constructor (or a dispatched call) counts as running until it returns.
  void constructor_started() { ++running_; }
  void constructor_returned() { --running_; }

  std::size_t queued() const { return queued_; }    // in every mailbox, waiting or running
  std::size_t running() const { return running_; }  // dispatched calls and constructors

 private:
  Hooks hooks_;
  std::size_t queued_ = 0;
  std::size_t running_ = 0;
};

// While a worker finishes a blocking call, the first blocking call that becomes runnable is
// handed to that worker (kept here) instead of the pool. The worker's loop owns one; the finish
// opens it (Window) for as long as it runs, waiters included.
class Continuation {
 public:
  Continuation();  // the calling thread's, until destroyed
  ~Continuation();
  Continuation(const Continuation&) = delete;
  Continuation& operator=(const Continuation&) = delete;

  // Opens the calling thread's continuation (if it has one) while it lives.
  class Window {
   public:
    Window();
    ~Window();
    Window(const Window&) = delete;
    Window& operator=(const Window&) = delete;

   private:
    Continuation* opened_;
  };

  // The calling thread's open, empty continuation takes slot and call: true. Else false (the
  // caller hands them to the pool).
  static bool take(std::shared_ptr<AgentSlot>& slot, std::shared_ptr<Call>& call);
  // The calling thread runs calls from a continuation (a worker); kept(): it holds one to run next.
  static bool active();
  static bool kept();

  std::shared_ptr<AgentSlot> slot;  // empty: nothing kept
  std::shared_ptr<Call> call;

 private:
  Continuation* outer_;
  bool open_ = false;
};

}  // namespace agentd::detail

// CallRunner: runs the agent code of one call, for every kind of agent, on one path
// (call_runner.cpp: CallRunner::drive).
//
// The path, whatever the kind: the model-usage counter is read, the run journal is told (with a
// state store), the reply's chunk sink is set, the agent is asked (one switch over Call::Kind),
// what it threw becomes the call's error naming the agent, the outcome is checked
// (outcome_check.h), what the call changed is recorded for the store (persistence.h), the
// model-usage delta is kept in the call, and the host is told the call has finished.
//
// Kinds of agent (call_runner.cpp):
// - Blocking (Agent): its code runs on a worker, to its end, inside run(); a fatal signal in it
//   names the call (CrashContext), and a call whose deadline passed before it began is skipped.
// - Asynchronous (AsyncAgent): its call is a coroutine on the loop thread; run() returns at its
//   first suspension, and the rest runs when the loop resumes it.
// Each kind is a small struct saying how its agent is asked for a reply, an observation and a
// method (Blocking's answers are ready at once; AsyncAgent's are awaited) and where its code
// runs. Adding a kind (e.g. a Python agent): write its struct in call_runner.cpp, let AgentSlot
// tell an agent of that kind (as AgentSlot::async does) and pick the kind in run(); the host
// dispatches it to where its code must run (AgentHost::dispatch). The switch, the errors, the
// usage, the outcome check and persistence stay as they are.
//
// Both kinds run one call per agent at a time: the host dispatches a call only when its agent
// is idle, so the runner touches the agent and its slot's store bookkeeping without the host
// lock.
#pragma once

#include "mailbox.h"

#include <coroutine>
#include <functional>
#include <memory>
#include <string_view>

namespace agentd::detail {

class StateStore;

class CallRunner {
 public:
  // What the runner needs of its host. Every member is called on the thread running the call,
  // without the host lock.
  class Host {
   public:
    virtual ~Host() = default;
    // The state store, or nullptr.
    virtual StateStore* store() const = 0;
    // Blocking agents, just before their code runs: true when call's deadline passed while it
    // waited for a worker (call.out_error then says so and no agent code runs).
    virtual bool skip_expired(const AgentSlot& slot, Call& call) = 0;
    // What Agent::emit_chunk feeds while call runs (empty when nobody reads its chunks).
    virtual std::function<void(std::string_view)> chunk_sink(const Call& call) = 0;
    // call (slot's head) has run: its outcome, model use and store change are final.
    virtual void finished(const std::shared_ptr<AgentSlot>& slot, std::shared_ptr<Call> call) = 0;
  };

  // host is borrowed and outlives the runner.
  explicit CallRunner(Host& host) : host_(host) {}
  // Destroys the coroutines of asynchronous calls still suspended (loop thread): what they
  // wait on is cancelled, and host.finished() is not called for them.
  ~CallRunner();
  CallRunner(const CallRunner&) = delete;
  CallRunner& operator=(const CallRunner&) = delete;

  // Runs call, the head of slot's mailbox (the host dispatched it: slot is busy). A blocking
  // agent's call runs on this thread (a worker) to its end; an asynchronous agent's on this
  // thread (the loop thread, at the top of a turn) until its first suspension, and on when the
  // loop resumes it. Either way host.finished() runs at the end, on the thread that ran it.
  void run(std::shared_ptr<AgentSlot> slot, std::shared_ptr<Call> call);

  struct Run;  // the coroutine of one call (call_runner.cpp)

 private:
  template <typename Kind>
  Run drive(std::shared_ptr<AgentSlot> slot, std::shared_ptr<Call> call);

  // A link of the list of frames below: each asynchronous call's coroutine promise is one.
  struct FrameLink {
    FrameLink* prev = this;
    FrameLink* next = this;
  };

  Host& host_;
  // The frames of asynchronous calls that have started and not finished (loop thread only): a
  // circular list through their promises, this its head. A frame links itself in when its call
  // starts and out when it is destroyed: no look-up, no allocation per call.
  FrameLink frames_;
};

}  // namespace agentd::detail

// CallWatch: what an AgentHost watches of its calls in progress (private to the host's files).
//
// - Deadlines: a call with one (as_server --call-timeout, --class-call-timeout) is failed with
//   timeout when it passes. A call still waiting in its mailbox is taken out and never runs. A
//   call already handed to a worker (or, for an asynchronous agent, started on the loop) cannot
//   be preempted: its placeholder fails with timeout at the deadline, the agent's code runs on
//   until it returns, its result is then discarded, and what it did to the agent's memory and
//   state stays; the agent's next calls still wait for it (per-agent order is kept). A call
//   whose deadline passes after it was handed to the worker pool but before a worker took it up
//   is skipped by that worker (no agent code runs).
// - Slow calls: a call handed to a worker (or started on the loop) longer ago than the host's
//   slow-call threshold is reported once (the host logs it at warn and counts it) and counted
//   as slow until it finishes.
//
// A thread of its own runs the host's tick at each deadline and every scan period; the tick
// takes the host lock. Every member but the constructor and destructor is called with the host
// lock held (the order is host lock, then the watch's own).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace agentd::detail {

struct AgentSlot;
struct Call;

class CallWatch {
 public:
  using Clock = std::chrono::steady_clock;

  // tick runs on the watch's thread at each deadline and at least every scan_period.
  CallWatch(std::chrono::milliseconds scan_period, std::function<void(Clock::time_point)> tick);
  ~CallWatch();  // stops the thread (after a running tick)
  CallWatch(const CallWatch&) = delete;
  CallWatch& operator=(const CallWatch&) = delete;

  // call (on slot) has call.deadline: the tick takes it with take_due() once it passes.
  void add_deadline(const std::shared_ptr<AgentSlot>& slot, const std::shared_ptr<Call>& call);
  // call finished before its deadline.
  void drop_deadline(const Call& call);
  struct Due {
    std::weak_ptr<AgentSlot> slot;
    std::weak_ptr<Call> call;
  };
  // The calls whose deadline is at or before now, taken out.
  std::vector<Due> take_due(Clock::time_point now);

  // call was handed to a worker (or started on the loop) at now; done() when it finished.
  void dispatched(const std::shared_ptr<AgentSlot>& slot, const std::shared_ptr<Call>& call,
                  Clock::time_point now);
  void done(const Call& call);
  struct Slow {
    std::shared_ptr<AgentSlot> slot;
    std::shared_ptr<Call> call;
    Clock::duration in_progress;
  };
  // The dispatched calls in progress for threshold or longer not reported before (now they are).
  std::vector<Slow> take_newly_slow(Clock::time_point now, Clock::duration threshold);
  // Reported as slow and not finished yet.
  std::size_t slow_now() const { return slow_now_; }
  // Dispatched and not finished (blocking calls on workers, or waiting for one; async calls).
  std::size_t in_progress() const { return running_.size() - free_.size(); }

 private:
  void main();
  // call's entry in running_, if it has one (Call::watch_entry, set by dispatched()).
  bool holds(const Call& call) const;

  struct Running {
    std::shared_ptr<AgentSlot> slot;
    std::shared_ptr<Call> call;  // null: a free entry
    Clock::time_point since;
    bool reported = false;
  };
  // The calls in progress, each at the index its Call::watch_entry says, and the free entries:
  // a call costs no hashing and no allocation (once the vectors have grown to the most calls in
  // progress at once; they are emptied when none is left, and given back past a large burst).
  std::vector<Running> running_;
  std::vector<std::size_t> free_;
  std::size_t slow_now_ = 0;
  std::multimap<Clock::time_point, std::pair<const Call*, Due>> deadlines_;

  const std::chrono::milliseconds scan_period_;
  const std::function<void(Clock::time_point)> tick_;
  std::mutex mu_;  // guards what follows (the thread's wake-up)
  std::condition_variable cv_;
  Clock::time_point wake_at_ = Clock::time_point::max();  // the thread's next planned wake-up
  Clock::time_point next_deadline_ = Clock::time_point::max();
  bool stop_ = false;
  std::thread thread_;  // last: starts once the above exist
};

}  // namespace agentd::detail

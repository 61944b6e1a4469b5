#include "call_watch.h"

#include "agent_host.h"
#include "mailbox.h"
#include "worker_pool.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <string>

namespace agentd::detail {

CallWatch::CallWatch(std::chrono::milliseconds scan_period, std::function<void(Clock::time_point)> tick)
    : scan_period_(std::max(scan_period, std::chrono::milliseconds(10))),
      tick_(std::move(tick)),
      thread_([this] { main(); }) {}

CallWatch::~CallWatch() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void CallWatch::main() {
  std::unique_lock lock(mu_);
  while (!stop_) {
    wake_at_ = std::min(next_deadline_, Clock::now() + scan_period_);
    cv_.wait_until(lock, wake_at_, [&] { return stop_ || Clock::now() >= wake_at_; });
    if (stop_) break;
    wake_at_ = Clock::time_point::max();  // add_deadline() need not wake us while we tick
    lock.unlock();
    tick_(Clock::now());
    lock.lock();
  }
}

void CallWatch::add_deadline(const std::shared_ptr<AgentSlot>& slot, const std::shared_ptr<Call>& call) {
  const bool first = deadlines_.empty() || call->deadline < deadlines_.begin()->first;
  deadlines_.emplace(call->deadline, std::make_pair(call.get(), Due{slot, call}));
  if (!first) return;
  std::lock_guard lock(mu_);
  next_deadline_ = call->deadline;
  // Wake the thread only when it planned to sleep past this deadline (a short timeout): with
  // timeouts longer than the scan period, a steady stream of calls wakes nobody.
  if (call->deadline < wake_at_) {
    wake_at_ = call->deadline;
    cv_.notify_one();
  }
}

void CallWatch::drop_deadline(const Call& call) {
  auto [from, to] = deadlines_.equal_range(call.deadline);
  for (auto it = from; it != to; ++it) {
    if (it->second.first == &call) {
      deadlines_.erase(it);
      break;
    }
  }
}

std::vector<CallWatch::Due> CallWatch::take_due(Clock::time_point now) {
  std::vector<Due> due;
  while (!deadlines_.empty() && deadlines_.begin()->first <= now) {
    due.push_back(std::move(deadlines_.begin()->second.second));
    deadlines_.erase(deadlines_.begin());
  }
  std::lock_guard lock(mu_);
  next_deadline_ = deadlines_.empty() ? Clock::time_point::max() : deadlines_.begin()->first;
  return due;
}

bool CallWatch::holds(const Call& call) const {
  // The index alone is not enough: the entry may be another call's since (a call dispatched
  // under an earlier watch, which set_watch() replaced).
  return call.watch_entry < running_.size() && running_[call.watch_entry].call.get() == &call;
}

void CallWatch::dispatched(const std::shared_ptr<AgentSlot>& slot, const std::shared_ptr<Call>& call,
                           Clock::time_point now) {
  std::size_t i = call->watch_entry;
  if (holds(*call)) {
    if (running_[i].reported) --slow_now_;  // dispatched again: counted afresh
  } else if (!free_.empty()) {
    i = free_.back();
    free_.pop_back();
  } else {
    i = running_.size();
    running_.emplace_back();
  }
  running_[i] = Running{slot, call, now, false};
  call->watch_entry = i;
}

void CallWatch::done(const Call& call) {
  if (!holds(call)) return;
  const std::size_t i = call.watch_entry;  // call is not read past the reset: it may end there
  if (running_[i].reported) --slow_now_;
  running_[i] = Running{};
  free_.push_back(i);
  if (free_.size() < running_.size()) return;  // calls are still in progress
  running_.clear();
  free_.clear();
  constexpr std::size_t kKept = 4096;  // entries kept for the next calls; a burst's are given back
  if (running_.capacity() > kKept) {
    running_.shrink_to_fit();
    free_.shrink_to_fit();
  }
}

std::vector<CallWatch::Slow> CallWatch::take_newly_slow(Clock::time_point now, Clock::duration threshold) {
  std::vector<Slow> out;
  for (auto& r : running_) {
    if (!r.call || r.reported || now - r.since < threshold) continue;
    r.reported = true;
    ++slow_now_;
    out.push_back(Slow{r.slot, r.call, now - r.since});
  }
  return out;
}

// ---- AgentHost's side (the host lock held unless said otherwise) ----

namespace {

std::string seconds_text(std::chrono::milliseconds ms) {
  return fmt::format("{:g} s", static_cast<double>(ms.count()) / 1000.0);
}

}  // namespace

void AgentHost::stop_watch() {
  std::unique_ptr<CallWatch> old;
  {
    Locked lock(*this);
    old = std::move(watch_);
  }
}

void AgentHost::set_watch(Watch w) {
  stop_watch();
  {
    Locked lock(*this);
    watch_options_ = std::move(w);
  }
  const auto& o = watch_options_;
  bool any_timeout = o.call_timeout.count() > 0;
  for (const auto& [_, t] : o.class_timeouts) any_timeout = any_timeout || t.count() > 0;
  if (!any_timeout && o.slow_call_warn.count() <= 0) return;
  // Slow calls are looked for every second (a quarter of the threshold when that is shorter).
  auto period = std::chrono::milliseconds(1000);
  if (o.slow_call_warn.count() > 0) period = std::min(period, o.slow_call_warn / 4);
  auto watch =
      std::make_unique<CallWatch>(period, [this](CallWatch::Clock::time_point now) { watch_tick(now); });
  Locked lock(*this);
  watch_ = std::move(watch);
}

AgentHost::WatchStats AgentHost::watch_stats() const {
  Locked lock(*this);
  return WatchStats{watch_ ? watch_->slow_now() : 0, slow_total_, timed_out_};
}

void AgentHost::watch_enqueue(const std::shared_ptr<AgentSlot>& slot, const std::shared_ptr<Call>& call) {
  if (!watch_) return;
  if (call->timeout.count() <= 0) {
    call->timeout = watch_options_.call_timeout;
    call->timeout_by = "--call-timeout";
    if (!watch_options_.class_timeouts.empty()) {
      if (auto it = watch_options_.class_timeouts.find(slot->class_name);
          it != watch_options_.class_timeouts.end()) {
        call->timeout = it->second;
        call->timeout_by = "--class-call-timeout";
      }
    }
  }
  if (call->timeout.count() <= 0) return;
  call->deadline = call->enqueued + call->timeout;
  watch_->add_deadline(slot, call);
}

void AgentHost::watch_dispatch(const std::shared_ptr<AgentSlot>& slot, const std::shared_ptr<Call>& call) {
  if (watch_) watch_->dispatched(slot, call, std::chrono::steady_clock::now());
}

void AgentHost::watch_finish(AgentSlot& slot, Call& call) {
  if (!watch_) return;
  watch_->done(call);
  if (call.timeout.count() > 0) watch_->drop_deadline(call);
  if (call.expired.load() && (call.running.load() || slot.async != nullptr)) {
    // Its timeout went out at the deadline; what it produced since is discarded.
    call.out_msg.reset();
    call.out_error = timeout_error(slot, call, Stalled::running);
    // With a state store, the result kept for its call id is the one its callers got (the
    // change was made on the worker, before; its effects on the agent are kept as they are).
    if (call.change && !call.change->call_id.empty())
      call.change->outcome = encode_outcome(Outcome(*call.out_error));
  }
}

Error AgentHost::timeout_error(const AgentSlot& slot, const Call& call, Stalled where) const {
  const std::string what =
      call.method.empty() ? std::string("the call") : fmt::format("the call of '{}'", call.method);
  const std::string deadline =
      fmt::format("its deadline ({} after it was queued, {})", seconds_text(call.timeout), call.timeout_by);
  switch (where) {
    case Stalled::queued:
      return Error(ErrorCode::timeout,
                   fmt::format("{} did not start within {}: it waited behind the agent's "
                               "earlier calls or for its input; it did not run and changed "
                               "nothing",
                               what, deadline),
                   slot.id, slot.class_name, /*retryable=*/true);
    case Stalled::waiting_for_worker:
      return Error(ErrorCode::timeout,
                   fmt::format("{} did not start within {}: every worker thread was busy "
                               "(--max-workers {}, see `agentctl status`); it did not run and "
                               "changed nothing",
                               what, deadline, workers_.max_threads()),
                   slot.id, slot.class_name, /*retryable=*/true);
    case Stalled::running:
      break;
  }
  return Error(ErrorCode::timeout,
               fmt::format("{} did not finish within {}. The agent's code cannot be stopped: it "
                           "runs on until it returns, its result is then discarded, what it does "
                           "to the agent's memory and state stays, and the agent's later calls "
                           "wait for it",
                           what, deadline),
               slot.id, slot.class_name, /*retryable=*/false);
}

bool AgentHost::skip_expired(const AgentSlot& slot, Call& call) {
  // Dekker-style with expire(): it sets expired then reads running; this sets running then
  // reads expired (both sequentially consistent), so one of the two sees the other.
  call.running.store(true);
  if (!call.expired.load()) return false;
  // Its deadline passed while it waited for a worker: no agent code runs.
  call.running.store(false);
  call.out_error = timeout_error(slot, call, Stalled::waiting_for_worker);
  return true;
}

void AgentHost::watch_tick(std::chrono::steady_clock::time_point now) {
  std::vector<std::string> lines;
  {
    Locked lock(*this);
    if (!watch_) return;
    for (auto& due : watch_->take_due(now)) {
      auto slot = due.slot.lock();
      auto call = due.call.lock();
      if (slot && call) expire(slot, call);
    }
    if (watch_options_.slow_call_warn.count() > 0) {
      for (auto& s : watch_->take_newly_slow(now, watch_options_.slow_call_warn)) {
        ++slow_total_;
        const Call& c = *s.call;
        lines.push_back(fmt::format(
            "slow call: agent={} class={} kind={}{}{} call_id={} in progress for {:.1f} s "
            "(over --slow-call-warn {}); workers busy {}/{}; it is logged once",
            s.slot->id, s.slot->class_name, kind_name(c.kind), c.method.empty() ? "" : " method=", c.method,
            c.call_id.empty() ? "-" : c.call_id, std::chrono::duration<double>(s.in_progress).count(),
            seconds_text(watch_options_.slow_call_warn), workers_.busy(), workers_.max_threads()));
      }
    }
  }
  for (const auto& l : lines) spdlog::warn("{}", l);
}

void AgentHost::expire(const std::shared_ptr<AgentSlot>& slot, const std::shared_ptr<Call>& call) {
  auto& box = slot->mailbox;
  auto it = std::find(box.begin(), box.end(), call);
  if (it == box.end()) return;  // it finished, or failed, meanwhile
  ++timed_out_;
  const bool dispatched = it == box.begin() && slot->busy && !slot->constructing;
  if (!dispatched) {
    Error e = timeout_error(*slot, *call, Stalled::queued);
    mailboxes_.drop(*slot, it);
    ++slot->failed;
    fail(call, std::move(e));
    if (!slot->removed) mailboxes_.pump(slot);  // it may have held up the calls behind it
    return;
  }
  // Its placeholder fails now; the rest of the call is finished()'s.
  call->expired.store(true);
  // An asynchronous call runs on the loop from its dispatch on.
  const bool ran = slot->async != nullptr || call->running.load();
  Error e = timeout_error(*slot, *call, ran ? Stalled::running : Stalled::waiting_for_worker);
  if (call->kind == Call::Kind::reply || call->kind == Call::Kind::method_async)
    defer(results_.complete(call->call_id, e));
  if (call->has_on_done) {
    auto stand_in = std::make_shared<Call>();
    stand_in->kind = call->kind;
    stand_in->call_id = call->call_id;
    stand_in->method = call->method;
    stand_in->out_error = std::move(e);
    stand_in->on_done = kj::mv(call->on_done);
    call->has_on_done = false;
    defer([this, stand_in]() { run_on_done(stand_in); });
  }
}

}  // namespace agentd::detail

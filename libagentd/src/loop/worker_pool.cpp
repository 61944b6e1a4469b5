#include "worker_pool.h"

#include <algorithm>

namespace agentd::detail {

WorkerPool::WorkerPool(std::size_t min_threads, std::size_t max_threads,
                       std::chrono::milliseconds idle_timeout, std::chrono::microseconds starved_after)
    : min_threads_(min_threads),
      max_threads_(max_threads < 1 ? 1 : max_threads),
      idle_timeout_(idle_timeout),
      starved_after_(starved_after) {
  std::lock_guard lock(mu_);
  for (std::size_t i = 0; i < min_threads_ && i < max_threads_; ++i) spawn_locked();
  last_progress_ = std::chrono::steady_clock::now();
  monitor_ = std::thread([this] { monitor_main(); });
}

WorkerPool::~WorkerPool() { stop(); }

void WorkerPool::spawn_locked() {
  ++starting_;
  std::size_t key = next_key_++;
  threads_.emplace(key, std::thread([this, key] { worker_main(key); }));
}

std::shared_ptr<WorkerPool::Idle> WorkerPool::wake_one_locked() {
  if (idle_stack_.empty() || wake_pending_) return nullptr;
  wake_pending_ = true;
  auto idle = std::move(idle_stack_.back());
  idle_stack_.pop_back();
  idle->woken = true;
  return idle;
}

void WorkerPool::wake_all_idle_locked() {
  for (auto& idle : idle_stack_) {
    idle->woken = true;
    idle->ready.post();
  }
  idle_stack_.clear();
}

void WorkerPool::submit(std::function<void()> task) {
  std::vector<std::thread> done;
  std::shared_ptr<Idle> wake;
  {
    std::lock_guard lock(mu_);
    if (stopping_) return;
    if (queue_.empty()) last_progress_ = std::chrono::steady_clock::now();
    queue_.push_back(std::move(task));
    wake = wake_one_locked();
    // Every thread busy: the monitor watches for starvation (threads may be blocked).
    if (idle_ == 0 && !monitor_watching_) monitor_cv_.notify_one();
    join_finished_locked(done);
  }
  if (wake) wake->ready.post();
  for (auto& t : done) t.join();
}

void WorkerPool::monitor_main() {
  std::unique_lock lock(mu_);
  while (!stopping_) {
    if (queue_.empty() || idle_ > 0) {
      monitor_watching_ = false;
      monitor_cv_.wait(lock);
      continue;
    }
    monitor_watching_ = true;
    monitor_cv_.wait_for(lock, starved_after_);
    if (stopping_ || queue_.empty()) continue;
    if (std::chrono::steady_clock::now() - last_progress_ < starved_after_) continue;
    if (idle_ > 0) {
      // Idle threads missed their wake-up: wake them all.
      wake_all_idle_locked();
      continue;
    }
    // Starved: every thread is stuck in a long call (or, on an overloaded machine, just not
    // scheduled). One new thread per queued task, less the threads started for earlier ones
    // that have not reached the queue yet, but at most doubling the pool per check: 1,000
    // blocked calls get their threads within about ten checks, and a machine too busy to run
    // short tasks for a moment does not get max_threads threads at once.
    std::size_t want = queue_.size() > starting_ ? queue_.size() - starting_ : 0;
    want = std::min(want, std::max<std::size_t>(1, threads_.size()));
    while (want-- > 0 && threads_.size() < max_threads_) spawn_locked();
    last_progress_ = std::chrono::steady_clock::now();
  }
  monitor_watching_ = false;
}

void WorkerPool::join_finished_locked(std::vector<std::thread>& out) {
  for (auto& t : finished_) out.push_back(std::move(t));
  finished_.clear();
}

void WorkerPool::worker_main(std::size_t key) {
  auto idle = std::make_shared<Idle>();
  std::unique_lock lock(mu_);
  --starting_;
  for (;;) {
    if (queue_.empty()) {
      if (stopping_) return;
      ++idle_;
      idle->woken = false;
      idle_stack_.push_back(idle);
      const auto deadline = std::chrono::steady_clock::now() + idle_timeout_;
      lock.unlock();
      bool timed_out = !idle->ready.wait_until(deadline);
      lock.lock();
      if (timed_out && idle->woken) {
        // Woken just as the wait ran out: take the wake-up (and its post) after all.
        idle->ready.wait();
        timed_out = false;
      }
      if (idle->woken) {
        // Whoever is woken takes over the pending wake-up, even to find the queue drained by a
        // busy thread: the next submit must be able to wake someone again.
        wake_pending_ = false;
      } else {
        idle_stack_.erase(std::find(idle_stack_.begin(), idle_stack_.end(), idle));
      }
      --idle_;
      if (timed_out && queue_.empty() && threads_.size() > min_threads_) {
        // Idle too long and above the floor: leave, and let a later caller join this thread.
        auto it = threads_.find(key);
        finished_.push_back(std::move(it->second));
        threads_.erase(it);
        return;
      }
      continue;
    }
    auto task = std::move(queue_.front());
    queue_.pop_front();
    last_progress_ = std::chrono::steady_clock::now();
    // More work than this thread: pass the wake-up on (parallelism ramps up with the queue).
    auto wake = queue_.empty() ? nullptr : wake_one_locked();
    if (idle_ == 0 && !queue_.empty() && !monitor_watching_) monitor_cv_.notify_one();
    lock.unlock();
    if (wake) wake->ready.post();
    task();
    task = nullptr;  // destroy captures outside the lock
    lock.lock();
  }
}

void WorkerPool::stop() {
  std::unordered_map<std::size_t, std::thread> threads;
  std::vector<std::thread> done;
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    // Queued tasks still run: a pool with no thread (min_threads 0) gets one for them.
    if (!queue_.empty() && threads_.empty()) spawn_locked();
    wake_all_idle_locked();
  }
  monitor_cv_.notify_all();
  if (monitor_.joinable()) monitor_.join();
  // Threads remove themselves only on idle timeout, which cannot happen once stopping_ is set,
  // so joining the set taken under the lock is enough.
  {
    std::lock_guard lock(mu_);
    threads.swap(threads_);
    join_finished_locked(done);
  }
  for (auto& [_, t] : threads) t.join();
  for (auto& t : done) t.join();
}

std::size_t WorkerPool::threads() const {
  std::lock_guard lock(mu_);
  return threads_.size();
}

std::size_t WorkerPool::busy() const {
  std::lock_guard lock(mu_);
  return threads_.size() - idle_;
}

}  // namespace agentd::detail

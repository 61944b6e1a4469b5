#include "worker_pool.h"

namespace agentd::detail {

WorkerPool::WorkerPool(std::size_t min_threads, std::size_t max_threads,
                       std::chrono::milliseconds idle_timeout)
    : min_threads_(min_threads),
      max_threads_(max_threads < 1 ? 1 : max_threads),
      idle_timeout_(idle_timeout) {
  std::lock_guard lock(mu_);
  for (std::size_t i = 0; i < min_threads_ && i < max_threads_; ++i) spawn_locked();
}

WorkerPool::~WorkerPool() { stop(); }

void WorkerPool::spawn_locked() {
  std::size_t key = next_key_++;
  threads_.emplace(key, std::thread([this, key] { worker_main(key); }));
}

void WorkerPool::submit(std::function<void()> task) {
  std::vector<std::thread> done;
  {
    std::lock_guard lock(mu_);
    if (stopping_) return;
    queue_.push_back(std::move(task));
    // Grow when more tasks wait than threads are idle: agents block, so a busy pool must not
    // make a ready agent wait behind a sleeping one.
    if (queue_.size() > idle_ && threads_.size() < max_threads_) spawn_locked();
    join_finished_locked(done);
  }
  cv_.notify_one();
  for (auto& t : done) t.join();
}

void WorkerPool::join_finished_locked(std::vector<std::thread>& out) {
  for (auto& t : finished_) out.push_back(std::move(t));
  finished_.clear();
}

void WorkerPool::worker_main(std::size_t key) {
  std::unique_lock lock(mu_);
  for (;;) {
    if (queue_.empty()) {
      if (stopping_) return;
      ++idle_;
      bool woke = cv_.wait_for(lock, idle_timeout_, [this] { return !queue_.empty() || stopping_; });
      --idle_;
      if (!woke && threads_.size() > min_threads_) {
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
    lock.unlock();
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
  }
  cv_.notify_all();
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

// WorkerPool: the threads agent code runs on. Elastic: it keeps min_threads alive, grows up to
// max_threads while every thread is busy (agents may block for seconds), and lets extra threads
// go after idle_timeout. Thread-safe.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

namespace agentd::detail {

class WorkerPool {
 public:
  WorkerPool(std::size_t min_threads, std::size_t max_threads,
             std::chrono::milliseconds idle_timeout = std::chrono::seconds(30));
  ~WorkerPool();  // stop()
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // Runs task on a worker thread. Tasks must not throw (wrap user code yourself).
  // After stop() the task is dropped.
  void submit(std::function<void()> task);

  // Runs the queued tasks, then joins every thread. Idempotent. Not from a worker thread.
  void stop();

  std::size_t threads() const;
  std::size_t busy() const;
  std::size_t max_threads() const { return max_threads_; }

 private:
  void spawn_locked();
  void worker_main(std::size_t key);
  void join_finished_locked(std::vector<std::thread>& out);

  const std::size_t min_threads_;
  const std::size_t max_threads_;
  const std::chrono::milliseconds idle_timeout_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  std::unordered_map<std::size_t, std::thread> threads_;
  std::vector<std::thread> finished_;  // threads that left on idle; joined later
  std::size_t next_key_ = 0;
  std::size_t idle_ = 0;
  bool stopping_ = false;
};

}  // namespace agentd::detail

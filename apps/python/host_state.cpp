// HostState: the Python host's asyncio thread (asynchronous agents run there) and its watchdog.
#include "hosted_agent.h"

#include <pybind11/pybind11.h>

#include <pthread.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

namespace agentd::python {

using namespace std::chrono_literals;

namespace {

// The asyncio loop counts as stalled when a no-op posted to it has not run for this long: an
// async agent is running code that does not await (a CPU-bound loop, a blocking call).
constexpr auto kStallWarn = 2s;
constexpr auto kWatchEvery = 100ms;

thread_local bool t_on_asyncio_thread = false;

}  // namespace

bool on_host_asyncio_thread() { return t_on_asyncio_thread; }

struct HostState::Threads {
  std::thread loop;
  std::thread watchdog;
  std::mutex mu;
  std::condition_variable cv;
  bool ready = false;  // guarded by mu
};

HostState& HostState::get() {
  static auto* state = new HostState();  // never freed: its Python objects outlive static teardown
  return *state;
}

void HostState::start() {
  if (threads_) return;
  threads_ = std::make_unique<Threads>();
  threads_->loop = std::thread([this] { run_loop(); });
  {
    py::gil_scoped_release release;  // the new thread needs the GIL to make its loop
    std::unique_lock lock(threads_->mu);
    threads_->cv.wait(lock, [this] { return threads_->ready; });
  }
  threads_->watchdog = std::thread([this] { watch(); });
}

void HostState::run_loop() {
  pthread_setname_np(pthread_self(), "agentd-asyncio");
  t_on_asyncio_thread = true;
  Gil gil;
  py::object asyncio = py::module_::import("asyncio");
  loop_ = asyncio.attr("new_event_loop")();
  asyncio.attr("set_event_loop")(loop_);
  completions_ = Completions::create(loop_);
  // `await placeholder` on this loop uses this queue too (agent.py's _completions_of).
  py::module_::import("agentd.agent").attr("_completions")[loop_] = completions_;
  loop_thread_id_ = py::module_::import("threading").attr("get_ident")().cast<unsigned long>();
  {
    std::lock_guard lock(threads_->mu);
    threads_->ready = true;
  }
  threads_->cv.notify_all();
  try {
    loop_.attr("run_forever")();
  } catch (py::error_already_set& e) {
    spdlog::error("Python host: the asyncio loop ended with {}", e.what());
  }
  completions_->close();
}

bool HostState::post(std::function<void()> fn) {
  auto c = completions_;
  return c && c->post(std::move(fn));
}

void HostState::stop() {
  if (!threads_ || stopping_.exchange(true)) return;
  post([this] { loop_.attr("stop")(); });
  if (threads_->loop.joinable()) threads_->loop.join();
  if (threads_->watchdog.joinable()) threads_->watchdog.join();
}

void HostState::watch() {
  pthread_setname_np(pthread_self(), "agentd-py-watch");
  auto beat = std::make_shared<std::atomic<bool>>(true);  // the last no-op posted has run
  auto posted = std::chrono::steady_clock::now();
  bool reported = false;
  while (!stopping_.load()) {
    std::this_thread::sleep_for(kWatchEvery);
    auto now = std::chrono::steady_clock::now();
    if (beat->load()) {
      if (reported)
        spdlog::warn("Python host: the asyncio loop runs again after {:.1f} s",
                     std::chrono::duration<double>(now - posted).count());
      reported = false;
      beat->store(false);
      posted = now;
      post([beat] { beat->store(true); });
      continue;
    }
    if (reported || now - posted < kStallWarn) continue;
    reported = true;
    stalls_.fetch_add(1);
    // Where it is stuck: the asyncio thread's Python stack (pure Python code lets other threads
    // take the GIL every few milliseconds).
    std::string where;
    try {
      Gil gil;
      py::dict frames = py::module_::import("sys").attr("_current_frames")();
      py::object key = py::int_(loop_thread_id_);
      if (frames.contains(key)) {
        py::list stack = py::module_::import("traceback").attr("format_stack")(frames[key]);
        auto n = static_cast<py::ssize_t>(stack.size());
        for (py::ssize_t i = std::max<py::ssize_t>(0, n - 4); i < n; ++i)
          where += stack[i].cast<std::string>();
      }
    } catch (py::error_already_set& e) {
      where = e.what();
    }
    spdlog::warn(
        "Python host: the asyncio loop has not run for {} s: an async Python agent is running code "
        "that does not await (asynchronous agents share this loop and wait meanwhile; make the code "
        "await, or move it to a thread with `await asyncio.to_thread(fn)`). Stalls so far: {}. It is "
        "at:\n{}",
        std::chrono::duration_cast<std::chrono::seconds>(kStallWarn).count(), stalls_.load(), where);
  }
}

}  // namespace agentd::python

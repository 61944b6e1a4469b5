// Completions: how results made on other threads reach an asyncio loop without those threads
// taking the GIL. One per asyncio loop (agentd._Completions, made by agent.py's _completions_of):
// post() queues a function from any thread and wakes the loop through an eventfd the loop
// watches (loop.add_reader); the loop's thread runs the queued functions in order, with the GIL
// held. A future parked here (park) is settled by such a function.
//
// Used for `await placeholder` (Placeholder::on_ready runs on the client's loop thread and
// only posts), for model calls of async agents (they run on the server's event loop, which must
// never wait for the GIL), and by the Python host (hosting.h) to start agent calls on its
// asyncio thread.
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <unordered_map>

namespace agentd::python {

namespace py = pybind11;

class Completions : public std::enable_shared_from_this<Completions> {
 public:
  // GIL held, on loop's thread or before the loop runs: watches a new eventfd with loop.add_reader.
  static std::shared_ptr<Completions> create(py::object loop);
  ~Completions();
  Completions(const Completions&) = delete;
  Completions& operator=(const Completions&) = delete;

  // Any thread, GIL or not: fn runs on the loop's thread with the GIL held, after the functions
  // posted before it. False (fn dropped) once the loop's reader is gone (close()).
  bool post(std::function<void()> fn);

  // GIL held: keeps fut (an asyncio future of this loop) and returns its token.
  std::uint64_t park(py::object fut);
  // GIL held, on the loop's thread: the parked future, removed (None when taken already).
  py::object take(std::uint64_t token);

  // GIL held: when_ready(placeholder, fut): settles fut with the placeholder's Msg or its
  // agentd.Error once it is there (Placeholder::on_ready). Cancelling fut just drops the news.
  void when_ready(py::object placeholder, py::object fut);

  // Functions posted and not yet run (for the host's watchdog).
  std::size_t pending() const;

  // GIL held, on the loop's thread: runs what was posted (the eventfd reader).
  void drain();
  // GIL held: stops watching; later posts are dropped.
  void close();

  py::object loop() const { return loop_; }

 private:
  Completions() = default;

  mutable std::mutex mu_;
  std::deque<std::function<void()>> queue_;  // guarded by mu_
  bool signalled_ = false;                   // guarded by mu_: the eventfd holds a wake-up
  bool closed_ = false;                      // guarded by mu_
  int fd_ = -1;
  py::object loop_;
  // GIL only.
  std::unordered_map<std::uint64_t, py::object> parked_;
  std::uint64_t next_token_ = 1;
};

// A Python object that may be dropped on any thread: the last owner takes the GIL to release
// it (or leaks it when the interpreter is gone). For captures of functions that normally run,
// and drop them, on the loop's thread but might be dropped elsewhere when the loop is gone.
using SharedObject = std::shared_ptr<py::object>;
SharedObject share_object(py::object o);

// Settles fut with value (GIL held; does nothing when fut is done or cancelled already).
void set_future_result(const py::object& fut, const py::object& value);
void set_future_exception(const py::object& fut, const py::object& exc);

// Binds agentd._Completions.
void bind_completions(py::module_& m);

}  // namespace agentd::python

#include "completions.h"

#include "agent_ref.h"
#include "errors.h"

#include <agentd/error.h>

#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <system_error>
#include <utility>

namespace agentd::python {

std::shared_ptr<Completions> Completions::create(py::object loop) {
  std::shared_ptr<Completions> c(new Completions());
  c->fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (c->fd_ < 0) throw std::system_error(errno, std::generic_category(), "agentd: eventfd");
  c->loop_ = std::move(loop);
  std::weak_ptr<Completions> weak = c;
  c->loop_.attr("add_reader")(c->fd_, py::cpp_function([weak] {
                                if (auto self = weak.lock()) self->drain();
                              }));
  return c;
}

Completions::~Completions() {
  if (fd_ >= 0) ::close(fd_);
}

bool Completions::post(std::function<void()> fn) {
  bool wake = false;
  {
    std::lock_guard lock(mu_);
    if (closed_) return false;
    queue_.push_back(std::move(fn));
    wake = !signalled_;
    signalled_ = true;
  }
  if (wake) {
    std::uint64_t one = 1;
    // A full counter (never in practice) already wakes the loop.
    [[maybe_unused]] auto n = ::write(fd_, &one, sizeof one);
  }
  return true;
}

std::uint64_t Completions::park(py::object fut) {
  std::uint64_t token = next_token_++;
  parked_.emplace(token, std::move(fut));
  return token;
}

py::object Completions::take(std::uint64_t token) {
  auto it = parked_.find(token);
  if (it == parked_.end()) return py::none();
  py::object fut = std::move(it->second);
  parked_.erase(it);
  return fut;
}

std::size_t Completions::pending() const {
  std::lock_guard lock(mu_);
  return queue_.size();
}

void Completions::drain() {
  std::uint64_t count = 0;
  [[maybe_unused]] auto n = ::read(fd_, &count, sizeof count);
  std::deque<std::function<void()>> run;
  {
    std::lock_guard lock(mu_);
    run.swap(queue_);
    signalled_ = false;
  }
  for (auto& fn : run) {
    try {
      fn();
    } catch (py::error_already_set& e) {
      // A function's own failure must not stop the others: asyncio reports it like a callback's.
      e.discard_as_unraisable("agentd: a completion on the asyncio loop");
    } catch (const std::exception& e) {
      PyErr_SetString(PyExc_RuntimeError, e.what());
      PyErr_WriteUnraisable(loop_.ptr());
    }
  }
}

void Completions::close() {
  {
    std::lock_guard lock(mu_);
    if (closed_) return;
    closed_ = true;
    queue_.clear();
  }
  try {
    loop_.attr("remove_reader")(fd_);
  } catch (py::error_already_set& e) {
    e.discard_as_unraisable("agentd: closing a completion queue");
  }
  parked_.clear();
}

SharedObject share_object(py::object o) {
  return SharedObject(new py::object(std::move(o)), [](py::object* p) {
    if (!Py_IsInitialized()) {
      p->release();  // the interpreter is gone: nothing to release it to
    } else {
      py::gil_scoped_acquire gil;
      delete p;
      return;
    }
    delete p;
  });
}

void set_future_result(const py::object& fut, const py::object& value) {
  if (!fut.is_none() && !fut.attr("done")().cast<bool>()) fut.attr("set_result")(value);
}

void set_future_exception(const py::object& fut, const py::object& exc) {
  if (!fut.is_none() && !fut.attr("done")().cast<bool>()) fut.attr("set_exception")(exc);
}

void Completions::when_ready(py::object placeholder, py::object fut) {
  auto& p = placeholder.cast<PyPlaceholder&>();
  std::uint64_t token = park(std::move(fut));
  std::weak_ptr<Completions> weak = weak_from_this();
  // The settling thread only posts; the result is read here, on the loop's thread, from the
  // placeholder kept with the future (get() returns at once once it is ready).
  auto job = [weak, token, ph = share_object(std::move(placeholder))] {
    auto self = weak.lock();
    if (!self) return;
    py::object f = self->take(token);
    py::object holder = std::move(*ph);
    if (f.is_none()) return;
    try {
      const Msg& m = holder.cast<PyPlaceholder&>().get(0.0);
      set_future_result(f, py::cast(m));
    } catch (const Error& e) {  // the call failed: its error, as agentd.Error
      set_future_exception(f, to_python(e));
    } catch (py::error_already_set& e) {
      set_future_exception(f, e.value());
    }
  };
  // ph is normally released by the job, on the loop's thread; share_object covers the rest.
  p.placeholder().on_ready([weak, job = std::move(job)]() mutable {
    if (auto self = weak.lock()) self->post(std::move(job));
  });
}

void bind_completions(py::module_& m) {
  py::class_<Completions, std::shared_ptr<Completions>>(
      m, "_Completions", "Results from agentd's threads delivered to one asyncio loop (see completions.h).")
      .def(py::init(&Completions::create), py::arg("loop"))
      .def("when_ready", &Completions::when_ready, py::arg("placeholder"), py::arg("future"))
      .def("close", &Completions::close);
}

}  // namespace agentd::python

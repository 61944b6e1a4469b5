#include "call_runner.h"

#include "agent_access.h"
#include "agent_code.h"
#include "agent_services.h"
#include "crash_report.h"
#include "model_registry.h"
#include "outcome_check.h"
#include "persistence.h"

#include <fmt/format.h>

#include <cstddef>
#include <exception>
#include <new>
#include <optional>
#include <utility>

namespace agentd::detail {

Error describe_exception(const AgentSlot& s, const std::string& what) {
  try {
    throw;
  } catch (const Error& e) {
    // Errors the agent raised on purpose (or a model call's error) keep their code.
    return Error(e.code(), fmt::format("{} failed: {}", what, e.message()), s.id, s.class_name,
                 e.retryable());
  } catch (const std::exception& e) {
    return Error(ErrorCode::agent_failed, fmt::format("{} raised: {}", what, e.what()), s.id, s.class_name);
  } catch (...) {
    return Error(ErrorCode::agent_failed, fmt::format("{} raised a non-standard exception", what), s.id,
                 s.class_name);
  }
}

namespace {

// A blocking agent's answer, awaited without suspending.
template <typename T>
struct Ready {
  T value;
  bool await_ready() const noexcept { return true; }
  void await_suspend(std::coroutine_handle<>) const noexcept {}
  T await_resume() { return std::move(value); }
};
template <>
struct Ready<void> {
  bool await_ready() const noexcept { return true; }
  void await_suspend(std::coroutine_handle<>) const noexcept {}
  void await_resume() const noexcept {}
};

// ---- The kinds of agent (call_runner.h) ----

// Agent: its code runs on a worker and answers at once.
struct Blocking {
  static constexpr bool kOnWorker = true;
  static Agent& agent(AgentSlot& s) { return *s.agent; }
  static Ready<Msg> reply(Agent& a, const Msg& x) { return {a.reply(x)}; }
  static Ready<void> observe(Agent& a, const Msg& x) {
    a.observe(x);
    return {};
  }
  static Ready<Value> call(Agent& a, const std::string& m, const Value& args) { return {a.call(m, args)}; }
};

// AsyncAgent: its calls are coroutines on the loop thread.
struct Asynchronous {
  static constexpr bool kOnWorker = false;
  static AsyncAgent& agent(AgentSlot& s) { return *s.async; }
  static Task<Msg> reply(AsyncAgent& a, const Msg& x) { return a.reply_async(x); }
  static Task<void> observe(AsyncAgent& a, const Msg& x) { return a.observe_async(x); }
  static Task<Value> call(AsyncAgent& a, const std::string& m, const Value& args) {
    return a.call_async(m, args);
  }
};

// Call::Kind::snapshot: what a clone starts from.
void snapshot(const Agent& agent, Call& c) {
  c.out_value = Value::object();
  c.out_value["args"] = agent.args();
  c.out_value["state"] = agent.save_state();
  c.out_memory = agent.memory().get();
}

// What the agent code of c is called in its error ("reply", "method 'm'", ...).
std::string code_name(const Call& c) {
  switch (c.kind) {
    case Call::Kind::method:
    case Call::Kind::method_async:
      return "method '" + c.method + "'";
    case Call::Kind::snapshot:
      return "save_state";
    default:
      return kind_name(c.kind);
  }
}

// One frame per thread kept for the next call: a blocking call's coroutine never suspends, so a
// worker reuses one frame instead of allocating one per call.
struct FrameCache {
  void* frame = nullptr;
  std::size_t size = 0;
  ~FrameCache() { ::operator delete(frame); }
};
thread_local FrameCache t_frame_cache;

}  // namespace

// The coroutine that runs one call: started by run(), it frees its own frame when it ends
// (final_suspend never suspends). While an asynchronous call's frame exists it is in the
// runner's frames_, so the runner can destroy it if it is still suspended when the runner goes.
struct CallRunner::Run {
  // Unlinked (prev == next == this) until link_after(); a blocking call's never is.
  struct promise_type : FrameLink {
    Run get_return_object() { return Run{std::coroutine_handle<promise_type>::from_promise(*this)}; }
    std::suspend_always initial_suspend() noexcept { return {}; }
    std::suspend_never final_suspend() noexcept { return {}; }
    void return_void() noexcept {}
    void unhandled_exception() noexcept { std::terminate(); }  // the body catches everything
    void link_after(FrameLink& head) {
      prev = &head;
      next = head.next;
      head.next->prev = this;
      head.next = this;
    }
    ~promise_type() {
      prev->next = next;
      next->prev = prev;
    }
    static void* operator new(std::size_t size) {
      FrameCache& c = t_frame_cache;
      if (c.frame != nullptr && c.size == size) return std::exchange(c.frame, nullptr);
      return ::operator new(size);
    }
    static void operator delete(void* frame, std::size_t size) {
      FrameCache& c = t_frame_cache;
      if (c.frame != nullptr) {
        ::operator delete(frame);
        return;
      }
      c.frame = frame;
      c.size = size;
    }
  };
  std::coroutine_handle<promise_type> handle;
};

CallRunner::~CallRunner() {
  // Each frame unlinks itself as it goes.
  while (frames_.next != &frames_)
    std::coroutine_handle<Run::promise_type>::from_promise(*static_cast<Run::promise_type*>(frames_.next))
        .destroy();
}

void CallRunner::run(std::shared_ptr<AgentSlot> slot, std::shared_ptr<Call> call) {
  if (slot->async == nullptr) {
    drive<Blocking>(std::move(slot), std::move(call)).handle.resume();  // to its end
    return;
  }
  Run run = drive<Asynchronous>(std::move(slot), std::move(call));
  run.handle.promise().link_after(frames_);
  run.handle.resume();  // until the call's first suspension, or to its end
}

template <typename Kind>
CallRunner::Run CallRunner::drive(std::shared_ptr<AgentSlot> slot, std::shared_ptr<Call> call) {
  AgentSlot& s = *slot;
  Call& c = *call;
  const ModelUsage before = s.usage->snapshot();
  if (s.usage->has_tool_calls()) s.usage->take_tool_calls();  // made outside a call (a constructor)
  c.started = std::chrono::steady_clock::now();
  StateStore* store = host_.store();
  if (store != nullptr && !c.call_id.empty()) c.journal_slot = store->journal().begin(c.call_id, s.id);
  auto& agent = Kind::agent(s);
  // The chunk sink stays set across suspensions: the agent runs no other call meanwhile.
  if (c.on_chunk) AgentAccess::set_chunk_sink(agent, host_.chunk_sink(c));
  if (!Kind::kOnWorker || !host_.skip_expired(s, c)) {
    std::optional<CrashContext> crash;
    if constexpr (Kind::kOnWorker) crash.emplace(c.call_id, s.id, s.class_name, c.journal_slot);
    static const Msg kNoInput{};
    const Msg& input = c.input ? std::get<Msg>(*c.input) : kNoInput;
    try {
      switch (c.kind) {
        case Call::Kind::reply: {
          Msg out = co_await Kind::reply(agent, input);
          if (out.id.empty()) out.id = new_id();
          if (out.name.empty()) out.name = s.name;
          c.out_msg = std::move(out);
          break;
        }
        case Call::Kind::observe:
          co_await Kind::observe(agent, input);
          break;
        case Call::Kind::method:
          c.out_value = co_await Kind::call(agent, c.method, c.args);
          break;
        case Call::Kind::method_async: {
          Value v = co_await Kind::call(agent, c.method, c.args);
          c.out_msg = Msg(s.name, std::move(v));
          break;
        }
        case Call::Kind::memory:
          c.out_memory = agent.memory().get();
          break;
        case Call::Kind::snapshot:
          snapshot(agent, c);
          break;
      }
    } catch (...) {
      c.out_error = describe_exception(s, code_name(c));
    }
  }
  if (c.on_chunk) AgentAccess::set_chunk_sink(agent, nullptr);
  check_outcome(s.id, s.class_name, c);
  // Before the change is recorded: the saved outcome carries the call's usage.
  const ModelUsage after = s.usage->snapshot();
  c.model_calls = after.calls - before.calls;
  c.prompt_tokens = after.prompt_tokens - before.prompt_tokens;
  c.completion_tokens = after.completion_tokens - before.completion_tokens;
  if (s.usage->has_tool_calls()) c.tool_calls = s.usage->take_tool_calls();
  if (host_.store() != nullptr) record_change(s, c);  // save_state(): agent code
  host_.finished(slot, std::move(call));
}

}  // namespace agentd::detail

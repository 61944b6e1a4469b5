#include "agent_host.h"

#include "crash_report.h"

#include "agent_access.h"
#include "agent_slot.h"
#include "call_watch.h"
#include "agent_services.h"
#include "outcome_check.h"
#include "model_registry.h"
#include "async_loop.h"
#include "bridge.h"
#include "plugin_loader.h"
#include "worker_pool.h"

#include <fmt/format.h>
#include <algorithm>
#include <coroutine>
#include <spdlog/spdlog.h>

namespace agentd::detail {

namespace {

AgentInfoRow row_of(const AgentSlot& s) {
  return AgentInfoRow{s.id, s.name, s.class_name, static_cast<std::uint32_t>(s.mailbox.size()),
                      s.completed, s.failed};
}

// What agent code threw (the exception being handled), as an Error naming the agent.
Error describe_exception(const AgentSlot& s, const std::string& what) {
  try {
    throw;
  } catch (const Error& e) {
    // Errors the agent raised on purpose (or a model call's error) keep their code.
    return Error(e.code(), fmt::format("{} failed: {}", what, e.message()), s.id, s.class_name,
                 e.retryable());
  } catch (const std::exception& e) {
    return Error(ErrorCode::agent_failed, fmt::format("{} raised: {}", what, e.what()), s.id,
                 s.class_name);
  } catch (...) {
    return Error(ErrorCode::agent_failed, fmt::format("{} raised a non-standard exception", what),
                 s.id, s.class_name);
  }
}

// A state store failure (not_applied) as the error of a call or creation on agent id.
Error store_error(const Error& failure, const std::string& id, const std::string& class_name) {
  return Error(failure.code(), failure.message(), id, class_name, /*retryable=*/true);
}

// Runs agent code; converts whatever it throws into an Error naming the agent.
template <typename F>
std::optional<Error> guarded(const AgentSlot& s, const std::string& what, F&& f) {
  try {
    f();
    return std::nullopt;
  } catch (...) {
    return describe_exception(s, what);
  }
}

// A call that only reads its agent (memory, a clone's snapshot): it changes nothing the state
// store would have to save, so a store that cannot write does not fail it.
bool reads_only(const Call& c) {
  return c.kind == Call::Kind::memory || c.kind == Call::Kind::snapshot;
}

}  // namespace

AgentHost::AgentHost(const ClassCatalog& catalog, AgentServices& services, WorkerPool& workers,
                     WorkerPool& lifecycle, Bridge& bridge, LoopScheduler& scheduler,
                     ResultPool::Limits result_limits)
    : catalog_(catalog),
      services_(services),
      workers_(workers),
      lifecycle_(lifecycle),
      bridge_(bridge),
      scheduler_(scheduler),
      loop_thread_(std::this_thread::get_id()),
      results_(result_limits) {}

void AgentHost::on_loop(kj::Function<void()> fn) {
  if (std::this_thread::get_id() == loop_thread_)
    fn();
  else
    bridge_.post(kj::mv(fn));
}

bool AgentHost::announce_result(const std::string& call_id, const std::string& agent_id) {
  std::lock_guard lock(mu_);
  return results_.add_pending(call_id, agent_id);
}

void AgentHost::when_result(const std::string& call_id, kj::Function<void(const OutcomePtr&)> w,
                            bool wait_for_unknown) {
  std::lock_guard lock(mu_);
  results_.when_ready(
      call_id,
      [this, w = kj::mv(w)](const OutcomePtr& o) mutable {
        on_loop([w = kj::mv(w), o]() mutable { w(o); });
      },
      wait_for_unknown);
}

void AgentHost::feed_from_result(const std::string& producer_call_id, const std::string& agent_id,
                                 const std::shared_ptr<Call>& call) {
  std::lock_guard lock(mu_);
  results_.when_ready(producer_call_id, input_waiter(agent_id, call), /*wait_for_unknown=*/true);
}

OutcomePtr AgentHost::peek_result(const std::string& call_id) const {
  std::lock_guard lock(mu_);
  return results_.peek(call_id);
}

AgentHost::ResultStats AgentHost::result_stats() const {
  std::lock_guard lock(mu_);
  return ResultStats{results_.size(), results_.evictions(), results_.limits()};
}

void AgentHost::sweep_results() {
  std::lock_guard lock(mu_);
  results_.sweep();
  if (StateStore* store = store_.load()) {
    store->trim_results(results_.limits().max_size, results_.limits().max_age);
    store->check_stall();
  }
}

std::optional<std::chrono::milliseconds> AgentHost::forgotten_age() const {
  std::lock_guard lock(mu_);
  return results_.forgotten_age();
}

void AgentHost::forget_until(std::int64_t unix_ms) {
  if (unix_ms <= 0) return;
  const auto ago = std::chrono::system_clock::now() -
                   std::chrono::system_clock::time_point(std::chrono::milliseconds(unix_ms));
  std::lock_guard lock(mu_);
  results_.forget_until(ResultPool::Clock::now() -
                        std::chrono::duration_cast<ResultPool::Clock::duration>(ago));
}

bool AgentHost::exists(const std::string& id) const {
  std::lock_guard lock(mu_);
  return agents_.count(id) > 0;
}

std::size_t AgentHost::size() const {
  std::lock_guard lock(mu_);
  return agents_.size();
}

std::size_t AgentHost::running_calls() const {
  std::lock_guard lock(mu_);
  return running_;
}

std::uint64_t AgentHost::calls_completed() const {
  std::lock_guard lock(mu_);
  return completed_;
}

std::map<std::string, std::pair<std::uint64_t, std::uint64_t>> AgentHost::calls_by_class() const {
  std::lock_guard lock(mu_);
  return by_class_;
}

std::uint64_t AgentHost::calls_failed() const {
  std::lock_guard lock(mu_);
  return failed_;
}

LatencyHistogram AgentHost::call_latency() const {
  std::lock_guard lock(mu_);
  return latency_;
}

std::vector<SpanRecord> AgentHost::recent_spans(std::size_t limit) const {
  std::lock_guard lock(mu_);
  std::size_t n = spans_.size();
  if (limit != 0 && limit < n) n = limit;
  std::vector<SpanRecord> out;
  out.reserve(n);
  // The ring holds seqs span_seq_ - spans_.size() + 1 .. span_seq_ at index (seq - 1) % size.
  for (std::uint64_t seq = span_seq_ - n + 1; seq <= span_seq_; ++seq)
    out.push_back(spans_[(seq - 1) % kMaxSpans]);
  return out;
}

AgentHost::~AgentHost() {
  watch_.reset();  // its thread's tick takes the lock and touches agents
  // Asynchronous calls still suspended (the grace period passed): destroy their frames, which
  // cancels what they wait on. Each frame removes itself from the set as it goes.
  std::vector<void*> frames(async_frames_.begin(), async_frames_.end());
  for (void* f : frames) std::coroutine_handle<>::from_address(f).destroy();
}

std::variant<std::string, Error> AgentHost::create(const std::string& class_name,
                                                   const std::string& name, Value args,
                                                   std::string id, CreateDone done,
                                                   std::shared_ptr<AgentSeed> seed) {
  if (args.is_null()) args = Value::object();  // unset args (a raw client's) are no args
  std::lock_guard lock(mu_);
  if (stopping_) return Error(ErrorCode::stopping, "the server is shutting down");
  if (StateStore* store = store_.load(); store != nullptr && (!seed || seed->persist)) {
    if (auto failure = store->failure()) return *failure;
  }
  const AgentClass* cls = catalog_.find(class_name);
  if (cls == nullptr) {
    std::string known;
    for (const auto& n : catalog_.names()) known += (known.empty() ? "" : ", ") + n;
    return Error(ErrorCode::unknown_class,
                 fmt::format("no agent class '{}' on this server; known classes: {}", class_name,
                             known.empty() ? "(none: start as_server with --plugin)" : known));
  }
  if (limits_.max_agents != 0 && agents_.size() >= limits_.max_agents)
    return Error(ErrorCode::overloaded,
                 fmt::format("the server has {} agents, its limit (--max-agents {}); delete some "
                             "or try again later",
                             agents_.size(), limits_.max_agents),
                 id, class_name);
  if (id.empty()) id = new_id();
  if (agents_.count(id))
    return Error(ErrorCode::duplicate_agent,
                 fmt::format("an agent with id '{}' already exists; pick another id or delete it",
                             id),
                 id, class_name);
  auto slot = std::make_shared<AgentSlot>();
  slot->id = id;
  slot->name = name.empty() ? id : name;
  slot->class_name = class_name;
  slot->usage = services_.usage_counter(id);
  agents_.emplace(id, slot);
  ++running_;
  AgentInit init{slot->id, slot->name, class_name, std::move(args), &services_};
  AgentFactory factory = cls->factory;
  auto done_ptr = std::make_shared<CreateDone>(std::move(done));
  lifecycle_.submit([this, slot, factory, init = std::move(init), done_ptr, seed]() mutable {
    std::unique_ptr<Agent> made;
    auto err = guarded(*slot, "constructor", [&] { made = factory(std::move(init)); });
    if (!err && seed) {
      AgentAccess::set_memory(made->memory(), std::move(seed->memory));
      err = guarded(*slot, "load_state", [&] { made->load_state(seed->state); });
    }
    auto holder = std::make_shared<std::unique_ptr<Agent>>(std::move(made));
    std::optional<StateStore::Change> change;
    if (!err && store_.load() != nullptr) {
      Agent& agent = **holder;
      if (!seed || seed->persist) {
        err = guarded(*slot, "save_state", [&] { change = initial_change(*slot, agent); });
      } else {
        // Restored: the store has it; remember what it holds (the change itself is not needed).
        slot->saved_memory = agent.memory().size();
        StateStore::Change held;
        err = guarded(*slot, "save_state", [&] { record_own_state(*slot, agent, held); });
      }
    }
    bridge_.post([this, slot, holder, err = std::move(err), done_ptr,
                  change = std::move(change)]() mutable {
      std::lock_guard lock(mu_);
      --running_;
      if (err) {
        Error e(err->code() == ErrorCode::agent_failed ? ErrorCode::bad_args : err->code(),
                err->message(), slot->id, slot->class_name);
        if (!slot->removed) agents_.erase(slot->id);
        slot->removed = true;
        auto queued = std::move(slot->mailbox);
        slot->mailbox.clear();
        queued_ -= queued.size();
        for (auto& c : queued) fail(c, e);
        if (*done_ptr) (*done_ptr)(e);
        return;
      }
      slot->agent = std::move(*holder);
      slot->async = dynamic_cast<AsyncAgent*>(slot->agent.get());
      slot->busy = false;
      slot->constructing = false;
      if (slot->removed) {
        destroy_agent(*slot);
        if (*done_ptr)
          (*done_ptr)(Error(ErrorCode::unknown_agent, "the agent was deleted while being created",
                            slot->id, slot->class_name));
        return;
      }
      StateStore* store = store_.load();
      if (change && store != nullptr) {
        // Acknowledged once committed; its calls may run meanwhile (their commits come after).
        store->submit(std::move(*change), [this, slot, done_ptr](const Error* failed) {
          std::optional<Error> e;
          if (failed != nullptr) e = store_error(*failed, slot->id, slot->class_name);
          on_loop([this, slot, done_ptr, e = std::move(e)]() mutable {
            if (e) remove(slot->id);
            if (!*done_ptr) return;
            if (e)
              (*done_ptr)(*e);
            else
              (*done_ptr)(row_of(*slot));
          });
        });
      } else if (*done_ptr) {
        (*done_ptr)(row_of(*slot));
      }
      pump(slot);
    });
  });
  return id;
}

void AgentHost::record_own_state(AgentSlot& slot, const Agent& agent, StateStore::Change& c) {
  std::string state = encode_value(agent.save_state());
  const std::size_t hash = std::hash<std::string>()(state);
  if (hash == slot.saved_state_hash) return;  // unchanged: nothing to write
  c.has_state = true;
  c.state = std::move(state);
  slot.saved_state_hash = hash;
}

void AgentHost::record_new_memory(AgentSlot& slot, const Memory& memory, StateStore::Change& c) {
  const auto& msgs = memory.get();
  const std::uint64_t clears = AgentAccess::memory_clears(memory);
  std::size_t from = slot.saved_memory;
  if (clears != slot.saved_clears || msgs.size() < from) {
    c.memory_reset = true;
    from = 0;
    slot.saved_clears = clears;
  }
  c.memory_from = static_cast<std::int64_t>(from);
  for (std::size_t i = from; i < msgs.size(); ++i) append_framed(c.memory, encode_msg(msgs[i]));
  slot.saved_memory = msgs.size();
}

StateStore::Change AgentHost::initial_change(AgentSlot& slot, const Agent& agent) {
  StateStore::Change c;
  c.kind = StateStore::Change::Kind::put_agent;  // replaces any memory rows: all of it is new
  c.agent_id = slot.id;
  c.name = slot.name;
  c.class_name = slot.class_name;
  c.args = encode_value(agent.args());
  record_own_state(slot, agent, c);
  record_new_memory(slot, agent.memory(), c);
  return c;
}

void AgentHost::record_change(AgentSlot& s, Call& c) {
  StateStore::Change ch;
  ch.agent_id = s.id;
  if (reads_only(c)) {
    ch.kind = StateStore::Change::Kind::barrier;  // reads only; published in commit order
  } else {
    ch.kind = StateStore::Change::Kind::call;
    Agent& agent = *s.agent;
    if (auto err = guarded(s, "save_state", [&] { record_own_state(s, agent, ch); })) {
      // The state the store has stays; the call reports the failure.
      c.out_msg.reset();
      c.out_error = std::move(err);
    }
    record_new_memory(s, agent.memory(), ch);
  }
  if (c.kind == Call::Kind::reply || c.kind == Call::Kind::method_async) {
    ch.call_id = c.call_id;
    ch.outcome = c.out_error ? encode_outcome(Outcome(*c.out_error))
                             : encode_outcome(Outcome(*c.out_msg));
  }
  c.change = std::make_unique<StateStore::Change>(std::move(ch));
}

void AgentHost::commit_and_publish(const std::shared_ptr<AgentSlot>& slot,
                                   const std::shared_ptr<Call>& call) {
  StateStore* store = store_.load();
  if (!call->change || store == nullptr) {
    call->change.reset();
    publish(call);
    if (store != nullptr) store->journal().end(call->journal_slot);
    return;
  }
  StateStore::Change change = std::move(*call->change);
  call->change.reset();
  if (slot->removed) {
    // Deleted while this call ran: its row is gone; only the result is kept.
    change.has_state = false;
    change.memory_reset = false;
    change.memory.clear();
  }
  store->submit(std::move(change), [this, store, call, id = slot->id,
                                    cls = slot->class_name](const Error* failed) {
    std::lock_guard lock(mu_);
    // Reads keep working while the disk is broken.
    if (failed != nullptr && !reads_only(*call)) {
      call->out_msg.reset();
      call->out_error = store_error(*failed, id, cls);
    }
    publish(call);
    store->journal().end(call->journal_slot);  // its outcome is committed (or failed): settled
  });
}

std::optional<Error> AgentHost::clone(const std::string& source_id, const std::string& name,
                                      std::string id, CreateDone done) {
  std::lock_guard lock(mu_);
  auto it = agents_.find(source_id);
  if (it == agents_.end())
    return Error(ErrorCode::unknown_agent,
                 fmt::format("no agent '{}' on this server to clone", source_id), source_id);
  if (!id.empty() && agents_.count(id))
    return Error(ErrorCode::duplicate_agent,
                 fmt::format("an agent with id '{}' already exists; pick another id or delete it",
                             id),
                 id);
  auto call = std::make_shared<Call>();
  call->kind = Call::Kind::snapshot;
  call->has_on_done = true;
  auto done_ptr = std::make_shared<CreateDone>(std::move(done));
  call->on_done = [this, cls = it->second->class_name, name, id = std::move(id),
                   done_ptr](Call& c) mutable {
    if (c.out_error) {
      if (*done_ptr) (*done_ptr)(*c.out_error);
      return;
    }
    auto seed = std::make_shared<AgentSeed>();
    seed->state = std::move(c.out_value["state"]);
    seed->memory = std::move(c.out_memory);
    auto made = create(cls, name, std::move(c.out_value["args"]), std::move(id), *done_ptr, seed);
    if (const Error* e = std::get_if<Error>(&made); e != nullptr && *done_ptr) (*done_ptr)(*e);
  };
  enqueue(source_id, std::move(call));
  return std::nullopt;
}

void AgentHost::set_store(StateStore* store) {
  // A batch's completions publish under one hold of the lock.
  if (store != nullptr)
    store->set_done_scope([this](const std::function<void()>& run_dones) {
      std::lock_guard lock(mu_);
      run_dones();
    });
  store_.store(store);
}

void AgentHost::after_saved(kj::Function<void()> fn) {
  StateStore* store = store_.load();
  if (store == nullptr) {
    on_loop(kj::mv(fn));
    return;
  }
  auto holder = std::make_shared<kj::Function<void()>>(kj::mv(fn));
  store->submit(StateStore::Change{}, [this, holder](const Error*) {
    on_loop([holder]() { (*holder)(); });
  });
}

void AgentHost::restore_result(const std::string& call_id, const std::string& agent_id,
                               OutcomePtr outcome) {
  std::lock_guard lock(mu_);
  if (!results_.add_pending(call_id, agent_id)) return;
  results_.complete(call_id, *outcome);
}

std::optional<AgentInfoRow> AgentHost::info(const std::string& id) const {
  std::lock_guard lock(mu_);
  auto it = agents_.find(id);
  if (it == agents_.end()) return std::nullopt;
  return row_of(*it->second);
}

std::string AgentHost::class_of(const std::string& id) const {
  std::lock_guard lock(mu_);
  auto it = agents_.find(id);
  return it == agents_.end() ? std::string{} : it->second->class_name;
}

bool AgentHost::remove(const std::string& id) { return remove_one(id, /*save=*/true); }

bool AgentHost::remove_one(const std::string& id, bool save) {
  std::lock_guard lock(mu_);
  auto it = agents_.find(id);
  if (it == agents_.end()) return false;
  auto slot = it->second;
  agents_.erase(it);
  services_.forget_agent(id);  // a new agent under this id starts from zero
  if (StateStore* store = store_.load(); store != nullptr && save) {
    StateStore::Change c;
    c.kind = StateStore::Change::Kind::delete_agent;
    c.agent_id = id;
    store->submit(std::move(c), nullptr);
  }
  slot->removed = true;
  // The running call (if any) stays at the head until its worker reports back.
  auto queued = take_waiting(*slot);
  queued_ -= queued.size();
  if (!queued.empty()) {
    Error e(ErrorCode::unknown_agent,
            fmt::format("agent '{}' was deleted before this call ran", id), id, slot->class_name);
    for (auto& c : queued) fail(c, e);
  }
  if (!slot->busy) destroy_agent(*slot);
  return true;
}

std::size_t AgentHost::remove_all() {
  std::lock_guard lock(mu_);
  if (StateStore* store = store_.load()) {
    StateStore::Change c;
    c.kind = StateStore::Change::Kind::delete_all;
    store->submit(std::move(c), nullptr);
  }
  std::vector<std::string> ids;
  for (const auto& [id, _] : agents_) ids.push_back(id);
  for (const auto& id : ids) remove_one(id, /*save=*/false);
  return ids.size();
}

std::vector<AgentInfoRow> AgentHost::list() const {
  std::lock_guard lock(mu_);
  std::vector<AgentInfoRow> out;
  out.reserve(agents_.size());
  for (const auto& [_, s] : agents_) out.push_back(row_of(*s));
  return out;
}

std::size_t AgentHost::queued_calls() const {
  std::lock_guard lock(mu_);
  return queued_;
}

void AgentHost::set_limits(Limits limits) {
  std::lock_guard lock(mu_);
  limits_ = limits;
}

std::optional<Error> AgentHost::admit(const std::string& agent_id) const {
  std::lock_guard lock(mu_);
  auto it = agents_.find(agent_id);
  if (it == agents_.end()) return std::nullopt;
  const AgentSlot& slot = *it->second;
  if (limits_.max_queued_calls_per_agent != 0 &&
      slot.mailbox.size() >= limits_.max_queued_calls_per_agent)
    return Error(ErrorCode::overloaded,
                 fmt::format("agent '{}' has {} calls queued, its limit "
                             "(--max-queued-calls-per-agent {}); try again later",
                             agent_id, slot.mailbox.size(), limits_.max_queued_calls_per_agent),
                 agent_id, slot.class_name);
  if (limits_.max_queued_calls != 0 && queued_ >= limits_.max_queued_calls)
    return Error(ErrorCode::overloaded,
                 fmt::format("the server has {} calls queued, its limit (--max-queued-calls {}); "
                             "try again later",
                             queued_, limits_.max_queued_calls),
                 agent_id, slot.class_name);
  return std::nullopt;
}

void AgentHost::refuse_result(const std::string& call_id, const std::string& agent_id, Error e) {
  std::lock_guard lock(mu_);
  if (!results_.add_pending(call_id, agent_id)) return;
  auto call = std::make_shared<Call>();
  call->kind = Call::Kind::reply;
  call->call_id = call_id;
  fail(std::move(call), std::move(e));
}

void AgentHost::enqueue(const std::string& id, std::shared_ptr<Call> call) {
  std::lock_guard lock(mu_);
  if (stopping_) {
    fail(std::move(call), Error(ErrorCode::stopping, "the server is shutting down", id));
    return;
  }
  auto it = agents_.find(id);
  if (it == agents_.end()) {
    fail(std::move(call),
         Error(ErrorCode::unknown_agent, fmt::format("no agent '{}' on this server", id), id));
    return;
  }
  // A store that cannot write refuses what would change an agent; reads still run.
  if (StateStore* store = store_.load(); store != nullptr && !reads_only(*call)) {
    if (auto failure = store->failure()) {
      fail(std::move(call), store_error(*failure, id, it->second->class_name));
      return;
    }
  }
  call->enqueued = std::chrono::steady_clock::now();
  call->enqueued_wall = std::chrono::system_clock::now();
  it->second->mailbox.push_back(call);
  ++queued_;
  watch_enqueue(it->second, call);
  pump(it->second);
}

ResultPool::Waiter AgentHost::input_waiter(const std::string& agent_id,
                                           const std::shared_ptr<Call>& call) {
  std::lock_guard lock(mu_);
  std::weak_ptr<Call> weak_call = call;
  std::weak_ptr<AgentSlot> weak_slot;
  if (auto it = agents_.find(agent_id); it != agents_.end()) weak_slot = it->second;
  return [this, weak_call, weak_slot](const OutcomePtr& input) {
    std::lock_guard lock(mu_);
    auto c = weak_call.lock();
    if (!c || c->input_ready) return;
    c->input = input;
    c->input_ready = true;
    if (auto slot = weak_slot.lock(); slot && !slot->removed) pump(slot);
  };
}

void AgentHost::pump(const std::shared_ptr<AgentSlot>& slot) {
  while (!slot->busy && !slot->mailbox.empty()) {
    auto call = slot->mailbox.front();
    if (!call->input_ready) return;  // its waiter pumps again
    if (call->input) {
      if (const Error* upstream = std::get_if<Error>(call->input.get())) {
        // The input's producer failed: this call fails with that cause, without running.
        slot->mailbox.pop_front();
        --queued_;
        ++slot->failed;
        fail(std::move(call), *upstream);
        continue;
      }
    }
    slot->busy = true;
    ++running_;
    watch_dispatch(slot, call);
    if (slot->async != nullptr)
      start_async(slot, std::move(call));
    else
      run_on_worker(slot, std::move(call));
  }
}

namespace {

// Set while a worker holds the lock to finish a call: the first call that becomes runnable is
// handed to that worker instead of the pool.
struct Continuation {
  std::shared_ptr<AgentSlot> slot;
  std::shared_ptr<Call> call;
};
thread_local Continuation* t_continuation = nullptr;

// Call::Kind::snapshot: what a clone starts from.
void snapshot(const Agent& agent, Call& c) {
  c.out_value = Value::object();
  c.out_value["args"] = agent.args();
  c.out_value["state"] = agent.save_state();
  c.out_memory = agent.memory().get();
}

void execute(AgentSlot& s, Call& c) {
  Agent& agent = *s.agent;
  static const Msg kNoInput{};
  const Msg& input = c.input ? std::get<Msg>(*c.input) : kNoInput;
  switch (c.kind) {
    case Call::Kind::reply:
      c.out_error = guarded(s, "reply", [&] {
        Msg out = agent.reply(input);
        if (out.id.empty()) out.id = new_id();
        if (out.name.empty()) out.name = s.name;
        c.out_msg = std::move(out);
      });
      break;
    case Call::Kind::observe:
      c.out_error = guarded(s, "observe", [&] { agent.observe(input); });
      break;
    case Call::Kind::method:
      c.out_error = guarded(s, "method '" + c.method + "'",
                            [&] { c.out_value = agent.call(c.method, c.args); });
      break;
    case Call::Kind::method_async:
      c.out_error = guarded(s, "method '" + c.method + "'", [&] {
        Msg out(s.name, agent.call(c.method, c.args));
        c.out_msg = std::move(out);
      });
      break;
    case Call::Kind::memory:
      c.out_error = guarded(s, "memory", [&] { c.out_memory = agent.memory().get(); });
      break;
    case Call::Kind::snapshot:
      c.out_error = guarded(s, "save_state", [&] { snapshot(agent, c); });
      break;
  }
}

}  // namespace

void AgentHost::note_running(const AgentSlot& slot, Call& call) {
  StateStore* store = store_.load();
  if (store != nullptr && !call.call_id.empty())
    call.journal_slot = store->journal().begin(call.call_id, slot.id);
}

void AgentHost::run_on_worker(std::shared_ptr<AgentSlot> slot, std::shared_ptr<Call> call) {
  if (t_continuation != nullptr && !t_continuation->slot) {
    t_continuation->slot = std::move(slot);
    t_continuation->call = std::move(call);
    return;
  }
  workers_.submit([this, slot = std::move(slot), call = std::move(call)]() mutable {
    worker_run(std::move(slot), std::move(call));
  });
}

void AgentHost::worker_run(std::shared_ptr<AgentSlot> slot, std::shared_ptr<Call> call) {
  while (slot) {
    const ModelUsage before = slot->usage->snapshot();
    call->started = std::chrono::steady_clock::now();
    note_running(*slot, *call);
    if (call->on_chunk) AgentAccess::set_chunk_sink(*slot->agent, chunk_sink(*call));
    if (!skip_expired(*slot, *call)) {
      CrashContext crash(call->call_id, slot->id, slot->class_name, call->journal_slot);
      execute(*slot, *call);  // agent code: no lock held
    }
    check_outcome(slot->id, slot->class_name, *call);
    if (call->on_chunk) AgentAccess::set_chunk_sink(*slot->agent, nullptr);
    if (store_.load() != nullptr) record_change(*slot, *call);  // save_state(): agent code
    const ModelUsage after = slot->usage->snapshot();
    call->model_calls = after.calls - before.calls;
    call->prompt_tokens = after.prompt_tokens - before.prompt_tokens;
    call->completion_tokens = after.completion_tokens - before.completion_tokens;
    call.reset();
    Continuation next;
    SpanRecord span;
    bool sink = false;
    {
      std::lock_guard lock(mu_);
      t_continuation = &next;
      sink = static_cast<bool>(span_sink_);
      finish_call(slot, sink ? &span : nullptr);
      t_continuation = nullptr;
    }
    if (sink) span_sink_(span);  // e.g. --trace-file: I/O without the host lock
    slot = std::move(next.slot);
    call = std::move(next.call);
  }
}

std::function<void(std::string_view)> AgentHost::chunk_sink(const Call& call) {
  if (!call.on_chunk) return {};
  // Posted from the thread running the call before its completion is (publish() hands that to
  // the loop through on_loop() too, after the call returned): the bridge keeps that order.
  return [this, deliver = call.on_chunk](std::string_view text) {
    on_loop([deliver, chunk = std::string(text)]() mutable { deliver(std::move(chunk)); });
  };
}

void AgentHost::finish_call(const std::shared_ptr<AgentSlot>& slot, SpanRecord* span_out) {
  --running_;
  auto call = std::move(slot->mailbox.front());
  slot->mailbox.pop_front();
  --queued_;
  slot->busy = false;
  watch_finish(*slot, *call);
  if (call->out_error) {
    ++slot->failed;
    ++failed_;
    ++by_class_[slot->class_name].second;
  } else {
    ++slot->completed;
    ++completed_;
    ++by_class_[slot->class_name].first;
  }
  const auto finished = std::chrono::steady_clock::now();
  std::chrono::duration<double> run_time = finished - call->started;
  latency_.observe(run_time.count());
  {
    using std::chrono::duration_cast;
    using std::chrono::nanoseconds;
    SpanRecord s;
    s.seq = ++span_seq_;
    s.call_id = call->call_id;
    s.agent_id = slot->id;
    s.agent_class = slot->class_name;
    s.kind = kind_name(call->kind);
    s.method = call->method;
    s.consumed = call->consumed;
    s.enqueued_unix_ns =
        duration_cast<nanoseconds>(call->enqueued_wall.time_since_epoch()).count();
    s.queue_wait_ns =
        std::max<std::int64_t>(0, duration_cast<nanoseconds>(call->started - call->enqueued).count());
    s.run_ns = duration_cast<nanoseconds>(finished - call->started).count();
    s.model_calls = call->model_calls;
    s.prompt_tokens = call->prompt_tokens;
    s.completion_tokens = call->completion_tokens;
    if (call->out_error) {
      s.outcome = std::string(to_string(call->out_error->code()));
      s.error_message = call->out_error->message();
    } else {
      s.outcome = "ok";
    }
    if (span_out != nullptr) *span_out = s;
    if (spans_.size() < kMaxSpans)
      spans_.push_back(std::move(s));
    else
      spans_[(span_seq_ - 1) % kMaxSpans] = std::move(s);
  }
  if (spdlog::should_log(spdlog::level::debug)) {
    spdlog::debug("call finished: agent={} class={} kind={}{}{} call_id={} outcome={} run_ms={:.3f}",
                  slot->id, slot->class_name, kind_name(call->kind),
                  call->method.empty() ? "" : " method=", call->method,
                  call->call_id.empty() ? "-" : call->call_id,
                  call->out_error ? fmt::format("error({})", to_string(call->out_error->code()))
                                  : std::string("ok"),
                  run_time.count() * 1000);
  }
  // May make dependent calls runnable (the first continues on this worker); with a state store,
  // once the call's change is committed.
  commit_and_publish(slot, call);
  if (slot->removed) {
    destroy_agent(*slot);
    return;
  }
  pump(slot);
}

void AgentHost::publish(const std::shared_ptr<Call>& call) {
  Call& c = *call;
  if (c.expired.load()) return;  // its timeout was published at its deadline
  switch (c.kind) {
    case Call::Kind::reply:
    case Call::Kind::method_async:
      if (c.out_error)
        results_.complete(c.call_id, *c.out_error);
      else
        results_.complete(c.call_id, std::move(*c.out_msg));
      break;
    default:
      break;
  }
  if (c.has_on_done) on_loop([call]() { call->on_done(*call); });
}

void AgentHost::fail(std::shared_ptr<Call> call, Error error) {
  ++failed_;
  ++by_class_[error.agent_class().empty() ? "(none)" : error.agent_class()].second;
  call->out_error = std::move(error);
  publish(call);
}

void AgentHost::destroy_agent(AgentSlot& slot) {
  if (!slot.agent) return;
  // The destructor is agent code: it runs on a worker.
  auto agent = std::shared_ptr<Agent>(std::move(slot.agent));
  lifecycle_.submit([agent]() mutable { agent.reset(); });
}

// ---- asynchronous agents ----

// The coroutine that runs one asynchronous call: started by run_async, it frees its own frame
// when it ends (final_suspend never suspends). While it exists its frame is in the host's
// async_frames_, so the host can destroy it if it is still suspended when the host goes.
struct AgentHost::AsyncRun {
  struct promise_type {
    std::unordered_set<void*>* registry = nullptr;
    AsyncRun get_return_object() {
      return AsyncRun{std::coroutine_handle<promise_type>::from_promise(*this)};
    }
    std::suspend_always initial_suspend() noexcept { return {}; }
    std::suspend_never final_suspend() noexcept { return {}; }
    void return_void() noexcept {}
    void unhandled_exception() noexcept { std::terminate(); }  // the body catches everything
    ~promise_type() {
      if (registry != nullptr)
        registry->erase(std::coroutine_handle<promise_type>::from_promise(*this).address());
    }
  };
  std::coroutine_handle<promise_type> handle;
};

void AgentHost::start_async(std::shared_ptr<AgentSlot> slot, std::shared_ptr<Call> call) {
  // Never run agent code here: the caller holds the lock (and may be a worker, or inside
  // another agent's completion). The drain runs it at the top of a loop turn.
  auto run = [this, slot = std::move(slot), call = std::move(call)]() mutable {
    run_async(std::move(slot), std::move(call));
  };
  if (std::this_thread::get_id() == loop_thread_)
    scheduler_.defer(kj::mv(run));
  else
    bridge_.post(kj::mv(run));
}

void AgentHost::run_async(std::shared_ptr<AgentSlot> slot, std::shared_ptr<Call> call) {
  call->started = std::chrono::steady_clock::now();
  note_running(*slot, *call);
  AsyncRun run = drive_async(std::move(slot), std::move(call));
  run.handle.promise().registry = &async_frames_;
  async_frames_.insert(run.handle.address());
  run.handle.resume();  // runs until the call's first suspension, or to its end
}

AgentHost::AsyncRun AgentHost::drive_async(std::shared_ptr<AgentSlot> slot,
                                          std::shared_ptr<Call> call) {
  const ModelUsage before = slot->usage->snapshot();
  AsyncAgent& agent = *slot->async;
  // The chunk sink stays set across suspensions: the agent runs no other call meanwhile.
  if (call->on_chunk) AgentAccess::set_chunk_sink(agent, chunk_sink(*call));
  static const Msg kNoInput{};
  const Msg& input = call->input ? std::get<Msg>(*call->input) : kNoInput;
  const char* what = "reply";
  try {
    switch (call->kind) {
      case Call::Kind::reply: {
        Msg out = co_await agent.reply_async(input);
        if (out.id.empty()) out.id = new_id();
        if (out.name.empty()) out.name = slot->name;
        call->out_msg = std::move(out);
        break;
      }
      case Call::Kind::observe:
        what = "observe";
        co_await agent.observe_async(input);
        break;
      case Call::Kind::method:
        what = "method";
        call->out_value = co_await agent.call_async(call->method, call->args);
        break;
      case Call::Kind::method_async: {
        what = "method";
        Value v = co_await agent.call_async(call->method, call->args);
        call->out_msg = Msg(slot->name, std::move(v));
        break;
      }
      case Call::Kind::memory:
        what = "memory";
        call->out_memory = agent.memory().get();
        break;
      case Call::Kind::snapshot:
        what = "save_state";
        snapshot(agent, *call);
        break;
    }
  } catch (...) {
    const std::string label =
        std::string_view(what) == "method" ? "method '" + call->method + "'" : std::string(what);
    call->out_error = describe_exception(*slot, label);
  }
  if (call->on_chunk) AgentAccess::set_chunk_sink(agent, nullptr);
  check_outcome(slot->id, slot->class_name, *call);
  if (store_.load() != nullptr) record_change(*slot, *call);
  const ModelUsage after = slot->usage->snapshot();
  call->model_calls = after.calls - before.calls;
  call->prompt_tokens = after.prompt_tokens - before.prompt_tokens;
  call->completion_tokens = after.completion_tokens - before.completion_tokens;
  finish_async(slot, std::move(call));
}

void AgentHost::finish_async(const std::shared_ptr<AgentSlot>& slot, std::shared_ptr<Call> call) {
  call.reset();  // the mailbox holds it until finish_call
  SpanRecord span;
  bool sink = false;
  {
    std::lock_guard lock(mu_);
    sink = static_cast<bool>(span_sink_);
    finish_call(slot, sink ? &span : nullptr);  // the next calls it makes runnable are deferred
  }
  if (sink) span_sink_(span);
}

void AgentHost::begin_stop() {
  std::lock_guard lock(mu_);
  stopping_ = true;
  for (auto& [id, slot] : agents_) {
    auto queued = take_waiting(*slot);
    queued_ -= queued.size();
    for (auto& c : queued)
      fail(c, Error(ErrorCode::stopping, "the server is shutting down; this call did not run", id,
                    slot->class_name));
  }
}

}  // namespace agentd::detail

#include "agent_host.h"

#include "agent_access.h"
#include "agent_code.h"
#include "agent_services.h"
#include "async_loop.h"
#include "bridge.h"
#include "call_watch.h"
#include "mailbox.h"
#include "model_registry.h"
#include "outcome_codec.h"
#include "persistence.h"
#include "plugin_loader.h"
#include "worker_pool.h"

#include <algorithm>
#include <array>
#include <string_view>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace agentd::detail {

namespace {
// The calls in s's mailbox, waiting or running, less one answered early (AgentSlot::answered_early).
std::size_t queued_in(const AgentSlot& s) { return s.mailbox.size() - (s.answered_early ? 1 : 0); }
}  // namespace

AgentInfoRow row_of(const AgentSlot& s) {
  AgentInfoRow r{s.id,        s.name,   s.class_name,       static_cast<std::uint32_t>(queued_in(s)),
                 s.completed, s.failed, s.last_call_unix_ms};
  if (s.usage) {
    const ModelUsage u = s.usage->snapshot();
    r.model_calls = u.calls;
    r.prompt_tokens = u.prompt_tokens;
    r.completion_tokens = u.completion_tokens;
  }
  return r;
}

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
      results_(result_limits),
      mailboxes_(Mailboxes::Hooks{
          [this](const std::shared_ptr<AgentSlot>& slot, std::shared_ptr<Call> call) {
            dispatch(slot, std::move(call));
          },
          [this](std::shared_ptr<Call> call, Error e) { fail(std::move(call), std::move(e)); }}) {}

AgentHost::~AgentHost() {
  stop_watch();  // its thread's tick takes the lock and touches agents
  // runner_ goes next (the last member): the asynchronous calls still suspended (the grace
  // period passed) are destroyed, which cancels what they wait on.
}

AgentHost::Locked::~Locked() noexcept(false) {
  if (host_.deferred_.empty()) return;  // the usual case: unlocks, nothing to run
  ResultPool::Ready ready;
  ready.append(std::move(host_.deferred_));
  host_.in_transit_.fetch_add(1);  // before the unlock: settled() cannot miss it
  KJ_DEFER(host_.in_transit_.fetch_sub(1));
  lock_.unlock();
  ready.run();
}

void AgentHost::defer(kj::Function<void()> fn) {
  deferred_.add([fn = kj::mv(fn)](const OutcomePtr&) mutable { fn(); }, nullptr);
}

void AgentHost::on_loop(kj::Function<void()> fn) {
  if (std::this_thread::get_id() == loop_thread_)
    fn();
  else
    bridge_.post(kj::mv(fn));
}

bool AgentHost::announce_result(const std::string& call_id, const std::string& agent_id) {
  Locked lock(*this);
  return results_.add_pending(call_id, agent_id);
}

void AgentHost::when_result(const std::string& call_id, kj::Function<void(const OutcomePtr&)> w,
                            bool wait_for_unknown) {
  Locked lock(*this);
  defer(results_.when_ready(
      call_id,
      [this, w = kj::mv(w)](const OutcomePtr& o) mutable { on_loop([w = kj::mv(w), o]() mutable { w(o); }); },
      wait_for_unknown));
}

bool AgentHost::announce_result_here(const std::string& call_id, const std::string& agent_id,
                                     ResultPool::Waiter w) {
  Locked lock(*this);
  return results_.add_pending(call_id, agent_id, &w);
}

void AgentHost::feed_from_result(const std::string& producer_call_id, const std::string& agent_id,
                                 const std::shared_ptr<Call>& call) {
  Locked lock(*this);
  defer(results_.when_ready(producer_call_id, input_waiter_locked(agent_id, call),
                            /*wait_for_unknown=*/true));
}

OutcomePtr AgentHost::peek_result(const std::string& call_id) const {
  Locked lock(*this);
  return results_.peek(call_id);
}

AgentHost::ResultStats AgentHost::result_stats() const {
  Locked lock(*this);
  return ResultStats{results_.size(), results_.evictions(), results_.limits()};
}

void AgentHost::sweep_results() {
  Locked lock(*this);
  defer(results_.sweep());
  if (StateStore* store = store_.load()) {
    store->trim_results(results_.limits().max_size, results_.limits().max_age);
    store->check_stall();
  }
}

std::optional<std::chrono::milliseconds> AgentHost::forgotten_age() const {
  Locked lock(*this);
  return results_.forgotten_age();
}

void AgentHost::forget_until(std::int64_t unix_ms) {
  if (unix_ms <= 0) return;
  const auto ago = std::chrono::system_clock::now() -
                   std::chrono::system_clock::time_point(std::chrono::milliseconds(unix_ms));
  Locked lock(*this);
  results_.forget_until(ResultPool::Clock::now() -
                        std::chrono::duration_cast<ResultPool::Clock::duration>(ago));
}

void AgentHost::restore_result(const std::string& call_id, const std::string& agent_id, OutcomePtr outcome) {
  Locked lock(*this);
  if (!results_.add_pending(call_id, agent_id)) return;
  defer(results_.complete(call_id, *outcome));
}

bool AgentHost::exists(const std::string& id) const {
  Locked lock(*this);
  return agents_.count(id) > 0;
}

std::size_t AgentHost::size() const {
  Locked lock(*this);
  return agents_.size();
}

std::size_t AgentHost::running_calls() const {
  Locked lock(*this);
  return mailboxes_.running() - answered_early_;
}

bool AgentHost::settled() const {
  Locked lock(*this);
  return mailboxes_.running() == answered_early_ && in_transit_.load() == 0;
}

std::size_t AgentHost::queued_calls() const {
  Locked lock(*this);
  return mailboxes_.queued() - answered_early_;
}

std::uint64_t AgentHost::calls_completed() const {
  Locked lock(*this);
  return stats_.completed();
}

std::uint64_t AgentHost::calls_failed() const {
  Locked lock(*this);
  return stats_.failed();
}

std::map<std::string, std::pair<std::uint64_t, std::uint64_t>> AgentHost::calls_by_class() const {
  Locked lock(*this);
  return stats_.by_class();
}

LatencyHistogram AgentHost::call_latency() const {
  Locked lock(*this);
  return stats_.latency();
}

std::vector<SpanRecord> AgentHost::recent_spans(std::size_t limit) const {
  Locked lock(*this);
  return stats_.recent_spans(limit);
}

std::optional<AgentInfoRow> AgentHost::info(const std::string& id) const {
  Locked lock(*this);
  auto it = agents_.find(id);
  if (it == agents_.end()) return std::nullopt;
  return row_of(*it->second);
}

std::string AgentHost::class_of(const std::string& id) const {
  Locked lock(*this);
  auto it = agents_.find(id);
  return it == agents_.end() ? std::string{} : it->second->class_name;
}

std::vector<AgentInfoRow> AgentHost::list() const {
  Locked lock(*this);
  std::vector<AgentInfoRow> out;
  out.reserve(agents_.size());
  for (const auto& [_, s] : agents_) out.push_back(row_of(*s));
  return out;
}

namespace {

char ascii_lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

// An ASCII case-insensitive substring search for one (lower-case) needle, set up once per query:
// Horspool's, which on a mismatch skips ahead by up to the needle's length (a table of 256).
class NoCaseSearch {
 public:
  explicit NoCaseSearch(std::string_view lower_needle) : needle_(lower_needle) {
    const std::size_t m = needle_.size();
    skip_.fill(m == 0 ? 1 : m);
    for (std::size_t i = 0; i + 1 < m; ++i) {
      const auto c = static_cast<unsigned char>(needle_[i]);
      skip_[c] = m - 1 - i;
      if (c >= 'a' && c <= 'z') skip_[c - 'a' + 'A'] = m - 1 - i;  // the text's upper case too
    }
  }
  bool in(std::string_view text) const {
    const std::size_t m = needle_.size();
    if (m == 0) return true;
    for (std::size_t at = 0; at + m <= text.size();
         at += skip_[static_cast<unsigned char>(text[at + m - 1])]) {
      std::size_t j = m;
      while (j > 0 && ascii_lower(text[at + j - 1]) == needle_[j - 1]) --j;
      if (j == 0) return true;
    }
    return false;
  }

 private:
  std::string needle_;
  std::array<std::size_t, 256> skip_{};
};

// The first 8 bytes of s as a big-endian number (zero-padded): ordering by it orders by s's
// first 8 bytes, so most comparisons of strings need not read the strings.
std::uint64_t prefix_key(std::string_view s) {
  std::uint64_t k = 0;
  for (std::size_t i = 0; i < 8; ++i) k = (k << 8) | (i < s.size() ? static_cast<unsigned char>(s[i]) : 0u);
  return k;
}

// A number as an unsigned key in the same order.
std::uint64_t number_key(std::int64_t n) { return static_cast<std::uint64_t>(n) ^ (1ull << 63); }

// One agent as a page is ordered: its key (a number, or a string's prefix), its id's prefix
// (ties), and its slot (for full strings when the prefixes tie; valid under the host lock).
struct Keyed {
  std::uint64_t key;
  std::uint64_t id_key;
  const AgentSlot* slot;
};

}  // namespace

AgentPageRows AgentHost::query(const AgentQuery& q) const {
  using Sort = AgentQuery::Sort;
  std::string needle = q.search;
  for (char& c : needle)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  const std::size_t limit = std::min<std::size_t>(q.limit, kMaxQueryLimit);
  const bool text = q.sort == Sort::id || q.sort == Sort::name || q.sort == Sort::class_name;
  const auto text_of = [&q](const AgentSlot& s) -> const std::string& {
    return q.sort == Sort::name ? s.name : q.sort == Sort::class_name ? s.class_name : s.id;
  };

  const NoCaseSearch search(needle);

  Locked lock(*this);
  AgentPageRows page;
  page.total = dense_.size();
  if (needle.size() > kMaxQuerySearch) return page;  // matches no id, name or class worth a scan
  std::vector<Keyed> keyed;
  keyed.reserve(needle.empty() && q.class_name.empty() ? dense_.size() : 1024);
  // The slots are scattered over the heap: each is prefetched kAhead agents before its turn,
  // and its id and name (heap strings) kAhead / 2 before, so the misses overlap.
  constexpr std::size_t kAhead = 16;
  const std::size_t n = dense_.size();
  for (std::size_t i = 0; i < n; ++i) {
    if (i + kAhead < n) __builtin_prefetch(dense_[i + kAhead]);
    if (i + kAhead / 2 < n) {
      const AgentSlot* ahead = dense_[i + kAhead / 2];
      __builtin_prefetch(ahead->id.data());
      if (!needle.empty() || q.sort == Sort::name) __builtin_prefetch(ahead->name.data());
    }
    const AgentSlot& s = *dense_[i];
    if (!q.class_name.empty() && s.class_name != q.class_name) continue;
    if (!needle.empty() && !search.in(s.id) && !search.in(s.name) && !search.in(s.class_name)) continue;
    std::int64_t number = 0;
    switch (q.sort) {
      case Sort::id:
      case Sort::name:
      case Sort::class_name:
        break;
      case Sort::calls:
        number = static_cast<std::int64_t>(s.completed + s.failed);
        break;
      case Sort::errors:
        number = static_cast<std::int64_t>(s.failed);
        break;
      case Sort::queued:
        number = static_cast<std::int64_t>(queued_in(s));
        break;
      case Sort::last_call:
        number = s.last_call_unix_ms;
        break;
      case Sort::tokens:
        if (s.usage) {
          const ModelUsage u = s.usage->snapshot();
          number = u.prompt_tokens + u.completion_tokens;
        }
        break;
    }
    keyed.push_back(Keyed{text ? prefix_key(text_of(s)) : number_key(number), prefix_key(s.id), &s});
  }
  page.matched = keyed.size();
  if (q.offset >= keyed.size() || limit == 0) return page;

  // Ascending by the key, ties by id ascending; descending reverses the key only (ties stay by
  // id). The full strings are read only when the prefixes tie.
  const auto before = [&](const Keyed& a, const Keyed& b) {
    if (a.key != b.key) return q.descending ? a.key > b.key : a.key < b.key;
    if (text) {
      const int c = text_of(*a.slot).compare(text_of(*b.slot));
      if (c != 0) return q.descending ? c > 0 : c < 0;
    }
    if (a.id_key != b.id_key) return a.id_key < b.id_key;
    return a.slot->id < b.slot->id;
  };
  // Selection, not a full sort: the page's first element in place, then the page sorted.
  const auto first = keyed.begin() + static_cast<std::ptrdiff_t>(q.offset);
  const auto last =
      keyed.begin() + static_cast<std::ptrdiff_t>(std::min<std::uint64_t>(keyed.size(), q.offset + limit));
  if (first != keyed.begin()) std::nth_element(keyed.begin(), first, keyed.end(), before);
  std::partial_sort(first, last, keyed.end(), before);
  page.rows.reserve(static_cast<std::size_t>(last - first));
  for (auto it = first; it != last; ++it) page.rows.push_back(row_of(*it->slot));
  return page;
}

void AgentHost::index_add(AgentSlot& slot) {
  slot.dense_index = static_cast<std::uint32_t>(dense_.size());
  dense_.push_back(&slot);
}

void AgentHost::index_remove(AgentSlot& slot) {
  AgentSlot* moved = dense_.back();
  dense_[slot.dense_index] = moved;
  moved->dense_index = slot.dense_index;
  dense_.pop_back();
}

// ---- The state store ----

void AgentHost::set_store(StateStore* store) {
  // A batch's completions publish under one hold of the lock; what they defer runs after it.
  if (store != nullptr)
    store->set_done_scope([this](const std::function<void()>& run_dones) {
      Locked lock(*this);
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
  // Submitted without the lock: the completion runs under it (the done scope) or, failing at
  // once, here without it; on_loop() posts to the loop or runs fn now (no host state touched).
  // holder moves on: fn must be destroyed on the loop thread, not with the completion on the writer.
  store->submit(StateStore::Change{}, [this, holder = std::move(holder)](const Error*) mutable {
    on_loop([holder = std::move(holder)]() { (*holder)(); });
  });
}

StateStore* AgentHost::commit_and_publish(const std::shared_ptr<AgentSlot>& slot,
                                          const std::shared_ptr<Call>& call) {
  StateStore* store = store_.load();
  if (!call->change || store == nullptr) {
    call->change.reset();
    publish(call);
    if (store != nullptr) store->journal().end(call->journal_slot);
    return nullptr;
  }
  StateStore::Change change = std::move(*call->change);
  call->change.reset();
  if (slot->removed) keep_result_only(change);  // deleted while this call ran: its row is gone
  // The completion runs with the host lock held (the done scope, or inline from submit()).
  auto done = [this, store, call, id = slot->id, cls = slot->class_name](const Error* failed) {
    // Reads keep working while the disk is broken.
    if (failed != nullptr && !reads_only(*call)) {
      call->out_msg.reset();
      call->out_error = store_error(*failed, id, cls);
    }
    publish(call);
    store->journal().end(call->journal_slot);  // its outcome is committed (or failed): settled
  };
  // A worker may commit it itself once the lock is released (finished()): never the loop thread.
  if (Continuation::active() && std::this_thread::get_id() != loop_thread_)
    return store->submit_to_lead(std::move(change), std::move(done)) ? store : nullptr;
  store->submit(std::move(change), std::move(done));
  return nullptr;
}

// ---- Limits ----

void AgentHost::set_limits(Limits limits) {
  Locked lock(*this);
  limits_ = limits;
}

std::optional<Error> AgentHost::admit(const std::string& agent_id) const {
  Locked lock(*this);
  auto it = agents_.find(agent_id);
  if (it == agents_.end()) return std::nullopt;
  const AgentSlot& slot = *it->second;
  if (limits_.max_queued_calls_per_agent != 0 && slot.mailbox.size() >= limits_.max_queued_calls_per_agent)
    return Error(ErrorCode::overloaded,
                 fmt::format("agent '{}' has {} calls queued, its limit "
                             "(--max-queued-calls-per-agent {}); try again later",
                             agent_id, slot.mailbox.size(), limits_.max_queued_calls_per_agent),
                 agent_id, slot.class_name);
  const std::size_t queued = mailboxes_.queued();
  if (limits_.max_queued_calls != 0 && queued >= limits_.max_queued_calls)
    return Error(ErrorCode::overloaded,
                 fmt::format("the server has {} calls queued, its limit (--max-queued-calls {}); "
                             "try again later",
                             queued, limits_.max_queued_calls),
                 agent_id, slot.class_name);
  return std::nullopt;
}

void AgentHost::refuse_result(const std::string& call_id, const std::string& agent_id, Error e) {
  Locked lock(*this);
  if (!results_.add_pending(call_id, agent_id)) return;
  auto call = std::make_shared<Call>();
  call->kind = Call::Kind::reply;
  call->call_id = call_id;
  fail(std::move(call), std::move(e));
}

// ---- Calls: in, run, out ----

void AgentHost::enqueue(const std::string& id, std::shared_ptr<Call> call) {
  Locked lock(*this);
  enqueue_locked(id, std::move(call));
}

void AgentHost::enqueue_locked(const std::string& id, std::shared_ptr<Call> call) {
  if (stopping_) {
    fail(std::move(call), Error(ErrorCode::stopping, "the server is shutting down", id));
    return;
  }
  auto it = agents_.find(id);
  if (it == agents_.end()) {
    fail(std::move(call), unknown_agent_error(id));
    return;
  }
  // A store that cannot write refuses what would change an agent; reads still run.
  if (StateStore* store = store_.load(); store != nullptr && !reads_only(*call)) {
    if (auto failure = store->failure()) {
      fail(std::move(call), store_error(*failure, id, it->second->class_name));
      return;
    }
  }
  mailboxes_.push(*it->second, call);
  watch_enqueue(it->second, call);
  mailboxes_.pump(it->second);
}

ResultPool::Waiter AgentHost::input_waiter(const std::string& agent_id, const std::shared_ptr<Call>& call) {
  Locked lock(*this);
  return input_waiter_locked(agent_id, call);
}

ResultPool::Waiter AgentHost::input_waiter_locked(const std::string& agent_id,
                                                  const std::shared_ptr<Call>& call) {
  std::weak_ptr<Call> weak_call = call;
  std::weak_ptr<AgentSlot> weak_slot;
  if (auto it = agents_.find(agent_id); it != agents_.end()) weak_slot = it->second;
  // Runs without the lock (the pool's waiters do) and takes it.
  return [this, weak_call, weak_slot](const OutcomePtr& input) {
    Locked lock(*this);
    auto c = weak_call.lock();
    if (!c || c->input_ready) return;
    c->input = input;
    c->input_ready = true;
    if (auto slot = weak_slot.lock(); slot && !slot->removed) mailboxes_.pump(slot);
  };
}

void AgentHost::dispatch(const std::shared_ptr<AgentSlot>& slot, std::shared_ptr<Call> call) {
  watch_dispatch(slot, call);
  if (slot->async != nullptr) {
    // Never run agent code here: the caller holds the lock (and may be a worker, or inside
    // another agent's completion). The drain runs it at the top of a loop turn.
    auto run = [this, slot, call = std::move(call)]() mutable {
      runner_.run(std::move(slot), std::move(call));
    };
    if (std::this_thread::get_id() == loop_thread_)
      scheduler_.defer(kj::mv(run));
    else
      bridge_.post(kj::mv(run));
    return;
  }
  std::shared_ptr<AgentSlot> s = slot;
  if (Continuation::take(s, call)) return;  // this worker runs it next
  // Handed to the pool once the lock is released: a worker woken while this thread still holds
  // it tends to need it at once, sleep on it and be woken again (on one CPU, strace showed that
  // on most calls: two more context switches and two more futex calls each).
  defer([this, s = std::move(s), call = std::move(call)]() mutable {
    to_workers(std::move(s), std::move(call));
  });
}

void AgentHost::to_workers(std::shared_ptr<AgentSlot> slot, std::shared_ptr<Call> call) {
  workers_.submit([this, slot = std::move(slot), call = std::move(call)]() mutable {
    worker_loop(std::move(slot), std::move(call));
  });
}

void AgentHost::run_here(const std::string& id, std::shared_ptr<Call> call) {
  Call* mine = call.get();
  std::shared_ptr<AgentSlot> slot;
  std::shared_ptr<Call> taken;
  {
    Continuation here;  // takes the call dispatched while the window is open
    {
      Continuation::Window window;
      Locked lock(*this);
      enqueue_locked(id, std::move(call));
    }  // runs what the enqueue deferred (a failure's waiters), window still open
    slot = std::move(here.slot);
    taken = std::move(here.call);
  }
  if (!slot) return;  // queued behind another call, asynchronous, or failed at once
  if (taken.get() != mine || taken->timeout.count() > 0) {
    // A waiter run above freed another agent's call: not this thread's to run. Or the call has
    // a deadline (its caller's, --call-timeout, --class-call-timeout): a worker runs it, so that
    // the calling thread is free to answer with the timeout while the agent still runs.
    to_workers(std::move(slot), std::move(taken));
    return;
  }
  Continuation next;
  runner_.run(std::move(slot), std::move(taken));
  if (next.slot) to_workers(std::move(next.slot), std::move(next.call));
}

void AgentHost::worker_loop(std::shared_ptr<AgentSlot> slot, std::shared_ptr<Call> call) {
  while (slot) {
    Continuation next;  // filled while the call finishes (finished())
    runner_.run(std::move(slot), std::move(call));
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

bool AgentHost::count_finished_locked(AgentSlot& slot, const Call& call, SpanRecord& span) {
  // An agent's own counts are of the calls that ran its code: a read of its memory (an
  // operator's, a console's) is not one of them.
  if (!reads_only(call)) {
    if (call.out_error)
      ++slot.failed;
    else
      ++slot.completed;
    slot.last_call_unix_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                                 std::chrono::system_clock::now().time_since_epoch())
                                 .count();
  }
  const bool sink = static_cast<bool>(span_sink_);
  const auto now = std::chrono::steady_clock::now();
  stats_.finished(slot, call, now, sink ? &span : nullptr);
  if (spdlog::should_log(spdlog::level::debug)) {
    spdlog::debug(
        "call finished: agent={} class={} kind={}{}{} call_id={} outcome={} "
        "run_ms={:.3f}",
        slot.id, slot.class_name, kind_name(call.kind), call.method.empty() ? "" : " method=", call.method,
        call.call_id.empty() ? "-" : call.call_id,
        call.out_error ? fmt::format("error({})", to_string(call.out_error->code())) : std::string("ok"),
        std::chrono::duration<double>(now - call.started).count() * 1000);
  }
  return sink;
}

void AgentHost::finished(const std::shared_ptr<AgentSlot>& slot, std::shared_ptr<Call> call) {
  SpanRecord span;
  bool sink = false;
  bool counted = false;
  if (EarlyAnswer* early = t_early_answer; early != nullptr && early->call == call.get()) {
    t_early_answer = nullptr;
    if (store_.load() == nullptr) {
      // Counted (and its span kept) before its caller hears of it, so what a caller asks the
      // server right after its answer includes this call; published and pumped after.
      {
        Locked lock(*this);
        sink = count_finished_locked(*slot, *call, span);
        slot->answered_early = true;
        ++answered_early_;
        in_transit_.fetch_add(1);  // until its answer is written
      }
      counted = true;
      KJ_DEFER(in_transit_.fetch_sub(1));
      early->sent = early->send(*call);
    }
  }
  call.reset();  // the mailbox holds it until finish_head()
  // A worker keeps the first blocking call made runnable from here on: its agent's next call
  // when there is one (pumped below, before the waiters run), else a call the waiters free
  // (the next link of a chain). Either way what this call released reaches the loop before
  // anything its agent's next call releases: an agent's outcomes keep their order.
  Continuation::Window window;
  // The store whose commit of the call's change this thread leads (StateStore::submit_to_lead).
  // Kept rather than read again after the unlock: the server's shutdown clears store_ (and then
  // closes the store, which waits for this lead) while workers still finish calls.
  StateStore* lead = nullptr;
  {
    Locked lock(*this);
    call = mailboxes_.finish_head(*slot);
    watch_finish(*slot, *call);
    if (!counted) {
      sink = count_finished_locked(*slot, *call, span);
    } else {
      slot->answered_early = false;
      --answered_early_;
    }
    // With a state store, published once the call's change is committed.
    lead = commit_and_publish(slot, call);
    if (slot->removed)
      destroy_agent(*slot);
    else
      mailboxes_.pump(slot);
  }  // runs the waiters the call released, without the lock
  if (lead != nullptr) {
    // This worker commits the change itself (the store was idle), unless it keeps its agent's
    // next call to run: that call does not wait for the disk, the writer thread does.
    if (Continuation::kept())
      lead->pass_lead();
    else
      lead->lead();
  }
  if (sink) span_sink_(span);  // e.g. --trace-file: I/O without the host lock
}

void AgentHost::publish(const std::shared_ptr<Call>& call) {
  Call& c = *call;
  if (c.expired.load()) return;  // its timeout was published at its deadline
  switch (c.kind) {
    case Call::Kind::reply:
    case Call::Kind::method_async: {
      Outcome o = c.out_error ? Outcome(*c.out_error) : Outcome(std::move(*c.out_msg));
      o.usage = call_usage(c);
      defer(results_.complete(c.call_id, std::move(o)));
      break;
    }
    default:
      break;
  }
  if (c.has_on_done) defer([this, call]() { run_on_done(call); });
}

void AgentHost::run_on_done(std::shared_ptr<Call> call) {
  on_loop([call = std::move(call)]() {
    auto done = kj::mv(call->on_done);
    done(*call);
  });
}

void AgentHost::fail(std::shared_ptr<Call> call, Error error) {
  stats_.failed_without_running(error.agent_class());
  call->out_error = std::move(error);
  publish(call);
}

}  // namespace agentd::detail

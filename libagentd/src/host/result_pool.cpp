#include "result_pool.h"

#include <fmt/format.h>

namespace agentd::detail {

bool ResultPool::add_pending(const std::string& call_id, std::string producer, Waiter* then) {
  if (was_evicted(call_id)) return false;
  auto [it, inserted] = entries_.try_emplace(call_id);
  Entry& e = it->second;
  if (!inserted && (e.announced || e.outcome)) return false;
  if (!inserted) --unknown_waits_;  // a consumer's wait for it ends here
  e.announced = true;
  e.producer = std::move(producer);
  e.since = Clock::now();
  if (then != nullptr) e.waiters.push_back(kj::mv(*then));
  return true;
}

void ResultPool::Ready::append(Ready&& other) {
  if (items_.empty()) {
    items_ = std::move(other.items_);
  } else {
    for (auto& item : other.items_) items_.push_back(std::move(item));
  }
  other.items_.clear();
}

void ResultPool::Ready::run() {
  auto items = std::move(items_);
  items_.clear();
  for (auto& [w, outcome] : items) w(outcome);
}

ResultPool::Ready ResultPool::complete(const std::string& call_id, Outcome outcome) {
  Ready ready;
  auto it = entries_.find(call_id);
  if (it == entries_.end() || it->second.outcome) return ready;  // evicted or finished: none wait
  Entry& e = it->second;
  if (!e.announced) --unknown_waits_;
  e.outcome = std::make_shared<const Outcome>(std::move(outcome));
  e.since = Clock::now();
  finished_order_.emplace_back(&it->first, e.since);
  auto waiters = std::move(e.waiters);
  OutcomePtr out = e.outcome;
  while (finished_order_.size() > limits_.max_size) evict_oldest();
  for (auto& w : waiters) ready.add(kj::mv(w), out);
  return ready;
}

ResultPool::Ready ResultPool::when_ready(const std::string& call_id, Waiter w, bool wait_for_unknown) {
  Ready ready;
  auto it = entries_.find(call_id);
  if (it == entries_.end()) {
    if (!wait_for_unknown || was_evicted(call_id)) {
      ready.add(kj::mv(w), std::make_shared<const Outcome>(gone_error(call_id)));
      return ready;
    }
    it = entries_.try_emplace(call_id).first;
    it->second.since = Clock::now();
    ++unknown_waits_;
  }
  Entry& e = it->second;
  if (e.outcome)
    ready.add(kj::mv(w), e.outcome);
  else
    e.waiters.push_back(kj::mv(w));
  return ready;
}

OutcomePtr ResultPool::peek(const std::string& call_id) const {
  auto it = entries_.find(call_id);
  return it == entries_.end() ? nullptr : it->second.outcome;
}

void ResultPool::evict_oldest() {
  const auto [key, finished] = finished_order_.front();
  finished_order_.pop_front();
  const std::uint64_t hash = id_hash(*key);
  entries_.erase(entries_.find(*key));  // *key is the node's own key: gone from here on
  ++evictions_;
  if (auto forgotten = evicted_.push(hash, finished)) forget_until(*forgotten);
}

bool ResultPool::EvictedIds::contains(std::uint64_t hash) const {
  if (slots_.empty()) return false;  // nothing evicted yet
  const std::uint64_t key = key_of(hash);
  for (std::size_t i = home(key);; i = (i + 1) & (kSlots - 1)) {
    if (slots_[i] == key) return true;
    if (slots_[i] == 0) return false;
  }
}

std::optional<ResultPool::Clock::time_point> ResultPool::EvictedIds::push(std::uint64_t hash,
                                                                          Clock::time_point finished) {
  static_assert((kSlots & (kSlots - 1)) == 0 && kSlots == std::size_t{1} << 17, "home() takes 17 bits");
  const std::uint64_t key = key_of(hash);
  if (slots_.empty()) {
    slots_.assign(kSlots, 0);
    ring_.reserve(kEvictedMemory);
  }
  insert(key);
  if (ring_.size() < kEvictedMemory) {
    ring_.emplace_back(key, finished);
    return std::nullopt;
  }
  auto& oldest = ring_[oldest_];
  erase_one(oldest.first);
  const Clock::time_point forgotten = oldest.second;
  oldest = {key, finished};
  oldest_ = (oldest_ + 1) % kEvictedMemory;
  return forgotten;
}

void ResultPool::EvictedIds::insert(std::uint64_t key) {
  std::size_t i = home(key);
  while (slots_[i] != 0) i = (i + 1) & (kSlots - 1);
  slots_[i] = key;
}

void ResultPool::EvictedIds::erase_one(std::uint64_t key) {
  std::size_t hole = home(key);
  while (slots_[hole] != key) hole = (hole + 1) & (kSlots - 1);  // it is there: the ring holds it
  // Backward shift: each later key of the run that would not be found past the hole moves into it.
  for (std::size_t j = (hole + 1) & (kSlots - 1); slots_[j] != 0; j = (j + 1) & (kSlots - 1)) {
    const std::size_t h = home(slots_[j]);
    // Found from h by probing forward: it may stay at j when h lies cyclically in (hole, j].
    const bool stays = hole < j ? (hole < h && h <= j) : (hole < h || h <= j);
    if (stays) continue;
    slots_[hole] = slots_[j];
    hole = j;
  }
  slots_[hole] = 0;
}

std::optional<std::chrono::milliseconds> ResultPool::forgotten_age(Clock::time_point now) const {
  if (!forgotten_until_) return std::nullopt;
  return std::chrono::duration_cast<std::chrono::milliseconds>(now - *forgotten_until_);
}

void ResultPool::forget_until(Clock::time_point t) {
  if (!forgotten_until_ || t > *forgotten_until_) forgotten_until_ = t;
}

Error ResultPool::gone_error(const std::string& call_id) const {
  if (was_evicted(call_id))
    return Error(ErrorCode::expired,
                 fmt::format("result of call {} expired: evicted from the result pool (limits: "
                             "{} results, {} s); read results sooner or raise --max-pool-size / "
                             "--max-expire-time",
                             call_id, limits_.max_size, limits_.max_age.count() / 1000.0));
  return Error(
      ErrorCode::unknown_call,
      fmt::format("no call {} is known to this server (never made here, or expired long ago)", call_id));
}

ResultPool::Ready ResultPool::sweep(Clock::time_point now) {
  Ready ready;
  while (!finished_order_.empty() && now - finished_order_.front().second >= limits_.max_age) evict_oldest();
  // Consumers waiting for ids no producer announced in time (no walk over the pool without any).
  if (unknown_waits_ == 0) return ready;
  std::vector<std::string> overdue;
  for (auto& [id, e] : entries_)
    if (!e.announced && !e.outcome && now - e.since >= limits_.unknown_wait) overdue.push_back(id);
  for (const auto& id : overdue) {
    auto node = entries_.extract(id);
    --unknown_waits_;
    auto err = std::make_shared<const Outcome>(
        Error::retryable(ErrorCode::unknown_call,
                         fmt::format("no call {} arrived at this server within {} s of being asked for", id,
                                     limits_.unknown_wait.count() / 1000.0)));
    for (auto& w : node.mapped().waiters) ready.add(kj::mv(w), err);
  }
  return ready;
}

}  // namespace agentd::detail

// ResultPool: the results of reply/callAsync calls, keyed by the client-chosen call id.
// Readable many times until evicted by size (oldest finished first) or age.
// Not thread-safe: its owner, the AgentHost, calls it under the host's lock from any thread
// (workers complete results, the loop thread registers waiters). The pool never runs a waiter
// itself: complete(), when_ready() and sweep() return the waiters whose outcome is there (Ready),
// and the owner runs them once it has released its lock (a waiter may call back into it).
#pragma once

#include <agentd/error.h>
#include <agentd/msg.h>

#include <kj/function.h>

#include "outcome.h"

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <variant>
#include <vector>

namespace agentd::detail {

using OutcomePtr = std::shared_ptr<const Outcome>;

class ResultPool {
 public:
  using Clock = std::chrono::steady_clock;
  using Waiter = kj::Function<void(const OutcomePtr&)>;

  struct Limits {
    std::size_t max_size = 8192;  // finished results kept
    std::chrono::milliseconds max_age = std::chrono::seconds(7200);
    std::chrono::milliseconds unknown_wait = std::chrono::seconds(30);  // see when_ready()
  };

  // Waiters with their outcome, to run (in order) by whoever holds them, without its lock.
  class Ready {
   public:
    void add(Waiter w, OutcomePtr outcome) { items_.emplace_back(kj::mv(w), kj::mv(outcome)); }
    void append(Ready&& other);
    bool empty() const { return items_.empty(); }
    std::size_t size() const { return items_.size(); }
    // Runs each waiter once, in the order added; the Ready is empty afterwards.
    void run();

   private:
    std::vector<std::pair<Waiter, OutcomePtr>> items_;
  };

  explicit ResultPool(Limits limits) : limits_(limits) {}

  // A producer announces call_id. Returns false when the id is taken (pending, finished or
  // recently evicted); a consumer that asked for the id before the producer arrived is fine.
  // With then: *then waits for the outcome, as when_ready() would, without a second look-up
  // (moved from only on success; a newly announced id has no outcome, so nothing is ready yet).
  bool add_pending(const std::string& call_id, std::string producer, Waiter* then = nullptr);

  // The producer finished. Returns every waiter, in registration order, to run.
  [[nodiscard]] Ready complete(const std::string& call_id, Outcome outcome);

  // w is to run once the result of call_id is there: returned at once (to run) if it is, else
  // returned by complete() or sweep(). For an id never seen, wait_for_unknown = true waits up to
  // limits.unknown_wait for a producer (calls may arrive on another connection after their
  // consumer); otherwise, and for evicted ids, w gets an error at once.
  [[nodiscard]] Ready when_ready(const std::string& call_id, Waiter w, bool wait_for_unknown);

  // The finished outcome, if any (nullptr when pending, unknown or evicted).
  OutcomePtr peek(const std::string& call_id) const;
  bool contains(const std::string& call_id) const { return entries_.count(call_id) > 0; }

  // Evicts by age and fails overdue waits for unknown ids (returned, to run). Call
  // periodically (about 1/s).
  [[nodiscard]] Ready sweep(Clock::time_point now = Clock::now());

  std::size_t size() const { return entries_.size(); }
  std::size_t finished() const { return finished_order_.size(); }
  std::size_t pending() const { return entries_.size() - finished_order_.size(); }
  std::uint64_t evictions() const { return evictions_; }

  // The pool forgets ids: an evicted id is remembered (answered "expired") until kEvictedMemory
  // later evictions push it out, after which it is as unknown as an id never seen. The horizon
  // is the newest finishing time among the ids forgotten that way (or set by a restart, for
  // what the previous run forgot): an unknown id either never ran here or finished before it.
  // How long ago that was; nullopt while nothing finished has been forgotten.
  std::optional<std::chrono::milliseconds> forgotten_age(Clock::time_point now = Clock::now()) const;
  // A restart: results that finished at or before t are forgotten (only moves it later).
  void forget_until(Clock::time_point t);
  static constexpr std::size_t kEvictedMemory = 65536;
  const Limits& limits() const { return limits_; }

 private:
  struct Entry {
    OutcomePtr outcome;  // null while pending
    std::string producer;
    bool announced = false;  // false: created by a consumer waiting for an unknown id
    Clock::time_point since;
    std::vector<Waiter> waiters;
  };

  // The 64-bit hashes of the last kEvictedMemory evicted ids, each with when it finished, oldest
  // first: a ring, and beside it an open-addressing table (linear probing, at most half full) that
  // answers "is this hash remembered?" from one or two cache lines. Every call asks that (a new id
  // must not be one recently evicted) and every eviction adds one and drops the oldest, so neither
  // allocates: both arrays are made at the first eviction and keep their size.
  class EvictedIds {
   public:
    bool contains(std::uint64_t hash) const;
    // Remembers hash; when kEvictedMemory are remembered already, forgets the oldest and returns
    // when that one finished.
    std::optional<Clock::time_point> push(std::uint64_t hash, Clock::time_point finished);

   private:
    static constexpr std::size_t kSlots = 2 * kEvictedMemory;  // a power of two
    static std::size_t home(std::uint64_t key) {
      return static_cast<std::size_t>((key * 0x9E3779B97F4A7C15ull) >> 47);  // 17 bits: kSlots
    }
    static std::uint64_t key_of(std::uint64_t hash) { return hash == 0 ? 1 : hash; }  // 0: empty slot
    void insert(std::uint64_t key);
    void erase_one(std::uint64_t key);  // one copy: two ids that share a hash are kept twice

    std::vector<std::uint64_t> slots_;
    std::vector<std::pair<std::uint64_t, Clock::time_point>> ring_;  // key, when it finished
    std::size_t oldest_ = 0;                                         // in ring_, once full
  };

  // Evicts the oldest finished entry (finished_order_.front()).
  void evict_oldest();
  static std::uint64_t id_hash(const std::string& call_id) { return std::hash<std::string>{}(call_id); }
  bool was_evicted(const std::string& call_id) const { return evicted_.contains(id_hash(call_id)); }
  Error gone_error(const std::string& call_id) const;

  Limits limits_;
  std::unordered_map<std::string, Entry> entries_;
  // Finished entries, oldest first: each its key in entries_ (a node's key stays where it is
  // until the node is erased, which only evict_oldest() does to a finished entry) and when it
  // finished. No copy of the id: a call's bookkeeping allocates once for its id, in entries_.
  std::deque<std::pair<const std::string*, Clock::time_point>> finished_order_;
  // Recently evicted ids, to tell "expired" from "never existed" (bounded FIFO), kept as 64-bit
  // hashes of the ids: no string per id. The price: a new id whose hash equals one of the
  // kEvictedMemory remembered is refused as taken, odds of 2^-48 per call (once in about 3x10^14
  // calls; an id answered "expired" that never ran here has the same odds).
  EvictedIds evicted_;
  std::optional<Clock::time_point> forgotten_until_;
  std::uint64_t evictions_ = 0;
  // Entries made by when_ready() for an id no producer has announced yet and that have no outcome:
  // what sweep() looks for, so it walks the pool only while there are some.
  std::size_t unknown_waits_ = 0;
};

}  // namespace agentd::detail

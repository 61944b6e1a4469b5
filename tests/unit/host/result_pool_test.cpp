// ResultPool: pending -> complete, waiters, many reads, eviction by size and age, unknown ids,
// duplicate call ids, the bounded memory of evicted ids.
#include "result_pool.h"
#include "test_names.h"

#include <catch2/catch.hpp>

#include <memory>
#include <string>
#include <vector>

using namespace agentd::test;
using agentd::detail::OutcomePtr;
using agentd::detail::ResultPool;

namespace {

ResultPool::Limits limits(std::size_t size, std::chrono::milliseconds age = 3600s,
                          std::chrono::milliseconds unknown_wait = 30s) {
  ResultPool::Limits l;
  l.max_size = size;
  l.max_age = age;
  l.unknown_wait = unknown_wait;
  return l;
}

// Collects what a waiter receives.
struct Seen {
  std::vector<OutcomePtr> got;
  ResultPool::Waiter waiter() {
    return [this](const OutcomePtr& o) { got.push_back(o); };
  }
  const Msg& msg(std::size_t i = 0) const { return std::get<Msg>(*got.at(i)); }
  const Error& error(std::size_t i = 0) const { return std::get<Error>(*got.at(i)); }
};

// Real call ids are 32 hex characters: long enough to live on the heap, unlike "c1".
std::string id(const std::string& short_name) {
  return short_name + std::string(32 - short_name.size(), '0');
}

}  // namespace

TEST_CASE("a pending result reaches every waiter when it completes, in order", "[result_pool]") {
  ResultPool pool(limits(10));
  REQUIRE(pool.add_pending(id("c1"), "agentA"));
  CHECK(pool.pending() == 1);
  CHECK(pool.peek(id("c1")) == nullptr);

  std::vector<int> order;
  Seen a, b;
  pool.when_ready(
          id("c1"),
          [&](const OutcomePtr& o) {
            order.push_back(1);
            a.got.push_back(o);
          },
          false)
      .run();
  pool.when_ready(
          id("c1"),
          [&](const OutcomePtr& o) {
            order.push_back(2);
            b.got.push_back(o);
          },
          false)
      .run();
  CHECK(a.got.empty());

  pool.complete(id("c1"), Msg("agentA", "done")).run();
  CHECK(order == std::vector<int>{1, 2});
  CHECK(a.msg().content == "done");
  CHECK(b.msg().content == "done");
  CHECK(pool.finished() == 1);
  CHECK(pool.pending() == 0);
  REQUIRE(pool.peek(id("c1")) != nullptr);
}

TEST_CASE("a finished result can be read many times, at once", "[result_pool]") {
  ResultPool pool(limits(10));
  pool.add_pending(id("c1"), "a");
  pool.complete(id("c1"), Msg("a", 7)).run();
  Seen s;
  for (int i = 0; i < 3; ++i) pool.when_ready(id("c1"), s.waiter(), false).run();
  REQUIRE(s.got.size() == 3);
  CHECK(s.msg(2).content == 7);
  CHECK(s.got[0] == s.got[2]);  // the same stored outcome
}

TEST_CASE("a failed call's error reaches waiters", "[result_pool]") {
  ResultPool pool(limits(10));
  pool.add_pending(id("c1"), "a");
  Seen s;
  pool.when_ready(id("c1"), s.waiter(), false).run();
  pool.complete(id("c1"), Error(ErrorCode::agent_failed, "boom", "a", "Cls")).run();
  CHECK(s.error().code() == ErrorCode::agent_failed);
  CHECK(s.error().agent_id() == "a");
  // A second completion of the same call is ignored.
  pool.complete(id("c1"), Msg("a", "late")).run();
  Seen again;
  pool.when_ready(id("c1"), again.waiter(), false).run();
  CHECK(again.error().code() == ErrorCode::agent_failed);
}

TEST_CASE("duplicate call ids are refused: pending, finished or evicted", "[result_pool]") {
  ResultPool pool(limits(1));
  CHECK(pool.add_pending(id("c1"), "a"));
  CHECK_FALSE(pool.add_pending(id("c1"), "b"));  // pending
  pool.complete(id("c1"), Msg("a", 1)).run();
  CHECK_FALSE(pool.add_pending(id("c1"), "b"));  // finished
  pool.add_pending(id("c2"), "a");
  pool.complete(id("c2"), Msg("a", 2)).run();  // evicts c1 (size 1)
  CHECK_FALSE(pool.contains(id("c1")));
  CHECK_FALSE(pool.add_pending(id("c1"), "b"));  // evicted, still remembered
}

TEST_CASE("the oldest finished results are evicted beyond max_size, with an expired error", "[result_pool]") {
  ResultPool pool(limits(2));
  for (const std::string& cid : {id("c1"), id("c2"), id("c3")}) {
    pool.add_pending(cid, "a");
    pool.complete(cid, Msg("a", cid)).run();
  }
  CHECK(pool.finished() == 2);
  CHECK(pool.evictions() == 1);
  Seen s;
  pool.when_ready(id("c1"), s.waiter(), false).run();
  CHECK(s.error().code() == ErrorCode::expired);
  CHECK_THAT(s.error().message(), Contains(id("c1")) && Contains("expired"));
  // Waiting for an unknown id does not resurrect an evicted one either.
  Seen w;
  pool.when_ready(id("c1"), w.waiter(), true).run();
  CHECK(w.error().code() == ErrorCode::expired);
  Seen ok;
  pool.when_ready(id("c3"), ok.waiter(), false).run();
  CHECK(ok.msg().content == id("c3"));
}

TEST_CASE("pending results are never evicted by size", "[result_pool]") {
  ResultPool pool(limits(1));
  pool.add_pending(id("slow"), "a");
  for (const std::string& cid : {id("f1"), id("f2"), id("f3")}) {
    pool.add_pending(cid, "a");
    pool.complete(cid, Msg("a", cid)).run();
  }
  Seen s;
  pool.when_ready(id("slow"), s.waiter(), false).run();
  CHECK(s.got.empty());
  pool.complete(id("slow"), Msg("a", "finally")).run();
  CHECK(s.msg().content == "finally");
}

TEST_CASE("finished results expire by age on sweep", "[result_pool]") {
  ResultPool pool(limits(100, 10s));
  pool.add_pending(id("old"), "a");
  pool.complete(id("old"), Msg("a", 1)).run();
  auto t0 = ResultPool::Clock::now();
  pool.sweep(t0 + 1s).run();
  CHECK(pool.contains(id("old")));
  pool.sweep(t0 + 11s).run();
  CHECK_FALSE(pool.contains(id("old")));
  Seen s;
  pool.when_ready(id("old"), s.waiter(), false).run();
  CHECK(s.error().code() == ErrorCode::expired);
}

TEST_CASE("an unknown id fails at once unless the caller waits for its producer", "[result_pool]") {
  ResultPool pool(limits(10, 3600s, 5s));
  Seen now;
  pool.when_ready(id("never"), now.waiter(), false).run();
  CHECK(now.error().code() == ErrorCode::unknown_call);

  // A consumer may arrive before its producer (another connection): it waits.
  Seen early;
  pool.when_ready(id("later"), early.waiter(), true).run();
  CHECK(early.got.empty());
  CHECK(pool.add_pending(id("later"), "a"));  // the producer is not a duplicate
  pool.complete(id("later"), Msg("a", "here")).run();
  CHECK(early.msg().content == "here");

  // No producer within unknown_wait: a retryable unknown_call.
  Seen late;
  pool.when_ready(id("ghost"), late.waiter(), true).run();
  auto t0 = ResultPool::Clock::now();
  pool.sweep(t0 + 1s).run();
  CHECK(late.got.empty());
  pool.sweep(t0 + 6s).run();
  REQUIRE(late.got.size() == 1);
  CHECK(late.error().code() == ErrorCode::unknown_call);
  CHECK(late.error().retryable());
  CHECK_THAT(late.error().message(), Contains(id("ghost")));
}

TEST_CASE("an evicted id is remembered for kEvictedMemory evictions, then forgotten behind the horizon",
          "[result_pool]") {
  ResultPool pool(limits(1));
  CHECK_FALSE(pool.forgotten_age());
  const std::size_t n = ResultPool::kEvictedMemory + 2;
  auto eid = [](std::size_t i) { return id("e" + std::to_string(i) + "-"); };  // "e1-", not "e10"
  std::size_t added = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const std::string cid = eid(i);
    added += pool.add_pending(cid, "a");
    pool.complete(cid, Msg("a", static_cast<int>(i))).run();
  }
  REQUIRE(added == n);
  // n finished, one kept: n - 1 evicted, of which the newest kEvictedMemory are remembered.
  CHECK(pool.evictions() == n - 1);
  CHECK(pool.finished() == 1);
  Seen first;
  pool.when_ready(eid(0), first.waiter(), false).run();
  CHECK(first.error().code() == ErrorCode::unknown_call);  // forgotten: as if never seen
  CHECK(pool.add_pending(eid(0), "b"));                    // and its id can be used again
  Seen second;
  pool.when_ready(eid(1), second.waiter(), false).run();
  CHECK(second.error().code() == ErrorCode::expired);  // the oldest still remembered
  CHECK_FALSE(pool.add_pending(eid(1), "b"));
  Seen newest;
  pool.when_ready(eid(n - 1), newest.waiter(), false).run();
  CHECK(newest.msg().content == static_cast<int>(n - 1));
  CHECK(pool.forgotten_age().has_value());  // forgetting e0 moved the horizon
}

TEST_CASE("after many evictions exactly the newest kEvictedMemory evicted ids answer expired",
          "[result_pool]") {
  // The remembered hashes live in one table that drops its oldest on every eviction: lookups of
  // the ones kept must survive the removals around them.
  ResultPool pool(limits(1));
  const std::size_t memory = ResultPool::kEvictedMemory;
  const std::size_t n = 2 * memory + memory / 2 + 1;  // the ring goes round twice and a half
  auto eid = [](std::size_t i) { return id("w" + std::to_string(i) + "-"); };
  for (std::size_t i = 0; i < n; ++i) {
    REQUIRE(pool.add_pending(eid(i), "a"));
    pool.complete(eid(i), Msg("a", "x")).run();
  }
  // Evicted: 0 .. n-2 (n-1 is kept); remembered: the newest `memory` of those.
  const std::size_t first_kept = n - 1 - memory;
  std::size_t expired = 0, unknown = 0, wrong = 0;
  for (std::size_t i = 0; i + 1 < n; ++i) {
    Seen s;
    pool.when_ready(eid(i), s.waiter(), false).run();
    const ErrorCode code = s.error().code();
    expired += code == ErrorCode::expired;
    unknown += code == ErrorCode::unknown_call;
    wrong += (i >= first_kept) != (code == ErrorCode::expired);
  }
  CHECK(expired == memory);
  CHECK(unknown == n - 1 - memory);
  CHECK(wrong == 0);
}

TEST_CASE("sweep fails a consumer's overdue wait after other waits for unknown ids have ended",
          "[result_pool]") {
  ResultPool pool(limits(10, 3600s, 5s));
  // A wait for an unknown id ends when its producer arrives...
  Seen early;
  pool.when_ready(id("x"), early.waiter(), true).run();
  CHECK(pool.add_pending(id("x"), "a"));
  pool.complete(id("x"), Msg("a", "x")).run();
  CHECK(early.msg().content == "x");
  // ...or when sweep fails it; a later wait is still found by the next sweeps.
  auto t0 = ResultPool::Clock::now();
  Seen gone;
  pool.when_ready(id("y"), gone.waiter(), true).run();
  pool.sweep(t0 + 6s).run();
  REQUIRE(gone.got.size() == 1);
  Seen late;
  pool.when_ready(id("z"), late.waiter(), true).run();
  pool.sweep(ResultPool::Clock::now() + 1s).run();
  CHECK(late.got.empty());
  pool.sweep(ResultPool::Clock::now() + 6s).run();
  REQUIRE(late.got.size() == 1);
  CHECK(late.error().code() == ErrorCode::unknown_call);
  CHECK(pool.pending() == 0);  // the overdue waits left the pool
}

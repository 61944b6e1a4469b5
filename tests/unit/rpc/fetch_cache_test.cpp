// FetchCache: what a server keeps of the results it fetched from other servers, bounded by
// count and by bytes, the oldest dropped first.
#include "fetch_cache.h"

#include <catch2/catch.hpp>

#include <memory>
#include <string>

using namespace agentd;
using namespace agentd::detail;

namespace {

OutcomePtr result(const std::string& text) { return std::make_shared<const Outcome>(Msg("origin", text)); }

std::string text_of(const FetchCache& cache, const std::string& key) {
  const OutcomePtr* kept = cache.find(key);
  return kept ? std::get<Msg>(**kept).text() : std::string("(none)");
}

}  // namespace

TEST_CASE("the fetch cache keeps results until its count bound, dropping the oldest", "[fetch_cache]") {
  FetchCache cache(3, 1 << 20, 1 << 20);
  for (int i = 0; i < 5; ++i) cache.insert("k" + std::to_string(i), result("r" + std::to_string(i)), 100);
  CHECK(cache.size() == 3);
  CHECK(cache.bytes() == 300);
  CHECK(text_of(cache, "k0") == "(none)");
  CHECK(text_of(cache, "k1") == "(none)");
  CHECK(text_of(cache, "k2") == "r2");
  CHECK(text_of(cache, "k4") == "r4");
}

TEST_CASE("the fetch cache holds at most its bytes, however few the results", "[fetch_cache]") {
  // 1 MiB results under a 4 MiB bound: four fit, the fifth pushes out the first.
  FetchCache cache(1024, 4 << 20, 4 << 20);
  for (int i = 0; i < 5; ++i) cache.insert("k" + std::to_string(i), result("r" + std::to_string(i)), 1 << 20);
  CHECK(cache.size() == 4);
  CHECK(cache.bytes() == 4u << 20);
  CHECK(text_of(cache, "k0") == "(none)");
  CHECK(text_of(cache, "k1") == "r1");
  // A result over a quarter of the bound is not kept, and pushes nothing out.
  cache.insert("huge", result("h"), (1 << 20) + 1);
  CHECK(text_of(cache, "huge") == "(none)");
  CHECK(cache.size() == 4);
  CHECK(cache.bytes() == 4u << 20);
}

TEST_CASE("a result kept again under its key replaces the old one and is the newest", "[fetch_cache]") {
  FetchCache cache(2, 1 << 20, 1 << 20);
  cache.insert("a", result("a1"), 10);
  cache.insert("b", result("b1"), 10);
  cache.insert("a", result("a2"), 30);  // now b is the oldest
  CHECK(cache.size() == 2);
  CHECK(cache.bytes() == 40);
  CHECK(text_of(cache, "a") == "a2");
  cache.insert("c", result("c1"), 10);
  CHECK(text_of(cache, "b") == "(none)");
  CHECK(text_of(cache, "a") == "a2");  // its first insertion's place in the order is not its own
  CHECK(text_of(cache, "c") == "c1");
  CHECK(cache.bytes() == 40);
  // Many replacements of one key do not grow the bookkeeping without bound.
  for (int i = 0; i < 10000; ++i) cache.insert("a", result("a"), 10);
  CHECK(cache.size() == 2);
  CHECK(cache.bytes() == 20);
}

TEST_CASE("a result over the entry bound is not kept, and pushes nothing out", "[fetch_cache]") {
  // What a server keeps by default: results up to 256 KiB.
  FetchCache cache(1024, 64 << 20, 256 << 10);
  cache.insert("small", result("s"), 1000);
  cache.insert("at", result("a"), 256 << 10);
  cache.insert("big", result("b"), (256 << 10) + 1);
  CHECK(text_of(cache, "small") == "s");
  CHECK(text_of(cache, "at") == "a");
  CHECK(text_of(cache, "big") == "(none)");
  CHECK(cache.size() == 2);
}

// Streamed replies (AgentRef::reply_stream, Agent::emit_chunk) against real as_server processes:
// chunk order, the whole message for get() and for consumers on the same and another server,
// a failure mid-stream, the callback form, many streams at once, and local mode.
#include "server_process.h"
#include "test_names.h"

#include <agentd/client.h>

#include <catch2/catch.hpp>
#include <error_of.h>

#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

using namespace agentd::test;

namespace {

// "0 1 2 ... n-1 " as StreamEchoAgent builds it from {"count": n}.
std::string counted(int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += std::to_string(i) + " ";
  return out;
}

std::vector<std::string> read_all(const Placeholder& p) {
  std::vector<std::string> out;
  for (const std::string& c : p.chunks()) out.push_back(c);
  return out;
}

}  // namespace

TEST_CASE("a streamed reply's chunks arrive in order and get() still returns the whole message",
          "[streaming]") {
  auto s = ServerProcess::start(standard_args());
  auto c = s->connect();
  auto a = c.create_agent("StreamEchoAgent", "S");

  SECTION("many chunks, read with the range") {
    constexpr int kChunks = 5000;
    auto p = a.reply_stream(Msg("user", Value{{"count", kChunks}}));
    auto chunks = read_all(p);
    REQUIRE(chunks.size() == kChunks);
    for (int i = 0; i < kChunks; ++i) REQUIRE(chunks[i] == std::to_string(i) + " ");
    CHECK(p.get().content == counted(kChunks));
    CHECK(p.get().name == "S");
    CHECK_FALSE(p.next_chunk().has_value());  // the stream stays ended
  }

  SECTION("chunks spread over time, read one by one") {
    auto p = a.reply_stream(Msg("user", Value{{"count", 5}, {"gap_ms", 20}}));
    for (int i = 0; i < 5; ++i) {
      auto chunk = p.next_chunk();
      REQUIRE(chunk.has_value());
      CHECK(*chunk == std::to_string(i) + " ");
    }
    CHECK_FALSE(p.next_chunk().has_value());
    CHECK(p.get().content == counted(5));
  }

  SECTION("text is streamed word by word") {
    auto p = a.reply_stream(Msg("user", "the quick brown fox"));
    CHECK(read_all(p) == std::vector<std::string>{"the ", "quick ", "brown ", "fox"});
    CHECK(p.get().content == "the quick brown fox");
  }

  SECTION("a plain reply carries no chunks: the agent's are dropped") {
    auto p = a.reply(Msg("user", Value{{"count", 100}}));
    CHECK(p.get().content == counted(100));
    CHECK_FALSE(p.next_chunk().has_value());
  }

  SECTION("an agent that emits nothing ends its stream with its result") {
    auto e = c.create_agent("EchoAgent", "E");
    auto p = e.reply_stream(Msg("user", "quiet"));
    CHECK(read_all(p).empty());
    CHECK(p.get().content == "quiet");
  }

  SECTION("the callback gets every chunk, in order, before the result") {
    std::mutex mu;
    std::vector<std::string> got;
    auto p = a.reply_stream(Msg("user", Value{{"count", 300}}));
    p.on_chunk([&](std::string_view chunk) {
      std::lock_guard lock(mu);
      got.emplace_back(chunk);
    });
    CHECK(p.get().content == counted(300));
    // Registered before any chunk could arrive, and chunks are handed over before the result.
    std::lock_guard lock(mu);
    REQUIRE(got.size() == 300);
    for (int i = 0; i < 300; ++i) REQUIRE(got[i] == std::to_string(i) + " ");
  }

  SECTION("a callback set late first gets the chunks already there") {
    auto p = a.reply_stream(Msg("user", Value{{"count", 50}}));
    CHECK(p.get().content == counted(50));
    std::mutex mu;
    std::string joined;
    p.on_chunk([&](std::string_view chunk) {
      std::lock_guard lock(mu);
      joined += chunk;
    });
    CHECK(wait_until(
        [&] {
          std::lock_guard lock(mu);
          return joined == counted(50);
        },
        10s));
    CHECK_FALSE(p.next_chunk().has_value());  // the callback took them
  }
}

TEST_CASE("a failure mid-stream reaches the reader after the chunks sent before it", "[streaming]") {
  auto s1 = ServerProcess::start(standard_args());
  auto s2 = ServerProcess::start(standard_args());
  auto c1 = s1->connect();
  auto c2 = s2->connect();
  auto a = c1.create_agent("StreamEchoAgent", "S");
  auto p = a.reply_stream(Msg("user", Value{{"count", 10}, {"fail_after", 4}}));
  auto consumer = c2.create_agent("TrailAgent", "T");
  auto q = consumer.reply(p);

  for (int i = 0; i < 4; ++i) {
    auto chunk = p.next_chunk();
    REQUIRE(chunk.has_value());
    CHECK(*chunk == std::to_string(i) + " ");
  }
  auto e = error_of([&] { p.next_chunk(); });
  CHECK(e.code() == ErrorCode::agent_failed);
  CHECK(e.agent_id() == a.id());
  CHECK_THAT(e.message(), Catch::Contains("asked to fail after 4 chunks"));
  CHECK(error_of([&] { p.get(); }).code() == ErrorCode::agent_failed);
  // The consumer on the other server gets the producer's error, not a partial message.
  auto ce = error_of([&] { q.get(); });
  CHECK(ce.code() == ErrorCode::agent_failed);
  CHECK(ce.agent_id() == a.id());
  // The agent stays usable, and so does its stream.
  auto again = a.reply_stream(Msg("user", "still here"));
  CHECK(read_all(again) == std::vector<std::string>{"still ", "here"});
}

TEST_CASE("consumers of a streamed reply, on the same and on another server, get the whole message",
          "[streaming][peer]") {
  auto s1 = ServerProcess::start(standard_args());
  auto s2 = ServerProcess::start(standard_args());
  auto c1 = s1->connect();
  auto c2 = s2->connect();
  auto a = c1.create_agent("StreamEchoAgent", "S");
  auto here = c1.create_agent("TrailAgent", "H");
  auto there = c2.create_agent("TrailAgent", "T");

  auto p = a.reply_stream(Msg("user", Value{{"count", 200}, {"gap_ms", 1}}));
  auto q_here = here.reply(p);
  auto q_there = there.reply(p);
  // A streamed reply passed on is streamed too: its chunks reach this program.
  auto r = c2.create_agent("StreamEchoAgent", "S2").reply_stream(q_there);

  auto chunks = read_all(p);
  CHECK(chunks.size() == 200);
  CHECK(q_here.get().content == counted(200) + ">H");
  CHECK(q_there.get().content == counted(200) + ">T");
  std::string joined;
  for (const auto& c : read_all(r)) joined += c;
  CHECK(joined == counted(200) + ">T");
  CHECK(r.get().content == joined);
}

TEST_CASE("many streams at once keep each one's chunks apart and in order", "[streaming]") {
  auto s = ServerProcess::start(standard_args());
  auto c = s->connect();
  constexpr int kAgents = 20;
  constexpr int kChunks = 200;
  std::vector<Placeholder> ps;
  for (int i = 0; i < kAgents; ++i)
    ps.push_back(c.create_agent("StreamEchoAgent", "S" + std::to_string(i))
                     .reply_stream(Msg("user", Value{{"count", kChunks + i}})));
  // Read them from several threads at once.
  std::vector<std::thread> readers;
  std::vector<std::string> joined(kAgents);
  for (int i = 0; i < kAgents; ++i)
    readers.emplace_back([&, i] {
      for (const auto& chunk : ps[i].chunks()) joined[i] += chunk;
    });
  for (auto& t : readers) t.join();
  for (int i = 0; i < kAgents; ++i) {
    CHECK(joined[i] == counted(kChunks + i));
    CHECK(ps[i].get().content == joined[i]);
  }
}

TEST_CASE("streamed replies in local mode", "[streaming][local]") {
  agentd::LocalOptions lo;
  lo.plugins = {echo_plugin()};
  auto local = Client::local(lo);
  auto a = local.create_agent("StreamEchoAgent", "S");
  auto p = a.reply_stream(Msg("user", Value{{"count", 1000}}));
  auto chunks = read_all(p);
  REQUIRE(chunks.size() == 1000);
  CHECK(chunks[999] == "999 ");
  CHECK(p.get().content == counted(1000));

  auto f = a.reply_stream(Msg("user", Value{{"count", 3}, {"fail_after", 2}}));
  CHECK(*f.next_chunk() == "0 ");
  CHECK(*f.next_chunk() == "1 ");
  CHECK(error_of([&] { f.next_chunk(); }).code() == ErrorCode::agent_failed);
}

TEST_CASE("a chunk bigger than one batch is split, its text intact", "[streaming]") {
  auto s = ServerProcess::start(standard_args());
  auto c = s->connect();
  auto a = c.create_agent("StreamEchoAgent", "S");
  // One word of 20 MiB: one emit_chunk, more than two 8 MiB messages' worth.
  std::string big(20 << 20, 'x');
  auto p = a.reply_stream(Msg("user", big));
  std::string joined;
  std::size_t n = 0;
  for (const auto& chunk : p.chunks()) {
    joined += chunk;
    ++n;
  }
  CHECK(n >= 3);
  CHECK(joined.size() == big.size());
  CHECK(joined == big);
}

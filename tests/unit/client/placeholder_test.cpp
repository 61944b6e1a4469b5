// agentd::Placeholder (libagentd/src/client/placeholder): the future result of a reply, through
// the public API of a Client whose agents run in this process (Client::local), so that the test
// holds the agent's code with a gate and sees what a waiting caller sees.
#include "error_of.h"
#include "gate.h"

#include <agentd/client.h>

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

using namespace agentd;
using agentd::test::error_of;
using Catch::Matchers::Contains;

namespace {

agentd::test::Gate g_gate;  // GatedAgent's replies and ChunkAgent's chunks wait on it

class GatedAgent : public Agent {
 public:
  using Agent::Agent;
  Msg reply(const Msg& x) override {
    g_gate.wait();
    return Msg(name(), x.text());
  }
};

// Emits each character of its input as a chunk, then answers with the whole input.
class ChunkAgent : public Agent {
 public:
  using Agent::Agent;
  Msg reply(const Msg& x) override {
    g_gate.wait();
    for (char c : x.text()) emit_chunk(std::string(1, c));
    if (x.text() == "fail") throw std::runtime_error("chunked and failed");
    return Msg(name(), x.text());
  }
};

class ThrowingAgent : public Agent {
 public:
  using Agent::Agent;
  Msg reply(const Msg&) override { throw std::runtime_error("no answer from me"); }
};

LocalOptions placeholder_options() {
  LocalOptions o;
  o.classes = {agent_class<GatedAgent>("GatedAgent"), agent_class<ChunkAgent>("ChunkAgent"),
               agent_class<ThrowingAgent>("ThrowingAgent")};
  o.max_workers = 4;
  return o;
}

// Opens the gate when the test ends, before the client (whose server waits for its workers).
struct OpenGateAtEnd {
  OpenGateAtEnd() { g_gate.set(true); }
  ~OpenGateAtEnd() { g_gate.set(true); }
};

}  // namespace

TEST_CASE(
    "get(timeout) on an unfinished call throws a retryable timeout naming the call, and "
    "the result can still be got later",
    "[client][placeholder]") {
  OpenGateAtEnd open_at_end;
  auto client = Client::local(placeholder_options());
  auto a = client.create_agent("GatedAgent", "g");
  g_gate.set(false);
  Placeholder p = a.reply(Msg("user", "late", "user"));

  Error e = error_of([&] { p.get(std::chrono::milliseconds(50)); });
  CHECK(e.code() == ErrorCode::timeout);
  CHECK(e.retryable());
  CHECK(e.agent_id() == a.id());
  CHECK_THAT(e.message(), Contains(p.call_id()));
  CHECK_THAT(e.message(), Contains("50 ms"));

  g_gate.set(true);
  CHECK(p.get().text() == "late");
  // A copy shares the result.
  Placeholder copy = p;
  CHECK(copy.get().text() == "late");
  CHECK(copy.call_id() == p.call_id());
}

TEST_CASE("a failed call's get() throws agent_failed naming the agent and its exception",
          "[client][placeholder]") {
  auto client = Client::local(placeholder_options());
  auto a = client.create_agent("ThrowingAgent", "t");
  Placeholder p = a.reply(Msg("user", "x", "user"));
  Error e = error_of([&] { p.get(); });
  CHECK(e.code() == ErrorCode::agent_failed);
  CHECK(e.agent_id() == a.id());
  CHECK_THAT(e.message(), Contains("no answer from me"));
  // Every get() throws the same error.
  CHECK(error_of([&] { p.get(); }).code() == ErrorCode::agent_failed);
}

TEST_CASE(
    "on_chunk set before the result arrives has seen every chunk, in order, when get() "
    "returns",
    "[client][placeholder]") {
  OpenGateAtEnd open_at_end;
  auto client = Client::local(placeholder_options());
  auto a = client.create_agent("ChunkAgent", "c");
  g_gate.set(false);  // no chunk is emitted before on_chunk is set
  Placeholder p = a.reply_stream(Msg("user", "abcde", "user"));
  auto seen = std::make_shared<std::vector<std::string>>();
  auto mu = std::make_shared<std::mutex>();
  p.on_chunk([seen, mu](std::string_view chunk) {
    std::lock_guard lock(*mu);
    seen->emplace_back(chunk);
  });
  g_gate.set(true);
  CHECK(p.get().text() == "abcde");
  {
    std::lock_guard lock(*mu);
    CHECK(*seen == std::vector<std::string>{"a", "b", "c", "d", "e"});
  }
  // The callback took the chunks: none is left for next_chunk().
  CHECK_FALSE(p.next_chunk(std::chrono::seconds(10)));
}

TEST_CASE(
    "next_chunk() reads a streamed reply's chunks in order, then nullopt, or the call's "
    "error after the chunks sent before it failed",
    "[client][placeholder]") {
  auto client = Client::local(placeholder_options());
  auto a = client.create_agent("ChunkAgent", "c");

  SECTION("a reply that succeeds") {
    Placeholder p = a.reply_stream(Msg("user", "xyz", "user"));
    std::vector<std::string> chunks;
    for (const std::string& c : p.chunks()) chunks.push_back(c);
    CHECK(chunks == std::vector<std::string>{"x", "y", "z"});
    CHECK_FALSE(p.next_chunk(std::chrono::seconds(10)));
    CHECK(p.get().text() == "xyz");
  }
  SECTION("a reply that fails after its chunks") {
    Placeholder p = a.reply_stream(Msg("user", "fail", "user"));
    std::vector<std::string> chunks;
    Error e = error_of([&] {
      while (auto c = p.next_chunk(std::chrono::seconds(10))) chunks.push_back(*c);
    });
    CHECK(chunks == std::vector<std::string>{"f", "a", "i", "l"});
    CHECK(e.code() == ErrorCode::agent_failed);
    CHECK_THAT(e.message(), Contains("chunked and failed"));
  }
  SECTION("a reply that is not streamed has no chunks") {
    Placeholder p = a.reply(Msg("user", "abc", "user"));
    CHECK(p.get().text() == "abc");
    CHECK_FALSE(p.next_chunk(std::chrono::seconds(10)));
  }
}

TEST_CASE("next_chunk(timeout) with no chunk coming throws a retryable timeout", "[client][placeholder]") {
  OpenGateAtEnd open_at_end;
  auto client = Client::local(placeholder_options());
  auto a = client.create_agent("ChunkAgent", "c");
  g_gate.set(false);
  Placeholder p = a.reply_stream(Msg("user", "ab", "user"));
  Error e = error_of([&] { p.next_chunk(std::chrono::milliseconds(30)); });
  CHECK(e.code() == ErrorCode::timeout);
  CHECK(e.retryable());
  CHECK_THAT(e.message(), Contains(p.call_id()));
  g_gate.set(true);
  CHECK(p.next_chunk(std::chrono::seconds(10)) == std::optional<std::string>("a"));
  CHECK(p.get().text() == "ab");
}

TEST_CASE(
    "on_ready runs once the result is there (on the receiving thread), or at once when it is "
    "there already, for a result and for an error alike",
    "[client][placeholder]") {
  OpenGateAtEnd open_at_end;
  auto client = Client::local(placeholder_options());
  auto a = client.create_agent("GatedAgent", "g");
  g_gate.set(false);
  Placeholder p = a.reply(Msg("user", "soon", "user"));

  std::mutex mu;
  std::condition_variable cv;
  int ran = 0;
  bool ready_inside = false;
  p.on_ready([&] {
    // get() must not block here: the result is in.
    bool ready = p.get(std::chrono::milliseconds(0)).text() == "soon";
    std::lock_guard lock(mu);
    ready_inside = ready;
    ++ran;
    cv.notify_all();
  });
  {
    std::lock_guard lock(mu);
    CHECK(ran == 0);  // not before the agent answered
  }
  g_gate.set(true);
  {
    std::unique_lock lock(mu);
    REQUIRE(cv.wait_for(lock, std::chrono::seconds(30), [&] { return ran == 1; }));
    CHECK(ready_inside);
  }

  // Registered after the result came: runs now, on this thread.
  bool now = false;
  p.on_ready([&] { now = true; });
  CHECK(now);

  auto t = client.create_agent("ThrowingAgent", "t");
  Placeholder failed = t.reply(Msg("user", "x", "user"));
  std::atomic<bool> failed_ready{false};
  failed.on_ready([&] { failed_ready = true; });
  CHECK(error_of([&] { failed.get(); }).code() == ErrorCode::agent_failed);
  // get() returned the error; on_ready ran before or as it did.
  for (int i = 0; i < 3000 && !failed_ready; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  CHECK(failed_ready);
}

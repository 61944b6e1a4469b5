// The batched call path: Client::create_agents (windowed bulk creation, all or nothing), many
// calls gathered per loop turn into one Session.submit (results right, per-agent order kept,
// other requests flushing the batch first), results above the inline limit read once. The
// Session / CallSink wire contract driven directly is session_wire_test.cpp.
#include "blob.h"
#include "raw_login.h"
#include "server_process.h"
#include "value_codec.h"
#include "test_names.h"

#include <agentd/client.h>

#include <capnp/rpc-twoparty.h>
#include <catch2/catch.hpp>
#include <error_of.h>
#include <kj/async-io.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

using namespace agentd::test;

namespace {

struct BatchServed {
  std::unique_ptr<ServerProcess> server = ServerProcess::start(standard_args());
  Client client = server->connect();
};

std::vector<std::string> ids_of(const std::vector<agentd::AgentInfo>& list) {
  std::vector<std::string> ids;
  for (const auto& a : list) ids.push_back(a.id);
  return ids;
}

}  // namespace

// ---- Client::create_agents ----

TEST_CASE("create_agents makes N callable agents named prefix + index, with the args",
          "[batch][create_agents]") {
  BatchServed s;
  constexpr std::size_t kCount = 300;
  auto agents = s.client.create_agents("EchoAgent", kCount, Value{{"prefix", "p:"}}, "echo-");
  REQUIRE(agents.size() == kCount);
  std::set<std::string> ids;
  for (std::size_t i = 0; i < kCount; ++i) {
    CHECK(agents[i].name() == "echo-" + std::to_string(i));
    CHECK(agents[i].class_name() == "EchoAgent");
    CHECK(agents[i].id().size() == 32);
    ids.insert(agents[i].id());
  }
  CHECK(ids.size() == kCount);  // all distinct

  // Every one answers, under its own name, with the args it was given.
  std::vector<Placeholder> answers;
  for (auto& a : agents) answers.push_back(a.reply(Msg("user", "x")));
  for (std::size_t i = 0; i < kCount; ++i) {
    auto m = answers[i].get();
    CHECK(m.content == "p:x");
    CHECK(m.name == "echo-" + std::to_string(i));
  }

  // The server lists exactly these, with the names and class.
  auto list = s.client.list_agents();
  REQUIRE(list.size() == kCount);
  std::map<std::string, std::string> name_by_id;
  for (const auto& a : list) {
    CHECK(a.class_name == "EchoAgent");
    name_by_id[a.id] = a.name;
  }
  for (std::size_t i = 0; i < kCount; ++i) CHECK(name_by_id[agents[i].id()] == "echo-" + std::to_string(i));
  CHECK(s.client.info().agent_count == kCount);
  // Reached by id like any other agent.
  CHECK(s.client.agent(agents[7].id()).name() == "echo-7");
}

TEST_CASE("create_agents beyond its in-flight window makes every agent", "[batch][create_agents]") {
  BatchServed s;
  // More than the 2048 creations the client keeps in flight: the later ones are sent as the
  // earlier ones are answered.
  constexpr std::size_t kCount = 2500;
  auto agents = s.client.create_agents("TrailAgent", kCount, Value::object(), "t");
  REQUIRE(agents.size() == kCount);
  CHECK(s.client.info().agent_count == kCount);
  std::vector<Placeholder> answers;
  for (auto& a : agents) answers.push_back(a.reply(Msg("user", "s")));
  std::size_t right = 0;
  for (std::size_t i = 0; i < kCount; ++i)
    if (answers[i].get().content == "s>t" + std::to_string(i)) ++right;
  CHECK(right == kCount);
}

TEST_CASE("create_agents without a prefix names agents by their ids, and zero makes none",
          "[batch][create_agents]") {
  BatchServed s;
  auto agents = s.client.create_agents("TrailAgent", 5);
  REQUIRE(agents.size() == 5);
  for (auto& a : agents) {
    CHECK(a.name() == a.id());
    CHECK(a.reply(Msg("user", "x")).get().content == "x>" + a.id());
  }
  CHECK(s.client.create_agents("TrailAgent", 0, Value::object(), "none").empty());
  CHECK(s.client.list_agents().size() == 5);
}

TEST_CASE("create_agents of an unknown class throws unknown_class and makes nothing",
          "[batch][create_agents]") {
  BatchServed s;
  s.client.create_agent("EchoAgent", "keep", Value::object(), "keep");
  auto e = error_of([&] { s.client.create_agents("NoSuchAgent", 50, Value::object(), "n"); });
  CHECK(e.code() == ErrorCode::unknown_class);
  CHECK_THAT(e.message(), Contains("NoSuchAgent") && Contains("0 were made and deleted again"));
  CHECK(ids_of(s.client.list_agents()) == std::vector<std::string>{"keep"});
  CHECK(s.client.info().agent_count == 1);
}

TEST_CASE("create_agents whose every constructor throws fails with bad_args, leaving nothing",
          "[batch][create_agents]") {
  BatchServed s;
  s.client.create_agent("EchoAgent", "keep", Value::object(), "keep");
  auto e = error_of([&] { s.client.create_agents("FlakyAgent", 20, Value{{"fail_construct", true}}, "f"); });
  CHECK(e.code() == ErrorCode::bad_args);
  CHECK(e.agent_class() == "FlakyAgent");
  CHECK_THAT(e.message(),
             Contains("asked to fail in the constructor") && Contains("0 were made and deleted again"));
  CHECK(ids_of(s.client.list_agents()) == std::vector<std::string>{"keep"});
  // Bad args of the framework's own check fail the same way.
  auto bad = error_of([&] { s.client.create_agents("EchoAgent", 3, Value{{"sleep_ms", "soon"}}, "e"); });
  CHECK(bad.code() == ErrorCode::bad_args);
  CHECK_THAT(bad.message(), Contains("sleep_ms must be an integer"));
  CHECK(s.client.info().agent_count == 1);
}

TEST_CASE("create_agents with some failing constructors deletes the agents it made",
          "[batch][create_agents]") {
  BatchServed s;
  for (const char* id : {"a", "b", "c"}) s.client.create_agent("TrailAgent", id, Value::object(), id);
  const auto before = ids_of(s.client.list_agents());
  REQUIRE(before.size() == 3);

  // p31 fails at once, p7 only after 300 ms: the error thrown is the first by index (p7), and
  // 48 of the 50 were made, then deleted again.
  Value args{{"refuse", {{"p7", 300}, {"p31", 0}}}};
  auto e = error_of([&] { s.client.create_agents("PickyAgent", 50, args, "p"); });
  CHECK(e.code() == ErrorCode::bad_args);
  CHECK(e.agent_class() == "PickyAgent");
  CHECK_THAT(e.message(), Contains("refusing to be p7"));
  CHECK_THAT(e.message(), Contains("48 were made and deleted again"));
  CHECK_THAT(e.message(), Contains("50"));
  // The server is as it was.
  CHECK(ids_of(s.client.list_agents()) == before);
  CHECK(s.client.info().agent_count == 3);

  // The same batch without the refusals succeeds.
  auto ok = s.client.create_agents("PickyAgent", 50, Value::object(), "p");
  CHECK(ok.size() == 50);
  CHECK(ok[31].reply(Msg("user", "hi")).get().name == "p31");
  CHECK(s.client.info().agent_count == 53);
}

TEST_CASE("create_agents that times out stops and deletes every agent it made", "[batch][create_agents]") {
  auto server = ServerProcess::start(standard_args());
  agentd::ClientOptions opts;
  opts.timeout = std::chrono::milliseconds(300);
  Client c = server->connect(opts);
  Client watcher = server->connect();
  // Each constructor takes 1 s on a worker: none is made within 300 ms.
  auto e = error_of([&] { c.create_agents("PickyAgent", 40, Value{{"slow_ms", 1000}}, "slow"); });
  CHECK(e.code() == ErrorCode::timeout);
  CHECK(e.retryable());
  CHECK_THAT(e.message(), Contains("being deleted again"));
  // Those still being constructed finish, and are deleted as they arrive.
  CHECK(wait_until([&] { return watcher.info().agent_count == 0 && watcher.info().calls_queued == 0; },
                   std::chrono::seconds(20)));
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  CHECK(watcher.info().agent_count == 0);
}

// ---- gathered calls: results, order ----

TEST_CASE("replies from several threads to many agents all come back right, in per-agent order",
          "[batch][order]") {
  BatchServed s;
  constexpr int kThreads = 6;
  constexpr int kAgents = 24;
  constexpr int kRounds = 25;  // replies per thread per agent
  auto agents = s.client.create_agents("TrailAgent", kAgents, Value::object(), "A");
  // One EchoAgent per thread: a sync call after the thread's burst must see all of it.
  auto counters = s.client.create_agents("EchoAgent", kThreads, Value::object(), "E");

  struct Outcome {
    int wrong = 0;            // replies with the wrong content or name
    int errors = 0;           // replies that threw
    std::int64_t count = -1;  // the thread's EchoAgent's reply count after its burst
  };
  std::vector<Outcome> outcomes(kThreads);
  std::atomic<int> ready{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      ++ready;
      while (ready.load() < kThreads) std::this_thread::yield();  // start together
      std::vector<std::pair<std::string, Placeholder>> sent;
      for (int i = 0; i < kRounds; ++i) {
        for (int a = 0; a < kAgents; ++a) {
          std::string text = std::to_string(t) + "/" + std::to_string(i);
          sent.emplace_back(text + ">A" + std::to_string(a), agents[a].reply(Msg("user", text)));
        }
        counters[t].reply(Msg("user", i));
      }
      outcomes[t].count = counters[t].call("count").get<std::int64_t>();
      for (auto& [want, p] : sent) {
        try {
          auto m = p.get(std::chrono::seconds(60));
          if (m.content != want || m.name != want.substr(want.rfind('>') + 1)) ++outcomes[t].wrong;
        } catch (const Error&) {
          ++outcomes[t].errors;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) {
    INFO("thread " << t);
    CHECK(outcomes[t].wrong == 0);
    CHECK(outcomes[t].errors == 0);
    CHECK(outcomes[t].count == kRounds);
  }

  // Each agent heard every thread's messages, each thread's in the order it sent them.
  for (int a = 0; a < kAgents; ++a) {
    INFO("agent A" << a);
    auto mem = agents[a].memory();
    REQUIRE(mem.size() == 2u * kThreads * kRounds);  // input and answer of every reply
    std::vector<int> next(kThreads, 0);
    bool in_order = true;
    for (std::size_t k = 0; k < mem.size(); k += 2) {
      std::string text = mem[k].content.get<std::string>();
      auto slash = text.find('/');
      int t = std::stoi(text.substr(0, slash));
      int i = std::stoi(text.substr(slash + 1));
      if (i != next[t]) in_order = false;
      ++next[t];
      if (mem[k + 1].content != text + ">A" + std::to_string(a)) in_order = false;
    }
    CHECK(in_order);
    CHECK(next == std::vector<int>(kThreads, kRounds));
  }
}

TEST_CASE("in a chain whose links are passed on and dropped, the links kept still get results",
          "[batch][order]") {
  BatchServed s;
  auto agents = s.client.create_agents("TrailAgent", 60, Value::object(), "t");
  for (int round = 0; round < 5; ++round) {
    std::vector<std::pair<Placeholder, std::string>> kept;
    std::string trail = "x" + std::to_string(round) + ">t0";
    Placeholder x = agents[0].reply(Msg("user", "x" + std::to_string(round)));
    for (std::size_t i = 1; i < agents.size(); ++i) {
      x = agents[i].reply(x);  // the previous link's placeholder is dropped here
      trail += ">t" + std::to_string(i);
      if (i % 7 == 0) kept.emplace_back(x, trail);
    }
    CHECK(x.get().content == trail);
    for (auto& [p, want] : kept) CHECK(p.get().content == want);
  }
}

TEST_CASE("a sync call right after a burst of replies sees all of them", "[batch][order]") {
  BatchServed s;
  auto echo = s.client.create_agent("EchoAgent", "E", Value::object(), "e");
  // More than one submit's worth (4096 calls): the burst is split, still in order.
  constexpr int kBurst = 5000;
  std::vector<Placeholder> ps;
  for (int i = 0; i < kBurst; ++i) ps.push_back(echo.reply(Msg("user", i)));
  CHECK(echo.call("count") == kBurst);

  // memory() (also a gathered call) sees them in the order they were issued.
  auto mem = echo.memory();
  REQUIRE(mem.size() == 2u * kBurst);
  int out_of_place = 0;
  for (int i = 0; i < kBurst; ++i)
    if (mem[2 * i].content != i || mem[2 * i + 1].content != i) ++out_of_place;
  CHECK(out_of_place == 0);
  CHECK(ps.back().get().content == kBurst - 1);

  // A request outside the session (listAgents) flushes the gathered calls first: the server
  // knows every reply of the burst by the time it answers.
  auto fresh = s.client.create_agent("EchoAgent", "F", Value{{"sleep_ms", 5}}, "f");
  constexpr int kSecond = 300;
  std::vector<Placeholder> more;
  for (int i = 0; i < kSecond; ++i) more.push_back(fresh.reply(Msg("user", i)));
  std::optional<agentd::AgentInfo> row;
  for (const auto& a : s.client.list_agents())
    if (a.id == "f") row = a;
  REQUIRE(row);
  CHECK(row->queued_calls + row->completed_calls + row->failed_calls == kSecond);
  CHECK(row->queued_calls > 0);  // 300 replies of 5 ms each cannot all be done yet

  // An observe right after a burst is queued behind it.
  auto trail = s.client.create_agent("TrailAgent", "T", Value::object(), "t");
  for (int i = 0; i < 100; ++i) trail.reply(Msg("user", std::to_string(i)));
  trail.observe(Msg("user", "last"));
  auto tmem = trail.memory();
  REQUIRE(tmem.size() == 201u);
  CHECK(tmem[0].content == "0");
  CHECK(tmem[198].content == "99");
  CHECK(tmem[200].content == "last");
}

TEST_CASE("requests outside the session never overtake calls issued before them", "[batch][order]") {
  BatchServed s;
  // Several threads at once, so the client's loop thread takes each thread's last calls and its
  // next request in one go: the request must still go after them (the batch is flushed first).
  constexpr int kThreads = 4;
  constexpr int kRounds = 30;
  constexpr int kBurst = 40;
  auto agents = s.client.create_agents("EchoAgent", kThreads, Value::object(), "E");
  std::vector<int> short_counts(kThreads, 0);
  std::vector<int> listed_short(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      std::uint64_t sent = 0;
      for (int r = 0; r < kRounds; ++r) {
        for (int i = 0; i < kBurst; ++i) agents[t].reply(Msg("user", i));
        sent += kBurst;
        auto info = agents[t].info();  // AgentServer.agent + Agent.info
        if (info.queued_calls + info.completed_calls + info.failed_calls != sent) ++short_counts[t];
        for (int i = 0; i < kBurst; ++i) agents[t].reply(Msg("user", i));
        sent += kBurst;
        for (const auto& a : s.client.list_agents())  // AgentServer.listAgents
          if (a.id == agents[t].id() && a.queued_calls + a.completed_calls + a.failed_calls != sent)
            ++listed_short[t];
      }
    });
  for (auto& th : threads) th.join();
  CHECK(short_counts == std::vector<int>(kThreads, 0));
  CHECK(listed_short == std::vector<int>(kThreads, 0));
}

TEST_CASE("a call to a deleted agent in a batch fails alone, the rest of the batch runs", "[batch][order]") {
  BatchServed s;
  auto keep = s.client.create_agent("TrailAgent", "K", Value::object(), "k");
  auto gone = s.client.create_agent("TrailAgent", "G", Value::object(), "g");
  s.client.delete_agent("g");
  auto a = keep.reply(Msg("user", "1"));
  auto b = gone.reply(Msg("user", "2"));
  auto c = keep.reply(Msg("user", "3"));
  CHECK(a.get().content == "1>K");
  auto e = error_of([&] { b.get(std::chrono::seconds(30)); });
  CHECK(e.code() == ErrorCode::unknown_agent);
  CHECK(e.agent_id() == "g");
  CHECK(c.get().content == "3>K");
  CHECK(error_of([&] { gone.call("count"); }).code() == ErrorCode::unknown_agent);
  CHECK(error_of([&] { gone.memory(); }).code() == ErrorCode::unknown_agent);
  CHECK(error_of([&] { gone.observe(Msg("user", "x")); }).code() == ErrorCode::unknown_agent);
}

// ---- results above the inline limit ----

TEST_CASE("a result above the 64 KiB inline limit arrives whole, and only once", "[batch][large]") {
  BatchServed s;
  auto blob = s.client.create_agent("BlobAgent", "B", Value::object(), "b");
  constexpr std::size_t kSize = 256 * 1024;

  SECTION("read after the call finished") {
    auto before = s.client.stats();
    auto p = blob.reply(Msg("user", Value{{"make_bytes", kSize}}));
    blob.memory();  // runs after the reply: its CallDone (too large to inline) is in
    auto mid = s.client.stats();
    // Only the announcement came back with the call, not the message.
    CHECK(mid.bytes_received - before.bytes_received < kSize / 4);
    CHECK(is_blob(p.get().content, kSize));
    auto after = s.client.stats();
    CHECK(after.bytes_received - before.bytes_received >= kSize);
    CHECK(after.bytes_received - before.bytes_received < kSize + kSize / 2);  // not twice
    // Reading again fetches nothing more (a late protocol message of a few bytes may still come
    // in, e.g. under load: the blob is 256 KiB).
    CHECK(is_blob(p.get().content, kSize));
    CHECK(s.client.stats().bytes_received - after.bytes_received < 1024);
  }

  SECTION("read while the call is still pending, from two threads at once") {
    auto slow = s.client.create_agent("EchoAgent", "slow", Value{{"sleep_ms", 300}});
    auto before = s.client.stats();
    // slow echoes {"make_bytes": kSize}, which blob then turns into kSize bytes.
    auto p = blob.reply(slow.reply(Msg("user", Value{{"make_bytes", kSize}})));
    std::atomic<int> whole{0};
    std::vector<std::thread> readers;
    for (int i = 0; i < 2; ++i)
      readers.emplace_back([&] {
        if (is_blob(p.get(std::chrono::seconds(60)).content, kSize)) ++whole;
      });
    for (auto& r : readers) r.join();
    CHECK(whole == 2);
    auto after = s.client.stats();
    CHECK(after.bytes_received - before.bytes_received >= kSize);
    CHECK(after.bytes_received - before.bytes_received < kSize + kSize / 2);
  }

  SECTION("small results still come inline") {
    auto p = blob.reply(Msg("user", Value{{"make_bytes", 1000}}));
    CHECK(is_blob(p.get().content, 1000));
    auto q = blob.reply(Msg("user", Value{{"make_bytes", 60 * 1024}}));
    CHECK(is_blob(q.get().content, 60 * 1024));
  }

  SECTION("a too-large result passed on to another agent is fetched on the server") {
    auto size = s.client.create_agent("BlobAgent", "S");
    auto before = s.client.stats();
    auto q = size.reply(blob.reply(Msg("user", Value{{"make_bytes", kSize}})));
    CHECK(q.get().content["size"] == kSize);
    CHECK(s.client.stats().bytes_received - before.bytes_received < kSize / 4);
  }
}

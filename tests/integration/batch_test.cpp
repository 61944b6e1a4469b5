// The batched call path: Client::create_agents (windowed bulk creation, all or nothing), many
// calls gathered per loop turn into one Session.submit (results right, per-agent order kept,
// other requests flushing the batch first), results above the inline limit read once, and the
// Session / CallSink wire contract driven directly.
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

struct Served {
  std::unique_ptr<ServerProcess> server = ServerProcess::start(standard_args());
  Client client = server->connect();
};

std::vector<std::string> ids_of(const std::vector<agentd::AgentInfo>& list) {
  std::vector<std::string> ids;
  for (const auto& a : list) ids.push_back(a.id);
  return ids;
}

// The bytes BlobAgent makes for {"make_bytes": n}.
bool is_blob(const Value& content, std::size_t n) {
  if (!content.is_binary()) return false;
  const auto& b = content.get_binary();
  if (b.size() != n) return false;
  for (std::size_t i = 0; i < n; ++i)
    if (b[i] != static_cast<std::uint8_t>(i * 31)) return false;
  return true;
}

}  // namespace

// ---- Client::create_agents ----

TEST_CASE("create_agents makes N callable agents named prefix + index, with the args",
          "[batch][create_agents]") {
  Served s;
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
  for (std::size_t i = 0; i < kCount; ++i)
    CHECK(name_by_id[agents[i].id()] == "echo-" + std::to_string(i));
  CHECK(s.client.info().agent_count == kCount);
  // Reached by id like any other agent.
  CHECK(s.client.agent(agents[7].id()).name() == "echo-7");
}

TEST_CASE("create_agents beyond its in-flight window makes every agent", "[batch][create_agents]") {
  Served s;
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
  Served s;
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
  Served s;
  s.client.create_agent("EchoAgent", "keep", Value::object(), "keep");
  auto e = error_of([&] { s.client.create_agents("NoSuchAgent", 50, Value::object(), "n"); });
  CHECK(e.code() == ErrorCode::unknown_class);
  CHECK_THAT(e.message(), Contains("NoSuchAgent") && Contains("0 were made and deleted again"));
  CHECK(ids_of(s.client.list_agents()) == std::vector<std::string>{"keep"});
  CHECK(s.client.info().agent_count == 1);
}

TEST_CASE("create_agents whose every constructor throws fails with bad_args, leaving nothing",
          "[batch][create_agents]") {
  Served s;
  s.client.create_agent("EchoAgent", "keep", Value::object(), "keep");
  auto e = error_of([&] {
    s.client.create_agents("FlakyAgent", 20, Value{{"fail_construct", true}}, "f");
  });
  CHECK(e.code() == ErrorCode::bad_args);
  CHECK(e.agent_class() == "FlakyAgent");
  CHECK_THAT(e.message(), Contains("asked to fail in the constructor") &&
                              Contains("0 were made and deleted again"));
  CHECK(ids_of(s.client.list_agents()) == std::vector<std::string>{"keep"});
  // Bad args of the framework's own check fail the same way.
  auto bad = error_of([&] {
    s.client.create_agents("EchoAgent", 3, Value{{"sleep_ms", "soon"}}, "e");
  });
  CHECK(bad.code() == ErrorCode::bad_args);
  CHECK_THAT(bad.message(), Contains("sleep_ms must be an integer"));
  CHECK(s.client.info().agent_count == 1);
}

TEST_CASE("create_agents with some failing constructors deletes the agents it made",
          "[batch][create_agents]") {
  Served s;
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

TEST_CASE("create_agents that times out stops and deletes every agent it made",
          "[batch][create_agents]") {
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
  Served s;
  constexpr int kThreads = 6;
  constexpr int kAgents = 24;
  constexpr int kRounds = 25;  // replies per thread per agent
  auto agents = s.client.create_agents("TrailAgent", kAgents, Value::object(), "A");
  // One EchoAgent per thread: a sync call after the thread's burst must see all of it.
  auto counters = s.client.create_agents("EchoAgent", kThreads, Value::object(), "E");

  struct Outcome {
    int wrong = 0;           // replies with the wrong content or name
    int errors = 0;          // replies that threw
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
  Served s;
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
  Served s;
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

TEST_CASE("requests outside the session never overtake calls issued before them",
          "[batch][order]") {
  Served s;
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

TEST_CASE("a call to a deleted agent in a batch fails alone, the rest of the batch runs",
          "[batch][order]") {
  Served s;
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

TEST_CASE("a result above the 64 KiB inline limit arrives whole, and only once",
          "[batch][large]") {
  Served s;
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
    // Reading again costs nothing more.
    CHECK(is_blob(p.get().content, kSize));
    CHECK(s.client.stats().bytes_received == after.bytes_received);
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

// ---- the wire contract: Session.submit / CallSink.done ----

namespace {

// One CallDone, decoded (its reader dies with the message).
struct Done {
  std::string what;  // msg, outcome_error, too_large, value, value_error, memory, error, done, created
  std::optional<Msg> msg;
  std::optional<Error> error;
  std::uint64_t too_large = 0;
  Value value;
  std::vector<Msg> memory;
  std::string created;
};

Done decode(agentd::wire::CallDone::Reader d) {
  using agentd::wire::CallDone;
  using agentd::wire::Outcome;
  namespace detail = agentd::detail;
  Done out;
  switch (d.which()) {
    case CallDone::OUTCOME: {
      auto o = d.getOutcome();
      switch (o.which()) {
        case Outcome::MSG:
          out.what = "msg";
          out.msg = detail::read_msg(o.getMsg());
          break;
        case Outcome::ERROR:
          out.what = "outcome_error";
          out.error = detail::read_error(o.getError());
          break;
        case Outcome::TOO_LARGE:
          out.what = "too_large";
          out.too_large = o.getTooLarge();
          break;
      }
      break;
    }
    case CallDone::VALUE:
      if (d.getValue().isError()) {
        out.what = "value_error";
        out.error = detail::read_error(d.getValue().getError());
      } else {
        out.what = "value";
        out.value = detail::read_value(d.getValue().getValue());
      }
      break;
    case CallDone::MEMORY:
      out.what = "memory";
      for (auto m : d.getMemory()) out.memory.push_back(detail::read_msg(m));
      break;
    case CallDone::ERROR:
      out.what = "error";
      out.error = detail::read_error(d.getError());
      break;
    case CallDone::DONE:
      out.what = "done";
      break;
    case CallDone::CREATED:
      out.what = "created";
      out.created = detail::to_std(d.getCreated());
      break;
  }
  return out;
}

// What the test's sink has been told.
struct Received {
  std::map<std::uint64_t, std::vector<Done>> by_ticket;
  std::size_t calls = 0;    // CallDone entries
  std::size_t batches = 0;  // CallSink.done messages
  std::size_t want = 0;     // fulfil all_in once calls reaches this
  kj::Own<kj::PromiseFulfiller<void>> all_in;
};

class RecordingSink final : public agentd::wire::CallSink::Server {
 public:
  explicit RecordingSink(Received& r) : r_(r) {}
  kj::Promise<void> done(DoneContext context) override {
    ++r_.batches;
    for (auto d : context.getParams().getCalls()) {
      r_.by_ticket[d.getTicket()].push_back(decode(d));
      ++r_.calls;
    }
    if (r_.calls >= r_.want && r_.all_in && r_.all_in->isWaiting()) r_.all_in->fulfill();
    return kj::READY_NOW;
  }

 private:
  Received& r_;  // outlives the RPC system (declared before it in the test)
};

struct Spec {
  agentd::wire::CallKind kind{};
  std::string agent_id{};
  std::string call_id{};
  std::optional<Msg> msg{};
  std::string method{};
  std::string class_name{};
  std::string name{};
  std::uint64_t inline_limit = 0;
};

void fill(const Spec& s, std::uint64_t ticket, agentd::wire::CallSpec::Builder out) {
  out.setTicket(ticket);
  out.setKind(s.kind);
  out.setAgentId(agentd::detail::to_kj(s.agent_id));
  out.setCallId(agentd::detail::to_kj(s.call_id));
  out.setMethod(agentd::detail::to_kj(s.method));
  out.setClassName(agentd::detail::to_kj(s.class_name));
  out.setName(agentd::detail::to_kj(s.name));
  out.setInlineLimit(s.inline_limit);
  out.initArgs().initObject(0);
  if (s.msg) agentd::detail::write_msg(*s.msg, out.initInput().initMsg());
}

// A raw Cap'n Proto connection to server s with a session whose sink records into rec (which
// must outlive this).
struct WireSession {
  WireSession(ServerProcess& s, Received& rec)
      : stream(io.provider->getNetwork()
                   .parseAddress("127.0.0.1", s.port())
                   .wait(io.waitScope)
                   ->connect()
                   .wait(io.waitScope)),
        rpc(*stream),
        server(agentd::test::raw_login(rpc)) {
    auto open = server.sessionRequest();
    open.setSink(kj::heap<RecordingSink>(rec));
    session = open.send().getSession();
  }
  kj::AsyncIoContext io = kj::setupAsyncIo();
  kj::Own<kj::AsyncIoStream> stream;
  capnp::TwoPartyClient rpc;
  agentd::wire::AgentServer::Client server;
  agentd::wire::Session::Client session = nullptr;
};

}  // namespace

TEST_CASE("Session.submit reports every ticket through the sink with the right outcome",
          "[batch][wire]") {
  using agentd::wire::CallKind;
  auto s = ServerProcess::start(standard_args());
  Received rec;  // before the RPC system, so the sink's reference outlives it
  WireSession w(*s, rec);
  auto& ws = w.io.waitScope;
  auto& timer = w.io.provider->getTimer();
  auto& session = w.session;

  // Sends specs (tickets first_ticket, first_ticket + 1, ...) in one submit and waits until the
  // sink has heard of want calls in all.
  auto submit = [&](const std::vector<Spec>& specs, std::uint64_t first_ticket, std::size_t want) {
    auto paf = kj::newPromiseAndFulfiller<void>();
    rec.want = want;
    rec.all_in = kj::mv(paf.fulfiller);
    auto req = session.submitRequest();
    auto list = req.initCalls(static_cast<unsigned>(specs.size()));
    for (unsigned i = 0; i < specs.size(); ++i) fill(specs[i], first_ticket + i, list[i]);
    req.send().wait(ws);
    if (rec.calls < want) timer.timeoutAfter(30 * kj::SECONDS, kj::mv(paf.promise)).wait(ws);
  };

  const Msg first("user", "first");
  const std::uint64_t kLimit = 64 * 1024;
  std::vector<Spec> batch{
      /* 1 */ {CallKind::CREATE, "w", "", {}, "", "EchoAgent", "W"},
      /* 2 */ {CallKind::REPLY, "w", "dup-id", first, "", "", "", kLimit},
      /* 3 */ {CallKind::REPLY, "w", "dup-id", Msg("user", "second"), "", "", "", kLimit},
      /* 4 */ {CallKind::METHOD, "w", "", {}, "count"},
      /* 5 */ {CallKind::MEMORY, "w"},
      /* 6 */ {CallKind::OBSERVE, "w", "", Msg("user", "heard")},
      /* 7 */ {CallKind::METHOD_ASYNC, "w", "async-1", {}, "ping", "", "", kLimit},
      /* 8 */ {CallKind::METHOD, "nope", "", {}, "ping"},
      /* 9 */ {CallKind::REPLY, "nope", "to-nope", Msg("user", "x"), "", "", "", kLimit},
      /* 10 */ {CallKind::OBSERVE, "nope", "", Msg("user", "x")},
      /* 11 */ {CallKind::MEMORY, "nope"},
      /* 12 */ {CallKind::REPLY, "w", "", Msg("user", "no call id"), "", "", "", kLimit},
      /* 13 */ {CallKind::CREATE, "w", "", {}, "", "EchoAgent", "again"},
      /* 14 */ {CallKind::CREATE, "", "", {}, "", "NoSuchAgent", ""},
      /* 15 */ {CallKind::CREATE, "blob", "", {}, "", "BlobAgent", ""},
      /* 16 */ {CallKind::REPLY, "blob", "big", Msg("user", Value{{"make_bytes", 100000}}), "", "",
                "", kLimit},
      /* 17 */ {CallKind::REPLY, "blob", "big-whole", Msg("user", Value{{"make_bytes", 100000}}),
                "", "", "", 0},
      /* 18 */ {CallKind::METHOD, "w", "", {}, "no_such_method"},
  };
  submit(batch, 1, batch.size());

  // Every ticket, exactly once, and nothing else.
  REQUIRE(rec.calls == batch.size());
  REQUIRE(rec.by_ticket.size() == batch.size());
  for (std::uint64_t t = 1; t <= batch.size(); ++t) {
    INFO("ticket " << t);
    REQUIRE(rec.by_ticket.count(t) == 1);
    CHECK(rec.by_ticket[t].size() == 1);
  }
  CHECK(rec.batches >= 1);
  CHECK(rec.batches <= batch.size());
  auto got = [&](std::uint64_t t) -> const Done& { return rec.by_ticket.at(t).front(); };

  // 1: created under the id asked for.
  CHECK(got(1).what == "created");
  CHECK(got(1).created == "w");
  // 2: the first reply ran; 3: its duplicate call id was refused (and it did not run: 4).
  REQUIRE(got(2).what == "msg");
  CHECK(got(2).msg->content == "first");
  CHECK(got(2).msg->name == "W");
  REQUIRE(got(3).what == "error");
  CHECK(got(3).error->code() == ErrorCode::duplicate_call_id);
  CHECK_THAT(got(3).error->message(), Contains("dup-id"));
  CHECK(got(3).error->agent_id() == "w");
  REQUIRE(got(4).what == "value");
  CHECK(got(4).value == 1);
  // 5: memory in the agent's order (after the one reply that ran).
  REQUIRE(got(5).what == "memory");
  REQUIRE(got(5).memory.size() == 2);
  CHECK(got(5).memory[0].content == "first");
  CHECK(got(5).memory[1].content == "first");
  // 6: observe queued.
  CHECK(got(6).what == "done");
  // 7: methodAsync's value is a message.
  REQUIRE(got(7).what == "msg");
  CHECK(got(7).msg->content == "pong");
  // 8-11: an unknown agent, whatever the kind.
  REQUIRE(got(8).what == "value_error");
  CHECK(got(8).error->code() == ErrorCode::unknown_agent);
  CHECK(got(8).error->agent_id() == "nope");
  REQUIRE(got(9).what == "outcome_error");
  CHECK(got(9).error->code() == ErrorCode::unknown_agent);
  CHECK(got(9).error->agent_id() == "nope");
  REQUIRE(got(10).what == "error");
  CHECK(got(10).error->code() == ErrorCode::unknown_agent);
  REQUIRE(got(11).what == "error");
  CHECK(got(11).error->code() == ErrorCode::unknown_agent);
  // 12: a reply needs a call id.
  REQUIRE(got(12).what == "error");
  CHECK(got(12).error->code() == ErrorCode::bad_request);
  // 13: the id is taken; 14: no such class.
  REQUIRE(got(13).what == "error");
  CHECK(got(13).error->code() == ErrorCode::duplicate_agent);
  REQUIRE(got(14).what == "error");
  CHECK(got(14).error->code() == ErrorCode::unknown_class);
  CHECK_THAT(got(14).error->message(), Contains("NoSuchAgent"));
  // 15-17: a big result is announced above the inline limit, sent whole with limit 0.
  CHECK(got(15).what == "created");
  CHECK(got(15).created == "blob");
  REQUIRE(got(16).what == "too_large");
  CHECK(got(16).too_large >= 100000);
  REQUIRE(got(17).what == "msg");
  CHECK(is_blob(got(17).msg->content, 100000));
  // 18: an unknown method is an error value, not a fault.
  REQUIRE(got(18).what == "value_error");
  CHECK(got(18).error->code() == ErrorCode::unknown_method);

  // Session.read gives the whole too-large result, and the first of the duplicated call.
  {
    auto read = session.readRequest();
    read.setCallId("big");
    auto r = read.send().wait(ws);
    REQUIRE(r.getOutcome().isMsg());
    CHECK(is_blob(agentd::detail::read_msg(r.getOutcome().getMsg()).content, 100000));
  }
  {
    auto read = session.readRequest();
    read.setCallId("dup-id");
    auto r = read.send().wait(ws);
    REQUIRE(r.getOutcome().isMsg());
    CHECK(agentd::detail::read_msg(r.getOutcome().getMsg()).content == "first");
  }

  // A second batch on the same session: tickets are the client's; the observe has run, and the
  // refused call id stays taken.
  std::vector<Spec> second{
      /* 101 */ {CallKind::MEMORY, "w"},
      /* 102 */ {CallKind::REPLY, "w", "dup-id", Msg("user", "third"), "", "", "", kLimit},
      /* 103 */ {CallKind::METHOD, "w", "", {}, "count"},
  };
  const std::size_t before = rec.calls;
  submit(second, 101, before + second.size());
  REQUIRE(rec.calls == before + second.size());
  REQUIRE(rec.by_ticket.count(101) == 1);
  REQUIRE(got(101).what == "memory");
  REQUIRE(got(101).memory.size() == 3);
  CHECK(got(101).memory[2].content == "heard");
  REQUIRE(got(102).what == "error");
  CHECK(got(102).error->code() == ErrorCode::duplicate_call_id);
  REQUIRE(got(103).what == "value");
  CHECK(got(103).value == 1);
}

TEST_CASE("a reply sent with report = false gets no CallDone, and its result is in the pool",
          "[batch][wire]") {
  using agentd::wire::CallKind;
  auto s = ServerProcess::start(standard_args());
  Received rec;
  WireSession w(*s, rec);
  auto& ws = w.io.waitScope;
  auto& session = w.session;
  auto paf = kj::newPromiseAndFulfiller<void>();
  rec.want = 2;  // the create and the reported consumer
  rec.all_in = kj::mv(paf.fulfiller);
  auto req = session.submitRequest();
  auto list = req.initCalls(4);
  list[0].setTicket(1);
  list[0].setKind(CallKind::CREATE);
  list[0].setAgentId("t");
  list[0].setClassName("TrailAgent");
  list[0].initArgs().initObject(0);
  // Ticket 2: a link whose placeholder the client dropped (report = false).
  list[1].setTicket(2);
  list[1].setKind(CallKind::REPLY);
  list[1].setAgentId("t");
  list[1].setCallId("silent");
  list[1].setReport(false);
  agentd::detail::write_msg(Msg("user", "a"), list[1].initInput().initMsg());
  // Ticket 3: a reported reply that consumes it.
  list[2].setTicket(3);
  list[2].setKind(CallKind::REPLY);
  list[2].setAgentId("t");
  list[2].setCallId("loud");
  list[2].setInlineLimit(1024);
  auto ref = list[2].initInput().initPlaceholder();
  ref.setCallId("silent");
  ref.setServerId(agentd::detail::to_kj(s->connect().server_id()));
  // Ticket 4: the same duplicate id, unreported: refused silently too.
  list[3].setTicket(4);
  list[3].setKind(CallKind::REPLY);
  list[3].setAgentId("t");
  list[3].setCallId("silent");
  list[3].setReport(false);
  req.send().wait(ws);
  w.io.provider->getTimer().timeoutAfter(30 * kj::SECONDS, kj::mv(paf.promise)).wait(ws);
  // Give a stray CallDone for tickets 2 or 4 time to arrive.
  w.io.provider->getTimer().afterDelay(200 * kj::MILLISECONDS).wait(ws);

  CHECK(rec.by_ticket.count(2) == 0);
  CHECK(rec.by_ticket.count(4) == 0);
  REQUIRE(rec.by_ticket.count(3) == 1);
  REQUIRE(rec.by_ticket[3].front().what == "msg");
  CHECK(rec.by_ticket[3].front().msg->content == "a>t>t");
  auto read = session.readRequest();
  read.setCallId("silent");
  auto r = read.send().wait(ws);
  REQUIRE(r.getOutcome().isMsg());
  CHECK(agentd::detail::read_msg(r.getOutcome().getMsg()).content == "a>t");
}

TEST_CASE("calls queued behind a create whose constructor throws fail with its error",
          "[batch][wire]") {
  using agentd::wire::CallKind;
  auto s = ServerProcess::start(standard_args());
  Received rec;
  WireSession w(*s, rec);
  auto& ws = w.io.waitScope;
  auto& session = w.session;

  // A create whose constructor fails: the calls queued behind it in the same batch fail with its
  // error instead of running or hanging.
  constexpr std::uint64_t kReplies = 200;
  auto paf = kj::newPromiseAndFulfiller<void>();
  rec.want = kReplies + 2;
  rec.all_in = kj::mv(paf.fulfiller);
  auto req = session.submitRequest();
  auto list = req.initCalls(kReplies + 2);
  list[0].setTicket(1);
  list[0].setKind(CallKind::CREATE);
  list[0].setAgentId("f");
  list[0].setClassName("FlakyAgent");
  list[0].initArgs().initObject(1)[0].setKey("fail_construct");
  for (std::uint64_t i = 0; i < kReplies; ++i) {
    auto spec = list[static_cast<unsigned>(i + 1)];
    spec.setTicket(i + 2);
    spec.setKind(CallKind::REPLY);
    spec.setAgentId("f");
    spec.setCallId(agentd::detail::to_kj("r" + std::to_string(i)));
    spec.setInlineLimit(1024);
    agentd::detail::write_msg(Msg("user", "x"), spec.initInput().initMsg());
  }
  list[kReplies + 1].setTicket(kReplies + 2);
  list[kReplies + 1].setKind(CallKind::METHOD);
  list[kReplies + 1].setAgentId("f");
  list[kReplies + 1].setMethod("count");
  req.send().wait(ws);
  w.io.provider->getTimer().timeoutAfter(30 * kj::SECONDS, kj::mv(paf.promise)).wait(ws);

  REQUIRE(rec.by_ticket.size() == kReplies + 2);
  REQUIRE(rec.by_ticket[1].front().what == "error");
  CHECK(rec.by_ticket[1].front().error->code() == ErrorCode::bad_args);
  int failed_like_create = 0;
  for (std::uint64_t t = 2; t < kReplies + 2; ++t) {
    const Done& d = rec.by_ticket[t].front();
    if (d.what == "outcome_error" && d.error->code() == ErrorCode::bad_args &&
        d.error->agent_id() == "f")
      ++failed_like_create;
  }
  CHECK(failed_like_create == static_cast<int>(kReplies));
  REQUIRE(rec.by_ticket[kReplies + 2].front().what == "value_error");
  CHECK(rec.by_ticket[kReplies + 2].front().error->code() == ErrorCode::bad_args);
  // Most of 202 completions travel together, not one message each.
  CHECK(rec.batches < kReplies);
}

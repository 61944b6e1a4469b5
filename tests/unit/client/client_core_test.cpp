// ClientCore (libagentd/src/client/client_core) over a real Cap'n Proto connection in memory: the
// core's loop thread makes a Server and connects to it over kj::newTwoWayPipe() (the InProcess
// hook local mode uses, here with a pipe between the two), so every request is serialized as it
// would be over TCP. The test plays the user threads: sync requests, session calls
// (call_sync), placeholders (new_placeholder / send_async), and close().
#include "client_core.h"

#include "call_done.h"
#include "gate.h"
#include "placeholder.h"
#include "rpc_connection.h"
#include "server.h"

#include <agentd/agent.h>

#include <capnp/rpc-twoparty.h>
#include <catch2/catch.hpp>
#include <kj/async-io.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

using namespace agentd;
using namespace agentd::detail;
using Catch::Matchers::Contains;

namespace {

agentd::test::Gate core_gate;  // CoreGatedAgent's replies wait on it

class CoreEchoAgent : public Agent {
 public:
  using Agent::Agent;
  Msg reply(const Msg& x) override {
    memory().add(x);
    return Msg(name(), x.text());
  }
};

class CoreGatedAgent : public Agent {
 public:
  using Agent::Agent;
  Msg reply(const Msg& x) override {
    core_gate.wait();
    return Msg(name(), x.text());
  }
};

// A Server on the core's loop, reached over a pipe: made and destroyed on the loop thread.
class PipedServer final : public ClientCore::InProcess {
 public:
  explicit PipedServer(kj::AsyncIoContext& io)
      : server_(options(), io,
                {agent_class<CoreEchoAgent>("EchoAgent"), agent_class<CoreGatedAgent>("GatedAgent")}),
        server_rpc_(*pipe_.ends[0], server_.bootstrap(), capnp::rpc::twoparty::Side::SERVER),
        client_rpc_(*pipe_.ends[1]) {}
  wire::AgentServer::Client bootstrap() override {
    return client_rpc_.bootstrap().castAs<wire::AgentServer>();
  }
  std::string server_id() const override { return server_.id(); }
  kj::Promise<void> run() override { return server_.run(); }

 private:
  static ServerOptions options() {
    ServerOptions o;
    o.server_id = "core-test";
    o.max_workers = 4;
    return o;
  }
  Server server_;
  kj::TwoWayPipe pipe_ = kj::newTwoWayPipe();
  capnp::TwoPartyClient server_rpc_;  // the server's end
  RpcConnection client_rpc_;          // the core's end
};

std::shared_ptr<ClientCore> piped_core() {
  ClientCore::Target t;
  t.mode = ClientCore::Mode::local;
  t.in_process = [](kj::AsyncIoContext& io) -> kj::Own<ClientCore::InProcess> {
    return kj::heap<PipedServer>(io);
  };
  ClientOptions o;
  o.timeout = std::chrono::seconds(10);
  return std::make_shared<ClientCore>(std::move(t), o);
}

std::string create(ClientCore& core, const std::string& cls, const std::string& id) {
  auto spec = spec_for(wire::CallKind::CREATE, id);
  spec.class_name = cls;
  return core.call_sync<std::string>("create", std::move(spec), [](wire::CallDone::Reader d) {
    throw_if_error(d);
    return to_std(d.getCreated());
  });
}

std::shared_ptr<PlaceholderState> reply(const std::shared_ptr<ClientCore>& core, const std::string& agent,
                                        const std::string& text) {
  auto state = new_placeholder(core, agent);
  auto spec = spec_for(wire::CallKind::REPLY, agent);
  spec.msg = Msg("user", text, "user");
  send_async(*core, std::move(spec), *state);
  return state;
}

std::vector<std::string> memory_texts(ClientCore& core, const std::string& agent) {
  return core.call_sync<std::vector<std::string>>("memory", spec_for(wire::CallKind::MEMORY, agent),
                                                  [](wire::CallDone::Reader d) {
                                                    throw_if_error(d);
                                                    std::vector<std::string> out;
                                                    for (auto m : d.getMemory())
                                                      out.push_back(read_msg(m).text());
                                                    return out;
                                                  });
}

}  // namespace

TEST_CASE(
    "a ClientCore over a pipe runs session calls in the order they were made and answers "
    "sync requests",
    "[client][client_core]") {
  auto core = piped_core();
  CHECK(core->open());
  CHECK(core->server_id() == "core-test");
  CHECK(core->address() == "local");

  CHECK(create(*core, "EchoAgent", "e1") == "e1");
  constexpr int kReplies = 25;
  std::vector<std::shared_ptr<PlaceholderState>> ps;
  for (int i = 0; i < kReplies; ++i) ps.push_back(reply(core, "e1", std::to_string(i)));
  // Queued after the replies, answered after every one of them ran.
  auto texts = memory_texts(*core, "e1");
  REQUIRE(texts.size() == kReplies);
  for (int i = 0; i < kReplies; ++i) {
    CHECK(texts[i] == std::to_string(i));
    CHECK(ps[i]->slot->wait(std::chrono::seconds(10), "reply").text() == std::to_string(i));
  }
  // One request per call: the create, the replies and the memory.
  CHECK(core->requests_.load() == 1 + kReplies + 1);

  // A server error in a CallDone reaches the waiting thread as its Error.
  try {
    create(*core, "NoSuchClass", "x");
    FAIL("created an agent of an unknown class");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::unknown_class);
  }

  CHECK(core->sync<bool>("ping", [](LoopState& loop, Sync<bool>& st) -> kj::Promise<void> {
    return loop.server.pingRequest().send().then(
        [&st](capnp::Response<wire::AgentServer::PingResults>) { st.set(true); });
  }));
}

TEST_CASE(
    "a ClientCore's sync request that throws or rejects fails the waiting thread with an "
    "Error",
    "[client][client_core]") {
  auto core = piped_core();
  SECTION("an agentd::Error thrown by the body is the caller's, unchanged") {
    try {
      core->sync<bool>("body throws", [](LoopState&, Sync<bool>&) -> kj::Promise<void> {
        throw Error(ErrorCode::bad_args, "refused in the body");
      });
      FAIL("no error");
    } catch (const Error& e) {
      CHECK(e.code() == ErrorCode::bad_args);
      CHECK(e.message() == "refused in the body");
    }
  }
  SECTION("a rejected promise becomes an Error naming the request") {
    try {
      core->sync<bool>("a rejected request", [](LoopState&, Sync<bool>&) -> kj::Promise<void> {
        return KJ_EXCEPTION(DISCONNECTED, "the pipe broke");
      });
      FAIL("no error");
    } catch (const Error& e) {
      CHECK(e.code() == ErrorCode::disconnected);
      CHECK_THAT(e.message(), Contains("a rejected request"));
      CHECK_THAT(e.message(), Contains("the pipe broke"));
    }
  }
  // The core is still usable afterwards.
  CHECK(create(*core, "EchoAgent", "after") == "after");
}

TEST_CASE(
    "close() fails a placeholder still waiting with disconnected, and the core refuses "
    "requests afterwards",
    "[client][client_core]") {
  core_gate.set(true);
  auto core = piped_core();
  create(*core, "GatedAgent", "g");
  core_gate.set(false);
  auto waiting = reply(core, "g", "stuck");

  // The agent's worker is released once the placeholder has failed (or after a while, so that a
  // placeholder left waiting fails the test instead of hanging it): the server this core owns
  // waits for its workers when it goes.
  std::thread opener([slot = waiting->slot] {
    std::unique_lock lock(slot->mu);
    slot->waiters.wait_for(lock, std::chrono::seconds(10), [&] { return slot->value || slot->error; });
    lock.unlock();
    core_gate.set(true);
  });
  core->close();
  opener.join();
  {
    std::lock_guard lock(waiting->slot->mu);
    REQUIRE(waiting->slot->error);
    CHECK(waiting->slot->error->code() == ErrorCode::disconnected);
    CHECK_THAT(waiting->slot->error->message(), Contains("the client was closed"));
  }

  CHECK_FALSE(core->open());
  core->close();  // idempotent
  try {
    create(*core, "EchoAgent", "late");
    FAIL("a closed core took a call");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::disconnected);
    CHECK_THAT(e.message(), Contains("the client is closed"));
  }
}

// Fuzzes the server's batched call path (libagentd/src/rpc/session_impl.cpp): the input is read
// as a Session.submit request (a List(CallSpec)), copied into a real submit and sent over a real
// Cap'n Proto connection (an in-memory pipe) to an in-process Server, which decodes the calls,
// queues them on its agents (FuzzAgent "a0" and "a1", created at start) and reports them on the
// session's CallSink, or, for a lone call sent with answerLone, in the submit's answer. The server
// must not crash, and every call it is told to report must be reported (a CallDone per reported
// call, through either), unless it waits on a placeholder that never comes.
#include "fuzz_support.h"
#include "server.h"
#include "value_codec.h"

#include <agentd/agent.h>

#include <capnp/rpc-twoparty.h>
#include <kj/async-io.h>
#include <spdlog/spdlog.h>

#include <chrono>

using namespace agentd;
using namespace agentd::detail;

namespace {

// Answers with its input's content; methods "echo" (its args) and "fail" (throws).
class FuzzAgent : public Agent {
 public:
  explicit FuzzAgent(AgentInit init) : Agent(std::move(init)) {
    register_method("echo", [](const Value& args) { return args; });
    register_method("fail", [](const Value&) -> Value { throw std::runtime_error("asked to fail"); });
  }
  Msg reply(const Msg& x) override {
    memory().add(x);
    return Msg(name(), x.content);
  }
};

class CountingSink final : public wire::CallSink::Server {
 public:
  explicit CountingSink(std::size_t& count) : count_(count) {}
  kj::Promise<void> done(DoneContext context) override {
    count_ += context.getParams().getCalls().size();
    return kj::READY_NOW;
  }

 private:
  std::size_t& count_;
};

// A lone submit fails when its call cannot run (a reset deletes its agent): nothing to report.
struct IgnoreErrors final : kj::TaskSet::ErrorHandler {
  void taskFailed(kj::Exception&&) override {}
};

struct Harness {
  kj::AsyncIoContext io = kj::setupAsyncIo();
  IgnoreErrors errors;
  Server server{[] {
                  ServerOptions o;
                  o.server_id = "fuzz";
                  o.max_pool_size = 1024;
                  return o;
                }(),
                io,
                {agent_class<FuzzAgent>("FuzzAgent")}};
  capnp::TwoPartyServer rpc_server{server.bootstrap()};
  kj::TwoWayPipe pipe = kj::newTwoWayPipe();
  kj::Own<capnp::TwoPartyClient> client;
  wire::AgentServer::Client agent_server = nullptr;
  wire::Session::Client session = nullptr;
  std::size_t reported = 0;  // CallDones heard so far (through the sink or a submit's answer)
  // Submits sent with answerLone: answered when their call finishes (or fails at a reset).
  kj::TaskSet lone_answers{errors};

  Harness() {
    rpc_server.accept(kj::mv(pipe.ends[0]));
    client = kj::heap<capnp::TwoPartyClient>(*pipe.ends[1]);
    agent_server = client->bootstrap().castAs<wire::AgentServer>();
    auto req = agent_server.sessionRequest();
    req.setSink(kj::heap<CountingSink>(reported));
    session = req.send().getSession();
    reset();
  }

  // Deletes every agent (their queued calls fail) and creates a0 and a1 again.
  void reset() {
    agent_server.deleteAllAgentsRequest().send().wait(io.waitScope);
    for (const char* id : {"a0", "a1"}) {
      auto req = agent_server.createAgentRequest();
      req.setClassName("FuzzAgent");
      req.setName(id);
      req.setAgentId(id);
      req.send().wait(io.waitScope);
    }
  }

  // Runs the loop until `expected` more CallDones arrived or nothing arrived for a while.
  bool pump_until(std::size_t expected) {
    auto& timer = io.provider->getTimer();
    auto last = std::chrono::steady_clock::now();
    std::size_t seen = reported;
    while (reported < expected) {
      timer.afterDelay(50 * kj::MICROSECONDS).wait(io.waitScope);
      if (reported != seen) {
        seen = reported;
        last = std::chrono::steady_clock::now();
      } else if (std::chrono::steady_clock::now() - last > std::chrono::milliseconds(20)) {
        return false;
      }
    }
    return true;
  }
};

bool reported_call(wire::CallSpec::Reader c) {
  switch (c.getKind()) {
    case wire::CallKind::REPLY:
    case wire::CallKind::METHOD_ASYNC:
      return c.getReport();
    default:
      return true;  // an unknown kind is reported as bad_request
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static Harness* h = [] {
    spdlog::set_level(spdlog::level::warn);  // no info line per agent made
    return new Harness;                      // one server for the whole run (never destroyed)
  }();
  auto words = fuzz::aligned_words(data, size);
  auto req = h->session.submitRequest();
  std::size_t expected = h->reported;
  bool lone = false;
  try {
    capnp::FlatArrayMessageReader reader(words, fuzz::fuzz_reader_options());
    lone = reader.getRoot<wire::Session::SubmitParams>().getAnswerLone();
    req.setAnswerLone(lone);
    auto calls = reader.getRoot<wire::Session::SubmitParams>().getCalls();
    const unsigned n = std::min(calls.size(), 256u);
    auto out = req.initCalls(n);
    for (unsigned i = 0; i < n; ++i) {
      out.setWithCaveats(i, calls[i]);
      if (reported_call(calls[i])) ++expected;
    }
  } catch (const kj::Exception&) {
    return 0;  // not a well-formed message: the RPC layer never lets such a thing through
  }
  if (lone) {
    // Answered when its call finishes, which may be never (a placeholder nobody fills): counted
    // then, not waited for.
    h->lone_answers.add(req.send().then(
        [](capnp::Response<wire::Session::SubmitResults> r) { h->reported += r.getDone().size(); }));
  } else {
    req.send().wait(h->io.waitScope);
  }
  if (!h->pump_until(expected) || h->server.metrics().agents > 16) {
    // Calls wait on placeholders nobody will fill, or agents pile up: start the next input clean.
    h->reset();
  }
  return 0;
}

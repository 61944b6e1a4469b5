// Example plugin: agents that echo, count, remember and fail on request. The tests use them to
// check hosting, ordering, memory, methods and error propagation.
#include <agentd/agent.h>
#include <agentd/error.h>

#include <chrono>
#include <stdexcept>
#include <thread>

// Replies with its input's content; args: {"prefix": "..."} is put in front of text content,
// {"sleep_ms": N} makes every reply block N ms. Remembers what it hears and says.
class EchoAgent : public agentd::Agent {
 public:
  explicit EchoAgent(agentd::AgentInit init) : Agent(std::move(init)) {
    if (args().contains("sleep_ms") && !args()["sleep_ms"].is_number_integer())
      throw agentd::Error(agentd::ErrorCode::bad_args, "sleep_ms must be an integer");
    prefix_ = args().value("prefix", std::string{});
    sleep_ms_ = args().value("sleep_ms", 0);
    register_method("ping", [](const agentd::Value&) { return agentd::Value("pong"); });
    register_method("count", [this](const agentd::Value&) { return agentd::Value(replies_); });
    register_method("add", [](const agentd::Value& a) {
      return agentd::Value(a.at("a").get<double>() + a.at("b").get<double>());
    });
  }

  agentd::Msg reply(const agentd::Msg& x) override {
    if (sleep_ms_ > 0) std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms_));
    memory().add(x);
    ++replies_;
    agentd::Value content = x.content;
    if (!prefix_.empty()) content = prefix_ + x.text();
    agentd::Msg out(name(), content);
    memory().add(out);
    return out;
  }

 private:
  std::string prefix_;
  int sleep_ms_ = 0;
  int replies_ = 0;
};
AGENTD_REGISTER_AGENT(EchoAgent);

// Appends its name to a text trail: "x" -> "x>A1". Chains of these show order and dataflow.
class TrailAgent : public agentd::Agent {
 public:
  using Agent::Agent;
  agentd::Msg reply(const agentd::Msg& x) override {
    memory().add(x);
    agentd::Msg out(name(), x.text() + ">" + name());
    memory().add(out);
    return out;
  }
};
AGENTD_REGISTER_AGENT(TrailAgent);

// Throws from reply when the input content is "fail"; otherwise echoes. Constructor throws when
// args has "fail_construct".
class FlakyAgent : public agentd::Agent {
 public:
  explicit FlakyAgent(agentd::AgentInit init) : Agent(std::move(init)) {
    if (args().contains("fail_construct")) throw std::invalid_argument("asked to fail in the constructor");
  }
  agentd::Msg reply(const agentd::Msg& x) override {
    if (x.text() == "fail") throw std::runtime_error("asked to fail");
    return agentd::Msg(name(), x.content);
  }
};
AGENTD_REGISTER_AGENT(FlakyAgent);

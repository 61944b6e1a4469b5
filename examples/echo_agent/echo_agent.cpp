// Example plugin: agents that echo, count, remember and fail on request. The tests use them to
// check hosting, ordering, memory, methods and error propagation.
#include <agentd/agent.h>
#include <agentd/client.h>
#include <agentd/error.h>

#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

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

  // Durable state: memory, name and args are saved by the host; the counter is this class's own.
  agentd::Value save_state() const override { return agentd::Value{{"replies", replies_}}; }
  void load_state(const agentd::Value& state) override { replies_ = state.value("replies", 0); }

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

// Nested agents: args {"target": <AgentRef::to_value() of another agent, on any server>}.
// Each reply asks the target and answers "relayed: <target's answer>".
class RelayAgent : public agentd::Agent {
 public:
  using Agent::Agent;
  agentd::Msg reply(const agentd::Msg& x) override {
    agentd::AgentRef target = agentd::connect_agent(*this, args().at("target"));
    agentd::Msg answer = target.reply(x).get();
    return agentd::Msg(name(), "relayed: " + answer.text());
  }
};
AGENTD_REGISTER_AGENT(RelayAgent);

// Large messages without sending them from the client: input content {"make_bytes": N} -> a
// reply with N bytes of binary content; any other input -> {"size": bytes of its content}.
class BlobAgent : public agentd::Agent {
 public:
  using Agent::Agent;
  agentd::Msg reply(const agentd::Msg& x) override {
    if (x.content.is_object() && x.content.contains("make_bytes")) {
      std::vector<std::uint8_t> blob(x.content["make_bytes"].get<std::size_t>());
      for (std::size_t i = 0; i < blob.size(); ++i) blob[i] = static_cast<std::uint8_t>(i * 31);
      return agentd::Msg(name(), agentd::Value::binary(std::move(blob)));
    }
    std::size_t size = x.content.is_binary()   ? x.content.get_binary().size()
                       : x.content.is_string() ? x.content.get_ref<const std::string&>().size()
                                               : x.content.dump().size();
    return agentd::Msg(name(), agentd::Value{{"size", size}});
  }
};
AGENTD_REGISTER_AGENT(BlobAgent);

// Streamed replies (AgentRef::reply_stream, `agentctl call --stream`): emits its reply in chunks
// while producing it, and returns the whole text as the reply.
//   text input          emits it word by word ("a b c" -> "a ", "b ", "c"); replies with it
//   {"count": N}        emits N chunks "0 ", "1 ", ...; replies with their concatenation
//     "gap_ms": M       waits M ms after each chunk (a model producing tokens)
//     "fail_after": K   throws after emitting K chunks (a model failing mid-stream)
//     "clock": true     each chunk is the steady_clock time (ns, decimal) it was emitted at,
//                       then a space: agentd-bench measures chunk latency with it (on Linux
//                       steady_clock is CLOCK_MONOTONIC, comparable across processes)
class StreamEchoAgent : public agentd::Agent {
 public:
  using Agent::Agent;
  agentd::Msg reply(const agentd::Msg& x) override {
    std::string whole;
    if (!x.content.is_object()) {
      const std::string text = x.text();
      std::size_t start = 0;
      while (start < text.size()) {
        std::size_t end = text.find(' ', start);
        end = end == std::string::npos ? text.size() : end + 1;
        emit(whole, text.substr(start, end - start));
        start = end;
      }
      return agentd::Msg(name(), whole);
    }
    const auto count = x.content.value("count", std::int64_t{0});
    const auto gap = std::chrono::milliseconds(x.content.value("gap_ms", 0));
    const auto fail_after = x.content.value("fail_after", std::int64_t{-1});
    const bool clock = x.content.value("clock", false);
    for (std::int64_t i = 0; i < count; ++i) {
      if (i == fail_after) throw std::runtime_error("asked to fail after " + std::to_string(i) + " chunks");
      if (clock) {
        auto now = std::chrono::steady_clock::now().time_since_epoch();
        emit(whole, std::to_string(std::chrono::nanoseconds(now).count()) + " ");
      } else {
        emit(whole, std::to_string(i) + " ");
      }
      if (gap.count() > 0) std::this_thread::sleep_for(gap);
    }
    if (fail_after == count)
      throw std::runtime_error("asked to fail after " + std::to_string(count) + " chunks");
    return agentd::Msg(name(), whole);
  }

 private:
  void emit(std::string& whole, const std::string& piece) {
    emit_chunk(piece);
    whole += piece;
  }
};
AGENTD_REGISTER_AGENT(StreamEchoAgent);

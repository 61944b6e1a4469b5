// agentd::AgentRef (libagentd/src/client/agent_ref): replies, methods, observations and memory of
// one agent through a client's connection core, with the agents in this process (Client::local)
// so that the test sees the order the agent ran its calls in.
#include "error_of.h"

#include <agentd/client.h>

#include <catch2/catch.hpp>

#include <string>
#include <vector>

using namespace agentd;
using agentd::test::error_of;
using Catch::Matchers::Contains;

namespace {

// Remembers what it is given and answers with prefix + the input's text; "count" tells how many
// replies it has run, "add" sums args a and b.
class TallyAgent : public Agent {
 public:
  explicit TallyAgent(AgentInit init) : Agent(std::move(init)) {
    register_method("count", [this](const Value&) { return Value(replies_); });
    register_method("add", [](const Value& a) { return Value(a.at("a").get<int>() + a.at("b").get<int>()); });
  }
  Msg reply(const Msg& x) override {
    ++replies_;
    memory().add(x);
    return Msg(name(), args().value("prefix", std::string{}) + x.text());
  }

 private:
  int replies_ = 0;
};

LocalOptions tally_options() {
  LocalOptions o;
  o.classes = {agent_class<TallyAgent>("TallyAgent")};
  o.max_workers = 4;
  return o;
}

std::vector<std::string> texts(const std::vector<Msg>& msgs) {
  std::vector<std::string> out;
  for (const auto& m : msgs) out.push_back(m.text());
  return out;
}

}  // namespace

TEST_CASE(
    "an AgentRef's replies, calls, observations and memory reach its agent in the order "
    "they were made",
    "[client][agent_ref]") {
  auto client = Client::local(tally_options());
  auto a = client.create_agent("TallyAgent", "T", Value{{"prefix", "re: "}});
  CHECK(a.name() == "T");
  CHECK(a.class_name() == "TallyAgent");

  constexpr int kReplies = 30;
  std::vector<Placeholder> ps;
  std::vector<std::string> want;
  for (int i = 0; i < kReplies; ++i) {
    ps.push_back(a.reply(Msg("user", std::to_string(i), "user")));
    want.push_back(std::to_string(i));
  }
  a.observe(Msg("user", "seen", "user"));
  want.push_back("seen");
  // The method waits for every reply queued before it, without anyone waiting on them.
  CHECK(a.call("count") == Value(kReplies));
  for (int i = 0; i < kReplies; ++i) CHECK(ps[i].get().text() == "re: " + std::to_string(i));
  CHECK(texts(a.memory()) == want);

  // The () operator is reply().
  CHECK(a(Msg("user", "op", "user")).get().text() == "re: op");
  CHECK(a.call("add", Value{{"a", 2}, {"b", 40}}) == Value(42));
  // call_async: the method's value as the message content.
  CHECK(a.call_async("count").get().content == Value(kReplies + 1));
}

TEST_CASE("a reply given a placeholder runs on its message once it is ready", "[client][agent_ref]") {
  auto client = Client::local(tally_options());
  auto a = client.create_agent("TallyAgent", "A", Value{{"prefix", "a:"}});
  auto b = client.create_agent("TallyAgent", "B", Value{{"prefix", "b:"}});
  Placeholder first = a.reply(Msg("user", "x", "user"));
  Placeholder second = b.reply(first);
  Placeholder third = a(second);
  CHECK(third.get().text() == "a:b:a:x");
  CHECK(texts(b.memory()) == std::vector<std::string>{"a:x"});
}

TEST_CASE("AgentRef errors: an unknown method, a negative deadline, an unknown agent",
          "[client][agent_ref]") {
  auto client = Client::local(tally_options());
  auto a = client.create_agent("TallyAgent", "T");

  Error e = error_of([&] { a.call("nope"); });
  CHECK(e.code() == ErrorCode::unknown_method);
  CHECK_THAT(e.message(), Contains("count"));  // lists the known ones

  e = error_of([&] { a.with_timeout(std::chrono::milliseconds(-1)); });
  CHECK(e.code() == ErrorCode::bad_args);
  CHECK(a.with_timeout(std::chrono::milliseconds(250)).timeout() == std::chrono::milliseconds(250));
  CHECK(a.timeout() == std::chrono::milliseconds(0));  // the copy has it, not the original

  e = error_of([&] { client.agent("no-such-agent"); });
  CHECK(e.code() == ErrorCode::unknown_agent);
  // client.agent(id) finds an existing one under its name and class.
  auto again = client.agent(a.id());
  CHECK(again.name() == "T");
  CHECK(again.class_name() == "TallyAgent");
  const auto before = again.info().completed_calls;
  again.reply(Msg("user", "one", "user")).get();
  CHECK(a.info().completed_calls == before + 1);
}

#include <agentd/msg.h>

#include <catch2/catch.hpp>

TEST_CASE("Msg fills id and timestamp and round-trips through JSON", "[msg]") {
  agentd::Msg m("alice", agentd::Value{{"k", 1}}, "user");
  CHECK(m.id.size() == 32);
  CHECK(m.timestamp.size() == 19);
  CHECK(agentd::msg_from_json(agentd::to_json(m)) == m);
}

TEST_CASE("text() of content holding bytes that are not UTF-8 does not throw", "[msg][hostile]") {
  // Content comes from the wire as it was sent (Cap'n Proto Text is not checked for UTF-8).
  agentd::Msg m("user", agentd::Value{{"k", std::string("a\x91z")}});
  std::string text;
  REQUIRE_NOTHROW(text = m.text());
  CHECK(text == "{\"k\":\"a\xEF\xBF\xBDz\"}");
}

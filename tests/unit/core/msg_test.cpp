#include <agentd/msg.h>

#include <catch2/catch.hpp>

TEST_CASE("Msg fills id and timestamp and round-trips through JSON", "[msg]") {
  agentd::Msg m("alice", agentd::Value{{"k", 1}}, "user");
  CHECK(m.id.size() == 32);
  CHECK(m.timestamp.size() == 19);
  CHECK(agentd::msg_from_json(agentd::to_json(m)) == m);
}

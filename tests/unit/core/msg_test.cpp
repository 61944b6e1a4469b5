#include <agentd/msg.h>

#include <catch2/catch.hpp>

#include <ctime>
#include <string>
#include <thread>

namespace {

std::string local_time(std::time_t t) {
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[32];
  return std::string(buf, std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm));
}

// The Msg's stamp is the local time at its construction (to the second).
void check_stamped_now(const agentd::Msg& made_between_before, std::time_t before, std::time_t after) {
  const std::string& stamp = made_between_before.timestamp;
  CHECK((stamp == local_time(before) || stamp == local_time(after)));
}

}  // namespace

TEST_CASE("Msg fills id and timestamp and round-trips through JSON", "[msg]") {
  agentd::Msg m("alice", agentd::Value{{"k", 1}}, "user");
  CHECK(m.id.size() == 32);
  CHECK(m.timestamp.size() == 19);
  CHECK(agentd::msg_from_json(agentd::to_json(m)) == m);
}

TEST_CASE("Msg timestamps follow the clock from one second to the next", "[msg]") {
  std::time_t before = std::time(nullptr);
  agentd::Msg first("alice", "one");
  check_stamped_now(first, before, std::time(nullptr));
  // The stamp is formatted once per second: the next second's messages carry the next second.
  const std::time_t start = std::time(nullptr);
  while (std::time(nullptr) == start) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  before = std::time(nullptr);
  agentd::Msg second("alice", "two");
  check_stamped_now(second, before, std::time(nullptr));
  CHECK(second.timestamp != local_time(start));
}

TEST_CASE("text() of content holding bytes that are not UTF-8 does not throw", "[msg][hostile]") {
  // Content comes from the wire as it was sent (Cap'n Proto Text is not checked for UTF-8).
  agentd::Msg m("user", agentd::Value{{"k", std::string("a\x91z")}});
  std::string text;
  REQUIRE_NOTHROW(text = m.text());
  CHECK(text == "{\"k\":\"a\xEF\xBF\xBDz\"}");
}

// outcome_codec: a call's message or error comes back from its wire form; over the inline limit
// a message is announced as tooLarge with its size instead, which is not read as a whole one;
// the size estimates bound what is written.
#include "outcome_codec.h"
#include "value_codec.h"

#include <capnp/message.h>
#include <catch2/catch.hpp>

#include <string>

namespace detail = agentd::detail;
namespace wire = agentd::wire;
using agentd::Error;
using agentd::ErrorCode;
using agentd::Msg;

namespace {

Msg sample_msg(std::size_t text_bytes) {
  Msg m;
  m.id = "m-1";
  m.name = "planner";
  m.role = "assistant";
  m.content = std::string(text_bytes, 'x');
  m.metadata = {{"k", 1}};
  m.url = {"https://example.org/a"};
  m.timestamp = "2026-01-01 00:00:00";
  return m;
}

}  // namespace

TEST_CASE("a message outcome survives the trip through its wire form", "[outcome_codec]") {
  const detail::Outcome o = sample_msg(100);
  capnp::MallocMessageBuilder mb;
  auto root = mb.initRoot<wire::Outcome>();
  detail::write_outcome(o, root);
  REQUIRE(root.isMsg());
  const detail::Outcome back = detail::read_outcome(root.asReader());
  REQUIRE(std::holds_alternative<Msg>(back));
  const Msg& m = std::get<Msg>(back);
  CHECK(m.id == "m-1");
  CHECK(m.name == "planner");
  CHECK(m.role == "assistant");
  CHECK(m.content == std::string(100, 'x'));
  CHECK(m.metadata.at("k") == 1);
  CHECK(m.url == std::vector<std::string>{"https://example.org/a"});
  CHECK(m.timestamp == "2026-01-01 00:00:00");
}

TEST_CASE("an error outcome survives the trip through its wire form", "[outcome_codec]") {
  const detail::Outcome o = Error::retryable(ErrorCode::overloaded, "busy", "a-1");
  capnp::MallocMessageBuilder mb;
  auto root = mb.initRoot<wire::Outcome>();
  detail::write_outcome(o, root, /*inline_limit=*/1);  // the limit is for messages only
  REQUIRE(root.isError());
  const detail::Outcome back = detail::read_outcome(root.asReader());
  REQUIRE(std::holds_alternative<Error>(back));
  const Error& e = std::get<Error>(back);
  CHECK(e.code() == ErrorCode::overloaded);
  CHECK(e.message() == "busy");
  CHECK(e.agent_id() == "a-1");
  CHECK(e.retryable());
}

TEST_CASE("a message over the inline limit is announced, not sent", "[outcome_codec]") {
  const Msg big = sample_msg(10000);
  const detail::Outcome o = big;
  const std::size_t size = detail::approx_wire_size(big);
  capnp::MallocMessageBuilder mb;
  auto root = mb.initRoot<wire::Outcome>();
  detail::write_outcome(o, root, /*inline_limit=*/size - 1);
  REQUIRE(root.isTooLarge());
  CHECK(root.getTooLarge() == size);
  CHECK(detail::outcome_size(o, size - 1) < 100);  // only the announcement goes
  CHECK_THROWS_AS(detail::read_outcome(root.asReader()), Error);
  // At the limit it is sent whole.
  capnp::MallocMessageBuilder whole;
  auto at = whole.initRoot<wire::Outcome>();
  detail::write_outcome(o, at, /*inline_limit=*/size);
  CHECK(at.isMsg());
  CHECK(detail::outcome_size(o, size) == size);
}

TEST_CASE("the size estimates cover what is written", "[outcome_codec]") {
  const Msg m = sample_msg(50000);
  capnp::MallocMessageBuilder mb;
  detail::write_outcome(detail::Outcome(m), mb.initRoot<wire::Outcome>());
  const std::size_t written = mb.sizeInWords() * sizeof(capnp::word);
  CHECK(detail::outcome_size(detail::Outcome(m), 0) >= 50000);
  CHECK(written >= 50000);
  const Error e(ErrorCode::agent_failed, std::string(300, 'e'), "a-1", "Planner");
  CHECK(detail::error_size(e) >= 300 + 3 + 7);
}

TEST_CASE("unknown_agent_error names the agent", "[outcome_codec]") {
  const Error e = detail::unknown_agent_error("a-9");
  CHECK(e.code() == ErrorCode::unknown_agent);
  CHECK(e.agent_id() == "a-9");
  CHECK(e.message() == "no agent 'a-9' on this server");
}

TEST_CASE("an outcome's usage goes with it, also when the message is announced too large",
          "[outcome_codec]") {
  detail::Outcome o = sample_msg(1000);
  o.usage = agentd::CallUsage{2, 30, 40};
  for (std::uint64_t limit : {std::uint64_t{0}, std::uint64_t{100}}) {
    INFO("inline limit " << limit);
    capnp::MallocMessageBuilder mb;
    auto root = mb.initRoot<wire::Outcome>();
    detail::write_outcome(o, root, limit);
    CHECK(root.isTooLarge() == (limit != 0));
    REQUIRE(root.hasUsage());
    CHECK(detail::read_usage(root.asReader()) == o.usage);
    if (limit == 0) CHECK(detail::read_outcome(root.asReader()).usage == o.usage);
  }
  // An error keeps it too; no usage writes nothing (and reads as zeros).
  detail::Outcome failed = Error(ErrorCode::agent_failed, "broke");
  failed.usage = agentd::CallUsage{1, 5, 0};
  capnp::MallocMessageBuilder mb;
  auto root = mb.initRoot<wire::Outcome>();
  detail::write_outcome(failed, root);
  CHECK(detail::read_outcome(root.asReader()).usage == failed.usage);
  capnp::MallocMessageBuilder none;
  auto plain = none.initRoot<wire::Outcome>();
  detail::write_outcome(detail::Outcome(sample_msg(10)), plain);
  CHECK_FALSE(plain.hasUsage());
  CHECK(detail::read_outcome(plain.asReader()).usage.empty());
  CHECK(detail::outcome_size(o, 0) == detail::outcome_size(detail::Outcome(sample_msg(1000)), 0) + 32);
}

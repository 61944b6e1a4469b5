// value_codec: every Value kind, Msg and Error survive the trip through the wire form.
#include "value_codec.h"
#include "kj_errors.h"
#include "test_names.h"

#include <capnp/message.h>
#include <catch2/catch.hpp>

#include <limits>

using namespace agentd::test;
namespace detail = agentd::detail;
namespace wire = agentd::wire;

namespace {

Value round_trip(const Value& v) {
  capnp::MallocMessageBuilder mb;
  auto root = mb.initRoot<wire::Value>();
  detail::write_value(v, root);
  return detail::read_value(root.asReader());
}

}  // namespace

TEST_CASE("scalar values keep their value and kind", "[value_codec]") {
  CHECK(round_trip(nullptr).is_null());
  CHECK(round_trip(true) == Value(true));
  CHECK(round_trip(false) == Value(false));
  auto neg = round_trip(std::int64_t{-42});
  CHECK(neg.is_number_integer());
  CHECK(neg.get<std::int64_t>() == -42);
  auto big = round_trip(std::numeric_limits<std::uint64_t>::max());
  CHECK(big.is_number_unsigned());
  CHECK(big.get<std::uint64_t>() == std::numeric_limits<std::uint64_t>::max());
  auto minimum = round_trip(std::numeric_limits<std::int64_t>::min());
  CHECK(minimum.get<std::int64_t>() == std::numeric_limits<std::int64_t>::min());
  auto f = round_trip(3.25);
  CHECK(f.is_number_float());
  CHECK(f.get<double>() == 3.25);
  CHECK(round_trip("hello").get<std::string>() == "hello");
  CHECK(round_trip("").get<std::string>().empty());
  CHECK(round_trip("caf\xc3\xa9 \xe2\x9c\x93").get<std::string>() == "caf\xc3\xa9 \xe2\x9c\x93");
}

TEST_CASE("binary stays binary, byte for byte", "[value_codec]") {
  std::vector<std::uint8_t> bytes;
  for (int i = 0; i < 256; ++i) bytes.push_back(static_cast<std::uint8_t>(i));
  auto v = round_trip(Value::binary(bytes));
  REQUIRE(v.is_binary());
  CHECK(std::vector<std::uint8_t>(v.get_binary().begin(), v.get_binary().end()) == bytes);
  auto empty = round_trip(Value::binary({}));
  REQUIRE(empty.is_binary());
  CHECK(empty.get_binary().empty());
}

TEST_CASE("nested lists and objects round-trip", "[value_codec]") {
  Value v = {{"a", 1},
             {"b", {1, "two", 3.5, nullptr, false}},
             {"c", {{"d", {{"e", Value::binary({1, 2, 3})}}}, {"empty_list", Value::array()}}},
             {"empty_object", Value::object()}};
  CHECK(round_trip(v) == v);
  CHECK(round_trip(Value::array()) == Value::array());
  CHECK(round_trip(Value::object()) == Value::object());
}

TEST_CASE("a Msg round-trips with every field", "[value_codec]") {
  Msg m("alice", Value{{"text", "hi"}, {"blob", Value::binary({9, 8, 7})}}, "user");
  m.metadata = Value{{"k", 1}};
  m.url = {"http://a/1", "http://b/2"};
  capnp::MallocMessageBuilder mb;
  auto root = mb.initRoot<wire::Msg>();
  detail::write_msg(m, root);
  Msg back = detail::read_msg(root.asReader());
  CHECK(back == m);
  CHECK(back.url.size() == 2);

  Msg bare;
  capnp::MallocMessageBuilder mb2;
  auto root2 = mb2.initRoot<wire::Msg>();
  detail::write_msg(bare, root2);
  CHECK(detail::read_msg(root2.asReader()) == bare);
}

TEST_CASE("errors keep code, message, agent, class and retryability on the wire", "[value_codec]") {
  for (int i = 0; i <= static_cast<int>(ErrorCode::too_large); ++i) {
    auto code = static_cast<ErrorCode>(i);
    CHECK(detail::from_wire(detail::to_wire(code)) == code);
    Error e(code, "why " + std::to_string(i), "agent-" + std::to_string(i), "Cls", i % 2 == 0);
    capnp::MallocMessageBuilder mb;
    auto root = mb.initRoot<wire::Error>();
    detail::write_error(e, root);
    Error back = detail::read_error(root.asReader());
    CHECK(back.code() == code);
    CHECK(back.message() == e.message());
    CHECK(back.agent_id() == e.agent_id());
    CHECK(back.agent_class() == "Cls");
    CHECK(back.retryable() == (i % 2 == 0));
  }
}

TEST_CASE("Cap'n Proto faults map to typed errors", "[value_codec]") {
  kj::Exception disc(kj::Exception::Type::DISCONNECTED, __FILE__, __LINE__, kj::str("peer gone"));
  auto e = detail::error_from_kj(disc, "calling x");
  CHECK(e.code() == ErrorCode::disconnected);
  CHECK(e.retryable());
  CHECK_THAT(e.message(), Catch::Matchers::Contains("calling x") && Catch::Matchers::Contains("peer gone"));
  kj::Exception over(kj::Exception::Type::OVERLOADED, __FILE__, __LINE__, kj::str("busy"));
  CHECK(detail::error_from_kj(over).code() == ErrorCode::overloaded);
  kj::Exception failed(kj::Exception::Type::FAILED, __FILE__, __LINE__, kj::str("bug"));
  CHECK(detail::error_from_kj(failed).code() == ErrorCode::internal);
  CHECK_FALSE(detail::error_from_kj(failed).retryable());
  // A method the other end does not have: the request was wrong, not the server.
  kj::Exception unimplemented(kj::Exception::Type::UNIMPLEMENTED, __FILE__, __LINE__,
                              kj::str("no such method"));
  CHECK(detail::error_from_kj(unimplemented).code() == ErrorCode::bad_request);
  // An agentd::Error carried through a promise comes back whole, in its context.
  auto carried = detail::error_from_kj(
      detail::to_kj_exception(std::make_exception_ptr(Error(ErrorCode::unknown_agent, "gone", "a1"))),
      "calling a1");
  CHECK(carried.code() == ErrorCode::unknown_agent);
  CHECK(carried.agent_id() == "a1");
  CHECK(carried.message() == "calling a1: gone");
}

TEST_CASE("values too deep or not UTF-8 are refused when read, naming where", "[value_codec]") {
  Value at_limit = "x";
  for (int i = 0; i < 64; ++i) at_limit = Value{{"d", std::move(at_limit)}};
  CHECK(round_trip(at_limit) == at_limit);
  Value deeper = Value::array({at_limit});
  try {
    round_trip(deeper);
    FAIL("read a value nested 65 levels deep");
  } catch (const agentd::Error& e) {
    CHECK(e.code() == agentd::ErrorCode::bad_request);
    CHECK(e.message().find("nested deeper than 64 levels") != std::string::npos);
    CHECK(e.message().find("at /0/d/d") != std::string::npos);
  }
  try {
    round_trip(Value{{"k", {"fine", std::string("bad \xff")}}});
    FAIL("read text that is not UTF-8");
  } catch (const agentd::Error& e) {
    CHECK(e.code() == agentd::ErrorCode::bad_request);
    CHECK(e.message().find("at /k/1") != std::string::npos);
    CHECK(e.message().find("byte 4 is 0xff") != std::string::npos);
  }
}

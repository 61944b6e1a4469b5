// value_limits: the depth and UTF-8 checks and the bounded JSON parse every input goes through.
#include <agentd/value_limits.h>

#include <catch2/catch.hpp>

#include <string>

using agentd::Value;
using Catch::Matchers::Contains;

namespace {

Value nested_lists(int depth) {
  Value v = 1;
  for (int i = 0; i < depth; ++i) v = Value::array({std::move(v)});
  return v;
}

}  // namespace

TEST_CASE("values nest at most kMaxValueDepth levels", "[value_limits]") {
  CHECK(agentd::kMaxValueDepth == 64);
  CHECK(agentd::value_problem(nested_lists(64)).empty());
  CHECK_THAT(agentd::value_problem(nested_lists(65)),
             Contains("nested deeper than 64 levels") && Contains("at /0/0/0"));
  CHECK(agentd::value_problem(nested_lists(20000)).find("64 levels") != std::string::npos);
  Value objects = "x";
  for (int i = 0; i < 65; ++i) objects = Value{{"k", std::move(objects)}};
  CHECK_THAT(agentd::value_problem(objects), Contains("at /k/k"));
}

TEST_CASE("text is checked for UTF-8, naming the byte", "[value_limits]") {
  CHECK(agentd::utf8_problem("plain, héllo, 世界, 🎉").empty());
  CHECK_THAT(agentd::utf8_problem("ab\xff"), Contains("byte 2 is 0xff"));
  CHECK_THAT(agentd::utf8_problem("ab\xc3"), Contains("byte 2"));            // cut short
  CHECK_THAT(agentd::utf8_problem("\xc0\xaf"), Contains("byte 0"));          // overlong
  CHECK_THAT(agentd::utf8_problem("\xed\xa0\x80"), Contains("byte 1"));      // a surrogate
  CHECK_THAT(agentd::utf8_problem("\xf4\x90\x80\x80"), Contains("byte 1"));  // past U+10FFFF
  // The whole characters before the first bad one: where a parser says the problem is.
  CHECK(agentd::utf8_prefix_length("héllo") == 6);
  CHECK(agentd::utf8_prefix_length("h\xc3\xa9\xff") == 3);
  CHECK(agentd::utf8_prefix_length("ab\xe2\x82") == 2);  // a character cut short starts the bad part
  CHECK(agentd::utf8_prefix_length("\xed\xa0\x80") == 0);
  CHECK(agentd::utf8_prefix_length("") == 0);
  CHECK(agentd::utf8_replaced("a\xff"
                              "b") ==
        "a\xEF\xBF\xBD"
        "b");
  CHECK_THAT(agentd::value_problem(Value{{"k", {"ok", "bad \xff"}}}),
             Contains("at /k/1") && Contains("not UTF-8"));
  CHECK_THAT(agentd::value_problem(Value{{"bad \xff", 1}}), Contains("a key that is not UTF-8"));
  agentd::Msg m("name \xfe", "fine");
  CHECK_THAT(agentd::msg_problem(m), Contains("the message's name is not UTF-8"));
}

TEST_CASE("long text is checked byte by byte, whatever its alignment", "[value_limits]") {
  // ASCII is skipped eight bytes at a time: a bad byte or a character anywhere in a run, and a
  // run of any length, is still found where it is.
  for (std::size_t len = 1; len <= 40; ++len) {
    const std::string ascii(len, 'a');
    CHECK(agentd::utf8_prefix_length(ascii) == len);
    CHECK(agentd::utf8_problem(ascii).empty());
    for (std::size_t at = 0; at < len; ++at) {
      std::string bad = ascii;
      bad[at] = '\xff';
      CHECK(agentd::utf8_prefix_length(bad) == at);
      CHECK_THAT(agentd::utf8_problem(bad), Contains("byte " + std::to_string(at) + " is 0xff"));
      std::string two = ascii;
      two.replace(at, 1, "\xc3\xa9");  // é: a valid two-byte character in the run
      CHECK(agentd::utf8_prefix_length(two) == two.size());
      std::string cut = ascii.substr(0, at) + "\xe2\x82";  // a character cut short at the end
      CHECK(agentd::utf8_prefix_length(cut) == at);
    }
  }
}

TEST_CASE("JSON is parsed with its nesting bounded, before anything is built", "[value_limits]") {
  auto ok = agentd::parse_value(R"({"a": [1, "[[[[", {"b": null}]})");
  REQUIRE(ok);
  CHECK(ok.value["a"][1] == "[[[[");  // brackets inside strings do not count
  CHECK(agentd::parse_value(std::string(64, '[') + std::string(64, ']')));
  auto deep = agentd::parse_value(std::string(20000, '[') + std::string(20000, ']'));
  CHECK_FALSE(deep);
  CHECK(deep.value.is_discarded());
  CHECK(deep.too_deep);
  CHECK_THAT(deep.error, Contains("nested deeper than 64 levels") && Contains("byte 64"));
  auto bad = agentd::parse_value("{not json");
  CHECK_FALSE(bad);
  CHECK_FALSE(bad.too_deep);
  CHECK_THAT(bad.error, Contains("parse error"));
  CHECK_FALSE(agentd::parse_value("\"\xff\""));  // JSON text must be UTF-8 too
}

// The json log format (log.h): every record is one line holding one JSON object with time,
// level and msg, whatever the message contains, so journald lines and log shippers can parse
// each line on its own. setup_logging() makes it the default logger's format on stderr.
#include "log.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <spdlog/details/log_msg.h>
#include <spdlog/logger.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

using agentd::detail::make_json_formatter;
using agentd::detail::setup_logging;
using Catch::Matchers::Matches;

namespace {

// What the json formatter makes of one record.
std::string format(spdlog::level::level_enum level, const std::string& payload,
                   spdlog::log_clock::time_point time = spdlog::log_clock::now()) {
  auto f = make_json_formatter();
  spdlog::details::log_msg msg(time, spdlog::source_loc{}, "test", level,
                               spdlog::string_view_t(payload.data(), payload.size()));
  spdlog::memory_buf_t out;
  f->format(msg, out);
  return std::string(out.data(), out.size());
}

// Splits on '\n'; each line must end with one (no partial last line).
std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::size_t begin = 0;
  for (std::size_t nl; (nl = text.find('\n', begin)) != std::string::npos; begin = nl + 1)
    out.push_back(text.substr(begin, nl - begin));
  CHECK(begin == text.size());
  return out;
}

// One line parsed: an object with exactly time, level and msg, all strings.
nlohmann::json parse_line(const std::string& line) {
  INFO("line: " << line);
  auto j = nlohmann::json::parse(line);  // throws, failing the test, on anything else
  REQUIRE(j.is_object());
  std::set<std::string> keys;
  for (const auto& [k, v] : j.items()) {
    keys.insert(k);
    CHECK(v.is_string());
  }
  CHECK(keys == std::set<std::string>{"time", "level", "msg"});
  return j;
}

// Sends what this process writes to fd 2 into a file for the scope; text() reads it back.
class CaptureStderr {
 public:
  CaptureStderr() {
    std::fflush(stderr);
    char path[] = "/tmp/agentd-log-test-XXXXXX";
    fd_ = ::mkstemp(path);
    REQUIRE(fd_ >= 0);
    ::unlink(path);
    saved_ = ::dup(STDERR_FILENO);
    REQUIRE(saved_ >= 0);
    REQUIRE(::dup2(fd_, STDERR_FILENO) == STDERR_FILENO);
  }
  ~CaptureStderr() {
    std::fflush(stderr);
    ::dup2(saved_, STDERR_FILENO);
    ::close(saved_);
    ::close(fd_);
  }
  CaptureStderr(const CaptureStderr&) = delete;
  CaptureStderr& operator=(const CaptureStderr&) = delete;

  std::string text() const {
    std::fflush(stderr);
    std::string out;
    char buf[4096];
    for (off_t at = 0;;) {
      auto n = ::pread(fd_, buf, sizeof buf, at);
      if (n <= 0) break;
      out.append(buf, static_cast<std::size_t>(n));
      at += n;
    }
    return out;
  }

 private:
  int fd_ = -1;
  int saved_ = -1;
};

// Puts back the default logger setup_logging() replaced (and forgets its "as_server" logger).
class RestoreDefaultLogger {
 public:
  RestoreDefaultLogger() : saved_(spdlog::default_logger()) {}
  ~RestoreDefaultLogger() {
    spdlog::set_default_logger(saved_);
    spdlog::drop("as_server");
  }
  RestoreDefaultLogger(const RestoreDefaultLogger&) = delete;
  RestoreDefaultLogger& operator=(const RestoreDefaultLogger&) = delete;

 private:
  std::shared_ptr<spdlog::logger> saved_;
};

}  // namespace

TEST_CASE("a json log record is one line with time (UTC, milliseconds), level and msg", "[log]") {
  // 2024-05-06T07:08:09.123Z
  auto t = std::chrono::system_clock::time_point(std::chrono::seconds(1714979289)) +
           std::chrono::milliseconds(123);
  std::string out = format(spdlog::level::info, "server listening on 127.0.0.1:12310", t);
  REQUIRE(lines_of(out).size() == 1);
  auto j = parse_line(lines_of(out)[0]);
  CHECK(j["time"] == "2024-05-06T07:08:09.123Z");
  CHECK(j["level"] == "info");
  CHECK(j["msg"] == "server listening on 127.0.0.1:12310");

  // Milliseconds keep their leading zeros.
  auto t2 =
      std::chrono::system_clock::time_point(std::chrono::seconds(1714979289)) + std::chrono::milliseconds(7);
  CHECK(parse_line(lines_of(format(spdlog::level::info, "x", t2))[0])["time"] == "2024-05-06T07:08:09.007Z");
  // Now, as the logger stamps it.
  CHECK_THAT(parse_line(lines_of(format(spdlog::level::info, "x"))[0])["time"].get<std::string>(),
             Matches(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z)"));
}

TEST_CASE("a json log record names its level", "[log]") {
  using spdlog::level::level_enum;
  const std::vector<std::pair<level_enum, std::string>> levels = {
      {spdlog::level::trace, "trace"}, {spdlog::level::debug, "debug"},
      {spdlog::level::info, "info"},   {spdlog::level::warn, "warning"},
      {spdlog::level::err, "error"},   {spdlog::level::critical, "critical"}};
  for (const auto& [level, name] : levels) {
    INFO(name);
    CHECK(parse_line(lines_of(format(level, "m"))[0])["level"] == name);
  }
}

TEST_CASE(
    "a json log message with quotes, backslashes, newlines and control characters stays "
    "one parseable line",
    "[log]") {
  const std::vector<std::string> messages = {
      R"(agent "a1" said "hi")",
      R"(C:\path\to\file and a trailing backslash \)",
      "line one\nline two\r\nline three\n",
      "tab\tbell\a nul-free controls \x01\x02\x1b[31m\x1f and DEL \x7f",
      std::string("embedded\0nul", 12),
      R"({"msg":"not a field","level":"critical"})",
      "\xc3\xa9t\xc3\xa9 \xe2\x9c\x93 \xf0\x9f\x98\x80",  // UTF-8 stays as it is
      "",
      std::string(100000, 'x') + "\n" + std::string(1000, '"'),
  };
  for (const auto& m : messages) {
    INFO("message: " << nlohmann::json(m).dump());
    std::string out = format(spdlog::level::warn, m);
    auto lines = lines_of(out);
    REQUIRE(lines.size() == 1);
    // No raw control character survives inside the line.
    CHECK(std::none_of(lines[0].begin(), lines[0].end(), [](unsigned char c) { return c < 0x20; }));
    CHECK(parse_line(lines[0])["msg"] == m);
  }
}

TEST_CASE("a json log message that is not valid UTF-8 still gives a parseable line", "[log]") {
  // E.g. an agent's output logged as it came: the bad bytes are replaced, nothing is dropped.
  std::string m = "before \xff\xfe after \xc3 end";
  std::string out = format(spdlog::level::err, m);
  auto lines = lines_of(out);
  REQUIRE(lines.size() == 1);
  auto msg = parse_line(lines[0])["msg"].get<std::string>();
  CHECK_THAT(msg, Catch::Matchers::StartsWith("before ") && Catch::Matchers::EndsWith(" end"));
  CHECK_THAT(msg, Catch::Matchers::Contains("\xef\xbf\xbd"));  // U+FFFD
  CHECK_THAT(msg, Catch::Matchers::Contains(" after "));
}

TEST_CASE("a logger with the json formatter writes one parseable line per record", "[log]") {
  // set_formatter() hands each sink a clone of the formatter: the clone must format alike.
  std::ostringstream os;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(os);
  spdlog::logger logger("json-test", sink);
  logger.set_formatter(make_json_formatter());
  logger.set_level(spdlog::level::debug);
  logger.info("agent {} answered {}", "a\"1", "multi\nline");
  logger.trace("below the level: not written");
  logger.error("failed: {}", "back\\slash");
  auto lines = lines_of(os.str());
  REQUIRE(lines.size() == 2);
  auto first = parse_line(lines[0]);
  CHECK(first["level"] == "info");
  CHECK(first["msg"] == "agent a\"1 answered multi\nline");
  auto second = parse_line(lines[1]);
  CHECK(second["level"] == "error");
  CHECK(second["msg"] == "failed: back\\slash");
}

TEST_CASE(
    "setup_logging with json makes the default logger write json lines to stderr at the "
    "given level",
    "[log]") {
  RestoreDefaultLogger restore;
  CaptureStderr err;
  setup_logging("warn", "json");
  spdlog::info("not at warn: not written");
  spdlog::warn("disk \"almost\" full\nretrying");
  spdlog::error("gave up");
  auto lines = lines_of(err.text());
  REQUIRE(lines.size() == 2);
  auto w = parse_line(lines[0]);
  CHECK(w["level"] == "warning");
  CHECK(w["msg"] == "disk \"almost\" full\nretrying");
  CHECK(parse_line(lines[1])["msg"] == "gave up");
}

TEST_CASE("setup_logging with text writes plain lines, not json", "[log]") {
  RestoreDefaultLogger restore;
  CaptureStderr err;
  setup_logging("info", "text");
  spdlog::info("hello");
  auto lines = lines_of(err.text());
  REQUIRE(lines.size() == 1);
  // 2024-05-06T07:08:09.123 info hello (the level may be wrapped in colour codes on a tty)
  CHECK_THAT(lines[0], Matches(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3} .*info.* hello)"));
  CHECK_FALSE(nlohmann::json::accept(lines[0]));
}

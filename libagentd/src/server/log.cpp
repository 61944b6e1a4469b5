#include "log.h"

#include <fmt/chrono.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <chrono>

namespace agentd::detail {

namespace {

// One JSON object per line; nlohmann escapes the message (control characters, quotes, bad UTF-8).
class JsonFormatter final : public spdlog::formatter {
 public:
  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override {
    using namespace std::chrono;
    auto ms = duration_cast<milliseconds>(msg.time.time_since_epoch()) % 1000;
    auto secs = system_clock::to_time_t(msg.time);
    nlohmann::ordered_json line{
        {"time", fmt::format("{:%Y-%m-%dT%H:%M:%S}.{:03}Z", fmt::gmtime(secs), ms.count())},
        {"level", std::string(spdlog::level::to_string_view(msg.level).data(),
                              spdlog::level::to_string_view(msg.level).size())},
        {"msg", std::string(msg.payload.data(), msg.payload.size())}};
    auto text = line.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
    dest.append(text.data(), text.data() + text.size());
    dest.push_back('\n');
  }
  std::unique_ptr<spdlog::formatter> clone() const override { return std::make_unique<JsonFormatter>(); }
};

}  // namespace

std::unique_ptr<spdlog::formatter> make_json_formatter() { return std::make_unique<JsonFormatter>(); }

void setup_logging(const std::string& level, const std::string& format) {
  auto logger = spdlog::stderr_logger_mt("as_server");
  if (format == "json")
    logger->set_formatter(make_json_formatter());
  else
    logger->set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ %v");
  logger->set_level(spdlog::level::from_str(level));
  spdlog::set_default_logger(logger);
}

}  // namespace agentd::detail

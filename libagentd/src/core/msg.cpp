#include <agentd/msg.h>

#include <array>
#include <chrono>
#include <ctime>
#include <random>

namespace agentd {

namespace {

// Local time to the second. Formatted once per second and thread: every message an agent
// answers with is stamped, and localtime_r + strftime cost more than the rest of a Msg.
std::string now_timestamp() {
  thread_local std::time_t last = -1;
  thread_local std::array<char, 32> text{};
  const std::time_t t = std::time(nullptr);
  if (t != last) {
    std::tm tm{};
    localtime_r(&t, &tm);
    if (std::strftime(text.data(), text.size(), "%Y-%m-%d %H:%M:%S", &tm) == 0) text[0] = '\0';
    last = t;
  }
  return text.data();
}

}  // namespace

std::string new_id() {
  // One generator per thread, seeded from the OS: ids must not collide across processes.
  thread_local std::mt19937_64 gen{std::random_device{}() ^
                                   (static_cast<std::uint64_t>(std::random_device{}()) << 32)};
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out(32, '0');
  std::uint64_t a = gen(), b = gen();
  for (int i = 0; i < 16; ++i) {
    out[i] = kHex[(a >> (i * 4)) & 0xf];
    out[16 + i] = kHex[(b >> (i * 4)) & 0xf];
  }
  return out;
}

Msg::Msg(std::string name_in, Value content_in, std::string role_in)
    : id(new_id()),
      name(std::move(name_in)),
      role(std::move(role_in)),
      content(std::move(content_in)),
      timestamp(now_timestamp()) {}

std::string Msg::text() const {
  if (content.is_string()) return content.get<std::string>();
  if (content.is_null()) return {};
  return content.dump(-1, ' ', false, Value::error_handler_t::replace);  // bytes that are no UTF-8: U+FFFD
}

Value to_json(const Msg& m) {
  return Value{{"id", m.id},
               {"name", m.name},
               {"role", m.role},
               {"content", m.content},
               {"metadata", m.metadata},
               {"url", m.url},
               {"timestamp", m.timestamp}};
}

Msg msg_from_json(const Value& v) {
  Msg m;
  if (!v.is_object()) {
    m.content = v;
    return m;
  }
  m.id = v.value("id", std::string{});
  m.name = v.value("name", std::string{});
  m.role = v.value("role", std::string{"assistant"});
  if (auto it = v.find("content"); it != v.end()) m.content = *it;
  if (auto it = v.find("metadata"); it != v.end()) m.metadata = *it;
  if (auto it = v.find("url"); it != v.end()) {
    if (it->is_string()) {
      m.url.push_back(it->get<std::string>());
    } else if (it->is_array()) {
      for (const auto& u : *it)
        if (u.is_string()) m.url.push_back(u.get<std::string>());
    }
  }
  m.timestamp = v.value("timestamp", std::string{});
  return m;
}

}  // namespace agentd

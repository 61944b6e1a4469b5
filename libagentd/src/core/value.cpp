#include <agentd/value_limits.h>

#include <fmt/format.h>

#include <cstdint>
#include <cstring>

#include <vector>

namespace agentd {

namespace {

// The length of the UTF-8 character at p[i] (p has n bytes), or 0 when none starts there; *bad
// is then the offset of the offending byte.
std::size_t char_length(const unsigned char* p, std::size_t n, std::size_t i, std::size_t* bad) {
  const unsigned char c = p[i];
  if (c < 0x80) return 1;
  std::size_t len = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // the second byte's range (excludes overlong forms, surrogates)
  if (c >= 0xC2 && c <= 0xDF) {
    len = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    len = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    len = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    *bad = i;
    return 0;
  }
  for (std::size_t k = 1; k < len; ++k) {
    if (i + k >= n) {
      *bad = i;
      return 0;
    }
    const unsigned char b = p[i + k];
    if (b < (k == 1 ? lo : 0x80) || b > (k == 1 ? hi : 0xBF)) {
      *bad = i + k;
      return 0;
    }
  }
  return len;
}

// The length of p's (n bytes) longest prefix of whole UTF-8 characters; when that is not all of
// p, *bad is the offset of the offending byte (char_length's).
std::size_t valid_prefix(const unsigned char* p, std::size_t n, std::size_t* bad) {
  std::size_t i = 0;
  while (i < n) {
    // Eight ASCII bytes at a time (most text is ASCII; this was most of a small call's checks).
    while (i + 8 <= n) {
      std::uint64_t word;
      std::memcpy(&word, p + i, 8);
      if ((word & 0x8080808080808080ULL) != 0) break;
      i += 8;
    }
    if (i >= n) break;
    const std::size_t len = char_length(p, n, i, bad);
    if (len == 0) break;
    i += len;
  }
  return i;
}

}  // namespace

std::string utf8_problem(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  std::size_t bad = 0;
  const std::size_t i = valid_prefix(p, s.size(), &bad);
  if (i == s.size()) return {};
  if (bad == i && p[i] >= 0xC2 && p[i] <= 0xF4)
    return fmt::format("byte {} (0x{:02x}) starts a character the text cuts short", i, p[i]);
  if (bad == i) return fmt::format("byte {} is 0x{:02x}, which starts no UTF-8 character", i, p[i]);
  return fmt::format("byte {} is 0x{:02x}, which does not continue the character at byte {}", bad, p[bad], i);
}

std::size_t utf8_prefix_length(std::string_view s) {
  std::size_t bad = 0;
  return valid_prefix(reinterpret_cast<const unsigned char*>(s.data()), s.size(), &bad);
}

std::string utf8_replaced(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  std::string out;
  out.reserve(s.size());
  std::size_t bad = 0;
  for (std::size_t i = 0; i < s.size();) {
    const std::size_t len = char_length(p, s.size(), i, &bad);
    if (len == 0) {
      out += "\xEF\xBF\xBD";  // U+FFFD
      ++i;
    } else {
      out.append(s.substr(i, len));
      i += len;
    }
  }
  return out;
}

namespace {

// A problem found inside a value: why, and the path to it (innermost first). The path is
// built only on the way out of a failure, so checking a good value allocates nothing.
struct Problem {
  std::string why;
  std::vector<std::string> path;
};

std::string short_key(const std::string& key) {
  if (!utf8_problem(key).empty()) return "(a key that is not UTF-8)";
  return key.size() <= 40 ? key : key.substr(0, 37) + "...";
}

bool check(const Value& v, int depth, int max_depth, Problem& p) {
  switch (v.type()) {
    case Value::value_t::string:
      p.why = utf8_problem(v.get_ref<const std::string&>());
      if (p.why.empty()) return true;
      p.why = "a string that is not UTF-8 (" + p.why + ")";
      return false;
    case Value::value_t::array:
    case Value::value_t::object:
      break;
    default:
      return true;
  }
  if (depth + 1 > max_depth) {
    p.why = fmt::format("nested deeper than {} levels of lists and objects, more than a value may have",
                        max_depth);
    return false;
  }
  if (v.is_array()) {
    std::size_t i = 0;
    for (const auto& e : v) {
      if (!check(e, depth + 1, max_depth, p)) {
        p.path.push_back(std::to_string(i));
        return false;
      }
      ++i;
    }
    return true;
  }
  for (auto it = v.begin(); it != v.end(); ++it) {
    if (auto bad = utf8_problem(it.key()); !bad.empty()) {
      p.why = "a key that is not UTF-8 (" + bad + ")";
      return false;
    }
    if (!check(it.value(), depth + 1, max_depth, p)) {
      p.path.push_back(short_key(it.key()));
      return false;
    }
  }
  return true;
}

}  // namespace

std::string value_problem(const Value& v, int max_depth) {
  Problem p;
  if (check(v, 0, max_depth, p)) return {};
  if (p.path.empty()) return p.why;
  std::string at;
  for (auto it = p.path.rbegin(); it != p.path.rend(); ++it) at += "/" + *it;
  return fmt::format("at {}: {}", at, p.why);
}

std::string msg_problem(const Msg& m, int max_depth) {
  auto text = [](std::string_view field, const std::string& s) -> std::string {
    auto why = utf8_problem(s);
    return why.empty() ? why : fmt::format("the message's {} is not UTF-8: {}", field, why);
  };
  auto value = [max_depth](std::string_view field, const Value& v) -> std::string {
    auto why = value_problem(v, max_depth);
    return why.empty() ? why : fmt::format("the message's {}: {}", field, why);
  };
  for (auto why :
       {text("id", m.id), text("name", m.name), text("role", m.role), text("timestamp", m.timestamp),
        value("content", m.content), value("metadata", m.metadata)})
    if (!why.empty()) return why;
  for (const auto& u : m.url)
    if (auto why = text("url", u); !why.empty()) return why;
  return {};
}

ParsedValue parse_value(std::string_view text, int max_depth) {
  // Depth first, by a scan of brackets outside strings: exact for every prefix of valid JSON,
  // which is all the parser reads before it accepts or fails.
  int depth = 0;
  bool in_string = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth)
        return {Value(Value::value_t::discarded),
                fmt::format("JSON nested deeper than {} levels of [ ] and {{ }} (byte {}), more than a "
                            "value may have",
                            max_depth, i),
                true};
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  try {
    return {Value::parse(text), {}};
  } catch (const Value::exception& e) {
    return {Value(Value::value_t::discarded), e.what()};
  }
}

}  // namespace agentd

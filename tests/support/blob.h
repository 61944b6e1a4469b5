// The bytes BlobAgent (tests/plugins) makes for {"make_bytes": n}, byte i = i * 31: whether a
// message's content is exactly that, so a large result is known to have arrived whole and in order.
#pragma once

#include <agentd/value.h>

#include <cstddef>
#include <cstdint>

namespace agentd::test {

inline bool is_blob(const Value& content, std::size_t n) {
  if (!content.is_binary()) return false;
  const auto& b = content.get_binary();
  if (b.size() != n) return false;
  for (std::size_t i = 0; i < n; ++i)
    if (b[i] != static_cast<std::uint8_t>(i * 31)) return false;
  return true;
}

}  // namespace agentd::test

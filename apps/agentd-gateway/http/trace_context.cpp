#include "http/trace_context.h"

#include <agentd/msg.h>

#include <cstdint>

namespace gateway::http {

namespace {

bool lower_hex(std::string_view s) {
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

bool all_zeros(std::string_view s) { return s.find_first_not_of('0') == std::string_view::npos; }

}  // namespace

std::string traceparent_trace_id(std::string_view tp) {
  // version "-" trace-id "-" parent-id "-" flags: 2 + 1 + 32 + 1 + 16 + 1 + 2 = 55 characters.
  constexpr std::size_t kLength = 55;
  // Leading and trailing blanks are not part of a header's value.
  while (!tp.empty() && (tp.front() == ' ' || tp.front() == '\t')) tp.remove_prefix(1);
  while (!tp.empty() && (tp.back() == ' ' || tp.back() == '\t')) tp.remove_suffix(1);
  if (tp.size() < kLength || tp[2] != '-' || tp[35] != '-' || tp[52] != '-') return {};
  const std::string_view version = tp.substr(0, 2), trace_id = tp.substr(3, 32),
                         parent_id = tp.substr(36, 16), flags = tp.substr(53, 2);
  if (!lower_hex(version) || version == "ff" || !lower_hex(trace_id) || !lower_hex(parent_id) ||
      !lower_hex(flags))
    return {};
  // Version 00 is exactly this long; a later version may append fields after a '-'.
  if (version == "00" ? tp.size() != kLength : tp.size() > kLength && tp[kLength] != '-') return {};
  if (all_zeros(trace_id) || all_zeros(parent_id)) return {};
  return std::string(trace_id);
}

std::string new_trace_id() {
  std::string id;
  do id = agentd::new_id();  // 32 random lowercase hex digits; W3C forbids all zeros
  while (all_zeros(id));
  return id;
}

std::string request_trace_id(std::string_view traceparent) {
  std::string id = traceparent_trace_id(traceparent);
  return id.empty() ? new_trace_id() : id;
}

}  // namespace gateway::http

#include "outcome_check.h"

#include <agentd/value_limits.h>

#include <fmt/format.h>

namespace agentd::detail {

void check_outcome(const std::string& agent_id, const std::string& class_name, Call& c) {
  if (c.out_error) return;
  std::string why;
  if (c.out_msg) why = msg_problem(*c.out_msg);
  if (why.empty() && c.kind == Call::Kind::method) why = value_problem(c.out_value);
  if (why.empty() && c.kind == Call::Kind::snapshot && c.out_value.is_object())  // {args, state}
    for (auto it = c.out_value.begin(); why.empty() && it != c.out_value.end(); ++it)
      if (auto bad = value_problem(it.value()); !bad.empty()) why = it.key() + ": " + bad;
  for (std::size_t i = 0; why.empty() && i < c.out_memory.size(); ++i)
    if (auto bad = msg_problem(c.out_memory[i]); !bad.empty())
      why = fmt::format("message {} of its memory: {}", i, bad);
  if (why.empty()) return;
  const char* what = c.kind == Call::Kind::reply      ? "the reply"
                     : c.kind == Call::Kind::memory   ? "the memory"
                     : c.kind == Call::Kind::snapshot ? "the saved state"
                                                      : "the method's result";
  c.out_error = Error(ErrorCode::bad_request,
                      fmt::format("{} of agent '{}' cannot be sent: {}; an agent's values may nest at most "
                                  "{} levels and their text must be UTF-8 (bytes go as binary)",
                                  what, agent_id, why, kMaxValueDepth),
                      agent_id, class_name);
}

}  // namespace agentd::detail

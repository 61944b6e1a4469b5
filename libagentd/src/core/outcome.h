// Outcome: what a call produced, its message or the error that stopped it, with the model use of
// the call (its usage travels wherever the outcome does). The host's result pool keeps them, the
// wire codec (wire/outcome_codec.h) writes and reads them, the state store saves them. Private to
// libagentd.
#pragma once

#include <agentd/error.h>
#include <agentd/model.h>
#include <agentd/msg.h>

#include <variant>

namespace agentd::detail {

// A std::variant<Msg, Error> (std::get, std::get_if and std::holds_alternative work on it as on
// the variant) plus the call's usage; zeros for an outcome no agent code produced (an unknown
// call id, a call that failed before it ran).
struct Outcome : std::variant<Msg, Error> {
  using std::variant<Msg, Error>::variant;
  CallUsage usage{};
};

}  // namespace agentd::detail

// Outcome: what a call produced, its message or the error that stopped it. The host's result
// pool keeps them, the wire codec (wire/outcome_codec.h) writes and reads them, the state store
// saves them. Private to libagentd.
#pragma once

#include <agentd/error.h>
#include <agentd/msg.h>

#include <variant>

namespace agentd::detail {

using Outcome = std::variant<Msg, Error>;

}  // namespace agentd::detail

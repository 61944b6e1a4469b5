// The check every call's outcome passes before anyone sees it. Private to libagentd.
#pragma once

#include "mailbox.h"

#include <string>

namespace agentd::detail {

// Refuses what call c of agent agent_id produced when it could not travel (nested deeper than
// kMaxValueDepth, text that is not UTF-8): c.out_error becomes bad_request naming the limit or
// the byte. Run once per call, on the thread that ran it, right after the agent code, so every
// reader (sessions, Result.get, peers, the state store, local mode) sees the same outcome, and a
// completion batch never carries what a client cannot read.
void check_outcome(const std::string& agent_id, const std::string& class_name, Call& c);

}  // namespace agentd::detail

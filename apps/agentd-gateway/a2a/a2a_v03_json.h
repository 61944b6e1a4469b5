// The A2A 0.3 JSON-RPC wire format (a2aproject/A2A v0.3.0: docs/specification.md and
// specification/json/a2a.json), the protocol of A2A 0.3 clients (they send no A2A-Version header,
// which A2A 1.0 says means 0.3). Pure functions (no I/O), as a2a_json.h, so they can be tested and
// fuzzed alone.
//
// The tasks are the same for both versions: the store holds messages in A2A 1.0's form. A 0.3
// message is converted to it when it comes in (parse_send_params), and the objects answered are
// converted to 0.3's when they go out: a `kind` on every object ("task", "message",
// "status-update", "artifact-update"; parts {kind: "text", text}), roles "user"/"agent", states
// "working", "completed", "failed", "canceled", and `final: true` on a stream's last status
// update. So a task made over 0.3 can be read over 1.0 and the other way round.
//
// Methods (a2a_api.h dispatches them): message/send (the Task; configuration.blocking false
// answers the working task at once), message/stream, tasks/get, tasks/cancel, tasks/resubscribe.
//
// The agent card: one card serves both versions. A2A 1.0 allows an agent several interfaces of
// one binding with different protocol versions at the same URL, and readers ignore the fields
// they do not know; so add_card_fields adds to the 1.0 card a JSONRPC interface with
// protocolVersion "0.3" and 0.3's own required fields (protocolVersion "0.3.0", url,
// preferredTransport "JSONRPC"; with a bearer token, 0.3's `security` and each security scheme's
// `type`/`scheme` next to 1.0's httpAuthSecurityScheme).
#pragma once

#include "a2a/a2a_json.h"

namespace gateway::a2a::v03 {

// 0.3's error for agent/getAuthenticatedExtendedCard when there is no extended card.
inline constexpr int kAuthenticatedExtendedCardNotConfigured = -32007;

// message/send and message/stream params (a MessageSendParams), checked; the message in
// SendRequest::message is in A2A 1.0's form.
std::variant<SendRequest, RpcError> parse_send_params(const json& params);

// "working", "completed", "failed", "canceled".
const char* state_name(TaskState s);

// A Message stored in A2A 1.0's form, as 0.3's (kind "message", role "user"/"agent", kind-tagged
// parts). Anything not a 1.0 Message object is answered as it is.
json message(const json& m);

// A task as 0.3's Task object (kind "task"). history_length: nullopt all, 0 none, n the last n.
json task_json(const Task& t, std::optional<int> history_length = std::nullopt);
// Stream events: a TaskStatusUpdateEvent (final once the task has ended) and a
// TaskArtifactUpdateEvent, as a2a_json.h's status_update and artifact_update.
json status_update(const Task& t);
json artifact_update(const Task& t, const std::string& text, bool append, bool last_chunk);

// Adds to an A2A 1.0 agent card (a2a_json.h's agent_card) what an A2A 0.3 client needs: its
// JSON-RPC endpoint is the card's first JSONRPC interface's url (left as it is without one).
void add_card_fields(json& card, bool bearer_auth);

}  // namespace gateway::a2a::v03

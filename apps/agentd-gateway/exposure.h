// What the gateway exposes, and which agent a request reaches: the one place the APIs (OpenAI,
// A2A) turn a name (a /v1 `model`, the E of /a2a/E/) into an agent.
//
// Without --config: every agent on the upstream server(s), under its id (a lookup by id).
// With --config (exposure_config.h): only the configured entries, under their names:
//   - a fixed entry (`agent: ID`) is that agent; one that is not on the server is refused (404)
//     naming the entry and the id, and a server that cannot be reached is a 503 as always;
//   - a per-conversation entry (`class: X`) gives each conversation its own agent of class X,
//     created (with the entry's args, id "NAME-<16 hex digits>") on the conversation's first
//     request, reused by the next ones, and deleted once no request has used it for the entry's
//     idle-timeout. A conversation is a key: the A2A contextId, or the OpenAI conversation key
//     (X-Conversation-Id, else `user`). An empty key is a one-shot conversation: its agent is
//     deleted as soon as its request is done. At most max-conversations live at once per entry
//     (more are refused, HTTP 429). An agent deleted behind the gateway's back (a call fails
//     with unknown_agent) ends its conversation: the key's next request gets a new agent.
//
// Agents are created and deleted on Upstream's blocking threads, never on the HTTP threads;
// idle conversations are swept by a thread of this class. stop() deletes the conversation
// agents at a clean stop, over a connection of its own that does not wait for a server that is
// gone (best effort: what it cannot delete is left on the server, and logged).
//
// Thread-safety: any thread. Leases (Target::lease) may outlive this object.
#pragma once

#include "exposure_config.h"
#include "upstream.h"

#include <agentd/client.h>
#include <agentd/error.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <variant>

namespace gateway {

// The agent a request talks to. Hold lease until the request is done with the agent (its answer
// came, or its stream ended): a conversation's agent is not deleted while leased.
struct Target {
  std::optional<agentd::AgentRef> agent;  // empty from check() of a configured entry
  std::shared_ptr<void> lease;            // empty for agents the gateway does not own
};

// A request the gateway refuses itself (as opposed to an agentd::Error from the server).
struct Refusal {
  enum class Kind {
    no_entry,       // configured, and no entry has that name (404)
    agent_missing,  // a fixed entry's agent is not on the server (404)
    too_many,       // the entry has max-conversations live (429)
    bad_key,        // a conversation key the gateway does not take (400)
  };
  Kind kind;
  std::string message;

  int http_status() const;
};

using Resolved = std::variant<Target, agentd::Error, Refusal>;

class Exposure {
 public:
  // upstream outlives this object. config: nullopt exposes every agent under its id.
  // connect_briefly: a connection to the same server(s) whose calls give up after a few seconds
  // and that never reconnects, for stop() (none: stop() leaves the agents).
  Exposure(Upstream& upstream, std::optional<ExposureConfig> config,
           std::function<std::unique_ptr<Backend>()> connect_briefly = {});
  ~Exposure();
  Exposure(const Exposure&) = delete;
  Exposure& operator=(const Exposure&) = delete;

  // The configured entries (nullptr without --config).
  const ExposureConfig* config() const;

  // Whether name is exposed, for requests that need no agent (A2A task methods): configured,
  // a Target without agent at once (or Refusal no_entry); else the agent, looked up.
  void check(const std::string& name, std::function<void(Resolved)> done);
  // The agent a request to name in conversation `key` reaches (see above; empty key: one-shot).
  // done runs at once on this thread, or on a blocking thread.
  void resolve(const std::string& name, const std::string& key, std::function<void(Resolved)> done);

  // At a clean stop, once the HTTP threads have stopped (it blocks): deletes every conversation
  // agent through connect_briefly; requests resolved afterwards get Error(stopping).
  void stop();

  struct State;

 private:
  Upstream& upstream_;
  const std::function<std::unique_ptr<Backend>()> connect_briefly_;
  std::shared_ptr<State> s_;
  std::thread sweeper_;  // with per-conversation entries: sweeps idle conversations
};

}  // namespace gateway

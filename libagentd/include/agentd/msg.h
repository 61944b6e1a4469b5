// agentd::Msg: the message agents exchange (AgentScope's Msg, typed).
#pragma once

#include <agentd/value.h>

#include <string>
#include <vector>

namespace agentd {

struct Msg {
  std::string id;    // unique message id; generated when left empty
  std::string name;  // who speaks: the agent's name, "user", "system", ...
  std::string role;  // "user", "assistant" or "system"
  Value content;     // any value tree; text is the common case
  Value metadata;    // free-form, null when unused
  std::vector<std::string> url;
  std::string timestamp;  // "YYYY-MM-DD HH:MM:SS", local time, as AgentScope stamps it

  Msg() = default;
  // role defaults to "assistant"; id and timestamp are filled in.
  Msg(std::string name, Value content, std::string role = "assistant");

  // content as text: the string itself, or the JSON text of any other value.
  std::string text() const;

  friend bool operator==(const Msg&, const Msg&) = default;
};

// A fresh random message/call id (32 hex characters).
std::string new_id();

// Converts to and from the JSON object {"id", "name", "role", "content", "metadata", "url", "timestamp"}.
Value to_json(const Msg& m);
Msg msg_from_json(const Value& v);

}  // namespace agentd

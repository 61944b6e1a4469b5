// How agentctl prints on stdout: JSON for --json (the shapes scripts read), and the human forms
// (aligned tables and "key  value" fields, sizes and durations in human units).
#pragma once

#include "local_servers.h"

#include <agentd/client.h>
#include <agentd/msg.h>
#include <agentd/value.h>

#include <cstdint>
#include <string>
#include <vector>

namespace agentctl {

// v as indented JSON and a newline.
void print_json(const agentd::Value& v);

// A JSON array of to_json(item) for each item.
template <typename Range, typename ToJson>
agentd::Value json_array(const Range& items, ToJson to_json) {
  agentd::Value out = agentd::Value::array();
  for (const auto& item : items) out.push_back(to_json(item));
  return out;
}

// The --json shapes.
agentd::Value agent_json(const agentd::AgentInfo& a);
agentd::Value server_json(const agentd::ServerInfo& i);
agentd::Value span_json(const agentd::TraceSpan& s);
agentd::Value servers_json(const std::vector<LocalServer>& servers);
// An agent just created on the server at address.
agentd::Value created_json(const agentd::AgentRef& ref, const std::string& address);

// Columns padded to their widest cell, two spaces apart (the last column not padded).
void print_table(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows);
std::string human_bytes(std::uint64_t n);  // "1.5 MiB"
std::string human_seconds(double s);       // "12.5 s", "3m05s", "2h10m", "3d04h"

// The human forms.
void print_server_info(const agentd::ServerInfo& i);              // `status`
void print_agents(const std::vector<agentd::AgentInfo>& agents);  // `list`: one row each
void print_memory(const std::vector<agentd::Msg>& memory);        // `memory`: one row each
void print_spans(const std::vector<agentd::TraceSpan>& spans);    // `trace`: one row each
// `up`, `ps`: one row per server; show_state adds running/dead (`ps`); then a line per gateway
// (its URL, pid, state and log).
void print_servers(const std::vector<LocalServer>& servers, bool show_state = false);

}  // namespace agentctl

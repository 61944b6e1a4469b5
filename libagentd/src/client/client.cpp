// The public agentd::Client: its factories (connect, spawn_child; local is in local/) and the
// requests answered by the server as a whole. Agents are created in create_agents.cpp.
#include <agentd/client.h>

#include "agent_ref.h"
#include "child_process.h"
#include "client_core.h"
#include "info_codec.h"
#include "kj_errors.h"
#include "private_dir.h"
#include "tokens.h"
#include "trace_codec.h"
#include "value_codec.h"

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace agentd {

using detail::ClientCore;
using detail::LoopState;
using detail::Sync;

Client Client::connect(const std::string& host, std::uint16_t port, ClientOptions options) {
  ClientCore::Target t;
  t.mode = ClientCore::Mode::independent;
  t.host = host;
  t.port = port;
  return Client(std::make_shared<ClientCore>(std::move(t), options));
}

Client Client::spawn_child(ChildOptions options) {
  std::vector<std::string> args;
  for (const auto& p : options.plugins) args.insert(args.end(), {"--plugin", p});
  for (const auto& d : options.plugin_dirs) args.insert(args.end(), {"--plugin-dir", d});
  for (const auto& d : options.agent_dirs) args.insert(args.end(), {"--agent-dir", d});
  if (!options.model_config_path.empty())
    args.insert(args.end(), {"--model-config-path", options.model_config_path});
  // A child logs warnings and errors only (on this process's stderr) unless told otherwise.
  bool has_level = false;
  for (const auto& a : options.extra_args) has_level = has_level || a.rfind("--log-level", 0) == 0;
  if (!has_level) args.insert(args.end(), {"--log-level", "warn"});
  args.insert(args.end(), options.extra_args.begin(), options.extra_args.end());
  // Other local users must not reach the child's loopback port: it requires a token, handed
  // over in a 0600 file of a 0700 directory (never on its command line) that is removed once it
  // has started (it reads the file at start). The token is client.token when given, else this
  // process's child token: random, made once, shared by all the children of this process so
  // that they fetch each other's placeholders (each logs in to the others with it). Unless
  // extra_args name the child's token file themselves.
  // This process talks to its child over a Unix socket in the same private directory (which
  // lives as long as the child); peers still reach the child over loopback TCP.
  bool own_tokens = false, own_socket = false;
  for (const auto& a : options.extra_args) {
    own_tokens = own_tokens || a.rfind("--auth-token-file", 0) == 0;
    own_socket = own_socket || a.rfind("--unix-socket", 0) == 0;
  }
  auto dir = std::make_shared<detail::PrivateDir>();
  std::string token_file;
  if (!own_tokens) {
    static const std::string process_child_token = detail::random_token();
    if (options.client.token.empty()) options.client.token = process_child_token;
    token_file = dir->write_private("token", options.client.token);
    args.insert(args.end(), {"--auth-token-file", token_file});
  }
  const std::string socket = own_socket ? std::string{} : dir->add_file("sock");
  if (!socket.empty()) args.insert(args.end(), {"--unix-socket", socket});
  // The child's stderr is copied to ours through a pipe whose end is kept, so that a child that
  // dies can be reported with its last words (ClientCore quotes them in the disconnected error).
  auto binary = detail::ChildProcess::find_server_binary(options.server_path);
  auto child = detail::ChildProcess::start(binary, args, options.start_timeout, /*keep_stderr=*/true);
  if (!token_file.empty()) dir->remove(token_file);
  ClientCore::Target t;
  t.mode = ClientCore::Mode::child;
  t.host = socket.empty() ? child->host() : "unix:" + socket;
  t.port = child->port();
  t.child_dir = dir;
  Client client(std::make_shared<ClientCore>(std::move(t), options.client, std::move(child)));
  // Connected: child mode never connects again, so the socket's name and the directory can go
  // now (the child keeps listening). Nothing is left in $TMPDIR even if this process is killed.
  if (!socket.empty()) {
    dir->remove(socket);
    ::rmdir(dir->path().c_str());
  }
  return client;
}

Client::Client(Client&&) noexcept = default;
Client& Client::operator=(Client&&) noexcept = default;
Client::~Client() = default;

void Client::close() {
  if (core_) core_->close();
}

AgentRef Client::agent(const std::string& id) {
  auto info = core_->sync<AgentInfo>("look up agent " + id,
                                     [id](LoopState& loop, Sync<AgentInfo>& st) -> kj::Promise<void> {
                                       return detail::agent_info(loop, id, st);
                                     });
  return AgentRef(core_, info.id, info.name, info.class_name);
}

AgentRef Client::clone_agent(const std::string& source_id, const std::string& name, const std::string& id) {
  auto info = core_->sync<AgentInfo>(
      "clone agent " + source_id,
      [source_id, name, id](LoopState& loop, Sync<AgentInfo>& st) -> kj::Promise<void> {
        auto req = loop.server.cloneAgentRequest();
        req.setSourceId(detail::to_kj(source_id));
        req.setName(detail::to_kj(name));
        req.setAgentId(detail::to_kj(id));
        return req.send().then(
            [&loop, &st](capnp::Response<wire::AgentServer::CloneAgentResults> r) -> kj::Promise<void> {
              if (r.hasError()) {
                st.fail(detail::read_error(r.getError()));
                return kj::READY_NOW;
              }
              return detail::agent_info(loop, detail::to_std(r.getId()), st);
            });
      });
  return AgentRef(core_, info.id, info.name, info.class_name);
}

std::vector<AgentInfo> Client::list_agents() {
  return core_->sync<std::vector<AgentInfo>>(
      "list agents", [](LoopState& loop, Sync<std::vector<AgentInfo>>& st) -> kj::Promise<void> {
        return loop.server.listAgentsRequest().send().then(
            [&st](capnp::Response<wire::AgentServer::ListAgentsResults> r) {
              std::vector<AgentInfo> out;
              for (auto a : r.getAgents()) out.push_back(detail::read_agent_info(a));
              st.set(std::move(out));
            });
      });
}

AgentPage Client::query_agents(const AgentQuery& query) {
  return core_->sync<AgentPage>(
      "query agents", [query](LoopState& loop, Sync<AgentPage>& st) -> kj::Promise<void> {
        auto req = loop.server.queryAgentsRequest();
        auto q = req.initQuery();
        q.setSearch(detail::to_kj(query.search));
        q.setClassName(detail::to_kj(query.class_name));
        q.setSort(static_cast<wire::AgentQuery::Sort>(query.sort));
        q.setDescending(query.descending);
        q.setOffset(query.offset);
        q.setLimit(query.limit);
        return req.send().then([&st](capnp::Response<wire::AgentServer::QueryAgentsResults> r) {
          AgentPage page;
          for (auto a : r.getAgents()) page.agents.push_back(detail::read_agent_info(a));
          page.matched = r.getMatched();
          page.total = r.getTotal();
          st.set(std::move(page));
        });
      });
}

void Client::delete_agent(const std::string& id) {
  core_->sync<bool>("delete agent " + id, [id](LoopState& loop, Sync<bool>& st) -> kj::Promise<void> {
    auto req = loop.server.deleteAgentRequest();
    req.setId(detail::to_kj(id));
    return req.send().then([&st](capnp::Response<wire::AgentServer::DeleteAgentResults> r) {
      if (r.hasError())
        st.fail(detail::read_error(r.getError()));
      else
        st.set(true);
    });
  });
}

std::size_t Client::delete_all_agents() {
  return core_->sync<std::size_t>(
      "delete all agents", [](LoopState& loop, Sync<std::size_t>& st) -> kj::Promise<void> {
        return loop.server.deleteAllAgentsRequest().send().then(
            [&st](capnp::Response<wire::AgentServer::DeleteAllAgentsResults> r) { st.set(r.getCount()); });
      });
}

ServerInfo Client::info() {
  return core_->sync<ServerInfo>("server info",
                                 [](LoopState& loop, Sync<ServerInfo>& st) -> kj::Promise<void> {
                                   return loop.server.infoRequest().send().then(
                                       [&st](capnp::Response<wire::AgentServer::InfoResults> r) {
                                         st.set(detail::read_server_info(r.getInfo()));
                                       });
                                 });
}

std::vector<TraceSpan> Client::traces(std::uint32_t limit) {
  return core_->sync<std::vector<TraceSpan>>(
      "traces", [limit](LoopState& loop, Sync<std::vector<TraceSpan>>& st) -> kj::Promise<void> {
        auto req = loop.server.tracesRequest();
        req.setLimit(limit);
        return req.send().then([&st](capnp::Response<wire::AgentServer::TracesResults> r) {
          std::vector<TraceSpan> out;
          for (auto s : r.getSpans()) out.push_back(detail::read_trace_span(s));
          st.set(std::move(out));
        });
      });
}

std::vector<ToolServerInfo> Client::tools(bool start) {
  return core_->sync<std::vector<ToolServerInfo>>(
      "tools", [start](LoopState& loop, Sync<std::vector<ToolServerInfo>>& st) -> kj::Promise<void> {
        auto req = loop.server.listToolsRequest();
        req.setStart(start);
        return req.send().then([&st](capnp::Response<wire::AgentServer::ListToolsResults> r) {
          std::vector<ToolServerInfo> out;
          for (auto s : r.getServers()) out.push_back(detail::read_tool_server_info(s));
          st.set(std::move(out));
        });
      });
}

ToolResult Client::call_tool(const std::string& server, const std::string& tool, const Value& arguments,
                             std::optional<std::chrono::milliseconds> timeout) {
  const auto ms =
      timeout ? static_cast<std::uint32_t>(std::clamp<std::int64_t>(timeout->count(), 1, UINT32_MAX)) : 0u;
  return core_->sync<ToolResult>(
      "call tool", [server, tool, arguments, ms](LoopState& loop, Sync<ToolResult>& st) -> kj::Promise<void> {
        auto req = loop.server.callToolRequest();
        req.setServer(detail::to_kj(server));
        req.setTool(detail::to_kj(tool));
        detail::write_value(arguments, req.initArgs());
        req.setTimeoutMs(ms);
        return req.send().then([&st](capnp::Response<wire::AgentServer::CallToolResults> r) {
          if (r.hasError())
            st.fail(detail::read_error(r.getError()));
          else
            st.set(ToolResult::from_value(detail::read_value(r.getResult())));
        });
      });
}

void Client::ping() {
  core_->sync<bool>("ping", [](LoopState& loop, Sync<bool>& st) -> kj::Promise<void> {
    return loop.server.pingRequest().send().then(
        [&st](capnp::Response<wire::AgentServer::PingResults>) { st.set(true); });
  });
}

void Client::stop() {
  core_->sync<bool>("stop", [](LoopState& loop, Sync<bool>& st) -> kj::Promise<void> {
    // A server that stops may close the connection before its answer is written: that
    // disconnect is the stop having happened, not a failure.
    return loop.server.stopRequest().send().then(
        [&st](capnp::Response<wire::AgentServer::StopResults>) { st.set(true); },
        [&st](kj::Exception&& e) {
          if (e.getType() == kj::Exception::Type::DISCONNECTED)
            st.set(true);
          else
            st.fail(detail::error_from_kj(e, "stop"));
        });
  });
}

std::uint64_t Client::set_model_configs(const std::string& text) {
  return core_->sync<std::uint64_t>(
      "set model configs", [text](LoopState& loop, Sync<std::uint64_t>& st) -> kj::Promise<void> {
        auto req = loop.server.setModelConfigsRequest();
        req.setYaml(detail::to_kj(text));
        return req.send().then([&st](capnp::Response<wire::AgentServer::SetModelConfigsResults> r) {
          if (r.hasError())
            st.fail(detail::read_error(r.getError()));
          else
            st.set(r.getVersion());
        });
      });
}

ClientStats Client::stats() {
  struct Bytes {
    std::uint64_t in, out;
  };
  // Read on the loop thread (which owns the counters); not a server round trip.
  auto st = std::make_shared<Sync<Bytes>>();
  if (!core_->post([c = core_.get(), st]() {
        auto& loop = c->loop();
        st->set(Bytes{loop.bytes.in, loop.bytes.out});
      }))
    throw detail::ClientCore::closed_error("client stats");
  Bytes b = st->wait(core_->options().timeout, "client stats");
  ClientStats s;
  s.bytes_sent = b.out;
  s.bytes_received = b.in;
  s.requests = core_->requests_.load();
  s.waits = core_->waits_.load();
  return s;
}

const std::string& Client::address() const { return core_->address(); }
const std::string& Client::server_id() const { return core_->server_id(); }
std::uint16_t Client::port() const { return core_->port(); }

}  // namespace agentd

#include "commands.h"

#include "local_servers.h"
#include "tokens.h"
#include "output.h"

#include <agentd/client.h>
#include <agentd/cluster.h>
#include <agentd/error.h>
#include <agentd/trace_export.h>
#include <agentd/value_limits.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <optional>
#include <sstream>
#include <thread>
#include <tuple>

#include <fmt/format.h>

namespace agentctl {

using agentd::Value;

namespace {

constexpr const char* kNoLocalServers = "no servers started by `agentctl up` are running\n";

// Token, TLS and timeouts from the global options: --timeout for answers, at most 10 s to connect.
agentd::ClientOptions client_options(const Invocation& inv) {
  agentd::ClientOptions o;
  o.timeout = inv.timeout();
  o.connect_timeout = std::min(inv.timeout(), std::chrono::milliseconds(10000));
  // One command, one connection: a server that goes away (e.g. after `stop`) is reported, not
  // waited for.
  o.reconnect_deadline = std::chrono::milliseconds(0);
  if (!inv.g.token_file.empty()) {
    // A token file that cannot be used is a bad option (exit 2): nothing was sent yet.
    try {
      o.token = agentd::detail::read_token_file(inv.g.token_file, "--token-file").front();
    } catch (const agentd::Error& e) {
      throw UsageError("", e.message());
    }
  }
  o.tls_ca = inv.g.tls_ca;
  o.tls_cert = inv.g.tls_cert;
  o.tls_key = inv.g.tls_key;
  return o;
}

// A connection to --host/--port.
agentd::Client connect(const Invocation& inv) {
  return agentd::Client::connect(inv.g.host, inv.g.port, client_options(inv));
}

// The agent arg names: the agent with that id, else the one agent with that name. Throws the
// server's Error(unknown_agent) when there is neither, UsageError listing the ids when several
// agents share the name.
agentd::AgentRef agent_named(agentd::Client& c, const Invocation& inv, const std::string& arg) {
  try {
    return c.agent(arg);
  } catch (const agentd::Error& e) {
    if (e.code() != agentd::ErrorCode::unknown_agent) throw;
    std::vector<std::string> ids;
    for (const auto& a : c.list_agents())
      if (a.name == arg) ids.push_back(a.id);
    if (ids.size() == 1) return c.agent(ids[0]);
    if (ids.empty()) throw;  // neither an id nor a name: the server's unknown_agent
    std::string list;
    for (const auto& id : ids) list += (list.empty() ? "" : ", ") + id;
    throw inv.usage(fmt::format("{} agents are named '{}' ({}): give the id of one", ids.size(), arg, list));
  }
}

// Every member of --cluster, each with its ServerInfo when it answers.
struct MemberInfo {
  agentd::ClusterMember member;
  std::optional<agentd::ServerInfo> info;
};
std::vector<MemberInfo> cluster_infos(agentd::Cluster& cluster) {
  std::vector<std::optional<agentd::ServerInfo>> infos;
  for (std::size_t i = 0; i < cluster.size(); ++i) infos.push_back(cluster.info(i));
  // The members after asking: one that failed to answer is marked down, with why.
  auto members = cluster.members();
  std::vector<MemberInfo> out;
  for (std::size_t i = 0; i < members.size() && i < infos.size(); ++i)
    out.push_back({std::move(members[i]), std::move(infos[i])});
  return out;
}

agentd::Cluster open_cluster(const Invocation& inv) {
  agentd::ClusterOptions o;
  o.client = client_options(inv);
  return agentd::Cluster::open(inv.g.cluster, o);
}

Value member_json(const MemberInfo& m) {
  Value v{{"address", m.member.address}, {"source", m.member.source}, {"up", m.info.has_value()}};
  if (m.info)
    v["info"] = server_json(*m.info);
  else
    v["error"] = m.member.error.empty() ? std::string("no answer") : m.member.error;
  return v;
}

// `status --cluster` and `ps --cluster`: a row per member; exit 3 when any is down.
int cluster_members(const Invocation& inv, bool processes) {
  auto cluster = open_cluster(inv);
  auto infos = cluster_infos(cluster);
  std::size_t up = 0;
  std::uint64_t agents = 0, completed = 0, rss = 0;
  for (const auto& m : infos)
    if (m.info) {
      ++up;
      agents += m.info->agent_count;
      completed += m.info->calls_completed;
      rss += m.info->rss_bytes;
    }
  if (inv.g.json) {
    print_json({{"members", json_array(infos, member_json)},
                {"up", up},
                {"down", infos.size() - up},
                {"agents", agents},
                {"calls_completed", completed},
                {"rss_bytes", rss}});
  } else {
    std::vector<std::vector<std::string>> rows;
    for (const auto& m : infos) {
      if (!m.info) {
        rows.push_back({m.member.address, "down", "-", "-", "-", "-", "-", m.member.error});
        continue;
      }
      const auto& i = *m.info;
      if (processes)
        rows.push_back({m.member.address, "up", std::to_string(i.pid), human_seconds(i.uptime_seconds),
                        fmt::format("{:.2f} s", i.cpu_seconds), human_bytes(i.rss_bytes),
                        std::to_string(i.workers), i.server_id});
      else
        rows.push_back({m.member.address, "up", std::to_string(i.agent_count),
                        std::to_string(i.calls_completed), std::to_string(i.calls_queued),
                        human_bytes(i.rss_bytes), human_seconds(i.uptime_seconds), i.server_id});
    }
    if (processes)
      print_table({"ADDRESS", "STATE", "PID", "UPTIME", "CPU", "RSS", "WORKERS", "SERVER_ID"}, rows);
    else
      print_table({"ADDRESS", "STATE", "AGENTS", "COMPLETED", "QUEUED", "RSS", "UPTIME", "SERVER_ID / ERROR"},
                  rows);
    std::cout << fmt::format("{} of {} servers up; {} agents, {} calls completed, {} rss\n", up, infos.size(),
                             agents, completed, human_bytes(rss));
  }
  return up == infos.size() ? kExitOk : kExitUnreachable;
}

// `list --cluster`: every member's agents, with the member's address.
int cluster_list(const Invocation& inv) {
  auto cluster = open_cluster(inv);
  Value all = Value::array();
  std::vector<std::vector<std::string>> rows;
  std::size_t down = 0;
  const auto members = cluster.members();
  for (std::size_t k = 0; k < members.size(); ++k) {
    const auto& member = members[k];
    std::vector<agentd::AgentInfo> agents;
    try {
      agents = cluster.server(k).list_agents();
    } catch (const agentd::Error& e) {
      if (e.code() != agentd::ErrorCode::disconnected) throw;
      std::cerr << "agentctl: " << member.address << " is down: " << e.message() << "\n";
      ++down;
      continue;
    }
    std::sort(agents.begin(), agents.end(),
              [](const auto& a, const auto& b) { return std::tie(a.name, a.id) < std::tie(b.name, b.id); });
    for (const auto& a : agents) {
      auto v = agent_json(a);
      v["server"] = member.address;
      all.push_back(std::move(v));
      rows.push_back({member.address, a.id, a.name, a.class_name, std::to_string(a.queued_calls),
                      std::to_string(a.completed_calls), std::to_string(a.failed_calls)});
    }
  }
  if (inv.g.json)
    print_json(all);
  else if (rows.empty())
    std::cout << "no agents on the cluster's " << cluster.size() - down << " server(s) up\n";
  else
    print_table({"SERVER", "ID", "NAME", "CLASS", "QUEUED", "COMPLETED", "FAILED"}, rows);
  return down == 0 ? kExitOk : kExitUnreachable;
}

// text, a JSON argument named `what` in the error. Throws UsageError when it is not JSON.
Value parse_json_arg(const Invocation& inv, const std::string& what, const std::string& text) {
  // Bounded: JSON nested deeper than a value may be (kMaxValueDepth) is refused, not built.
  auto parsed = agentd::parse_value(text);
  if (parsed.too_deep) throw inv.usage(fmt::format("{} cannot be sent: {}", what, parsed.error));
  if (!parsed)
    throw inv.usage(
        fmt::format("{} is not valid JSON: {} (quote it for the shell, e.g. "
                    "'{{\"prefix\": \"> \"}}')",
                    what, agentd::utf8_replaced(text)));
  return std::move(parsed.value);
}

// Without --plugin/--plugin-dir: the plugins built or installed beside this agentctl.
std::vector<std::string> default_plugin_dirs() {
  namespace fs = std::filesystem;
  std::error_code ec;
  auto self = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return {};
  for (auto dir : {self.parent_path().parent_path() / "plugins",
                   self.parent_path().parent_path() / AGENTD_INSTALL_LIBDIR_NAME / "agentd" / "plugins"})
    if (fs::is_directory(dir, ec)) return {dir.string()};
  return {};
}

}  // namespace

// ---- against the server ----

int cmd_status(const Invocation& inv) {
  if (!inv.g.cluster.empty()) return cluster_members(inv, false);
  auto c = connect(inv);
  auto i = c.info();
  if (inv.g.json)
    print_json(server_json(i));
  else
    print_server_info(i);
  return kExitOk;
}

int cmd_list(const Invocation& inv) {
  if (!inv.g.cluster.empty()) return cluster_list(inv);
  auto c = connect(inv);
  auto agents = c.list_agents();
  std::sort(agents.begin(), agents.end(),
            [](const auto& a, const auto& b) { return std::tie(a.name, a.id) < std::tie(b.name, b.id); });
  if (inv.g.json)
    print_json(json_array(agents, agent_json));
  else if (agents.empty())
    std::cout << "no agents on " << c.address() << " (create one with `agentctl create CLASS NAME`)\n";
  else
    print_agents(agents);
  return kExitOk;
}

int cmd_create(const Invocation& inv) {
  Value args = Value::object();
  if (auto a = inv.value("--args")) {
    args = parse_json_arg(inv, "--args", *a);
    if (!args.is_object()) throw inv.usage("--args must be a JSON object, e.g. '{\"k\": 1}'");
  }
  if (auto count_text = inv.value("--count")) {
    auto count = parse_whole(*count_text, 1, std::numeric_limits<std::int64_t>::max());
    if (!count) throw inv.usage("--count must be a whole number of at least 1, not '" + *count_text + "'");
    if (inv.value("--id")) throw inv.usage("--id names one agent; it cannot go with --count");
    auto c = connect(inv);
    auto refs = c.create_agents(inv.args[0], static_cast<std::size_t>(*count), args, inv.args[1]);
    if (inv.g.json) {
      print_json(json_array(refs, [&](const agentd::AgentRef& r) { return created_json(r, c.address()); }));
    } else {
      for (const auto& r : refs) std::cout << r.id() << "\n";
    }
    return kExitOk;
  }
  auto c = connect(inv);
  auto ref = c.create_agent(inv.args[0], inv.args[1], args, inv.value("--id").value_or(""));
  if (inv.g.json)
    print_json(created_json(ref, c.address()));
  else
    std::cout << ref.id() << "\n";
  return kExitOk;
}

int cmd_clone(const Invocation& inv) {
  auto c = connect(inv);
  auto ref = c.clone_agent(inv.args[0], inv.args.size() > 1 ? inv.args[1] : std::string(),
                           inv.value("--id").value_or(""));
  if (inv.g.json)
    print_json(created_json(ref, c.address()));
  else
    std::cout << ref.id() << "\n";
  return kExitOk;
}

namespace {

// call --stream: prints the chunks as they arrive (text: as they are; --json: one
// {"chunk": TEXT} line each, then the whole message). An agent that emits no chunks gets its
// reply printed as without --stream. A failure after some chunks ends their line first.
int stream_call(const Invocation& inv, const agentd::AgentRef& agent, const agentd::Msg& x) {
  auto p = agent.reply_stream(x);
  bool any = false;
  try {
    while (auto chunk = p.next_chunk(inv.timeout())) {
      any = true;
      if (inv.g.json)
        std::cout << Value{{"chunk", *chunk}}.dump() << "\n";
      else
        std::cout << *chunk;
      std::cout.flush();
    }
  } catch (const agentd::Error&) {
    if (any && !inv.g.json) std::cout << "\n";
    std::cout.flush();
    throw;
  }
  auto reply = p.get(inv.timeout());
  if (inv.g.json)
    print_json(agentd::to_json(reply));
  else
    std::cout << (any ? std::string() : reply.text()) << "\n";
  return kExitOk;
}

}  // namespace

int cmd_call(const Invocation& inv) {
  Value content = inv.args[1];
  if (inv.flag("--content-json")) content = parse_json_arg(inv, "MESSAGE", inv.args[1]);
  auto c = connect(inv);
  auto agent = agent_named(c, inv, inv.args[0]);
  agentd::Msg x(inv.value("--name").value_or("user"), content, "user");
  if (inv.flag("--stream")) return stream_call(inv, agent, x);
  auto reply = agent.reply(x).get(inv.timeout());
  if (inv.g.json)
    print_json(agentd::to_json(reply));
  else
    std::cout << reply.text() << "\n";
  return kExitOk;
}

int cmd_method(const Invocation& inv) {
  Value args = Value::object();
  if (inv.args.size() > 2) args = parse_json_arg(inv, "JSON", inv.args[2]);
  auto c = connect(inv);
  auto v = agent_named(c, inv, inv.args[0]).call(inv.args[1], args);
  if (!inv.g.json && v.is_string())
    std::cout << v.get<std::string>() << "\n";
  else
    print_json(v);
  return kExitOk;
}

int cmd_memory(const Invocation& inv) {
  auto c = connect(inv);
  auto mem = agent_named(c, inv, inv.args[0]).memory();
  if (inv.g.json)
    print_json(json_array(mem, [](const agentd::Msg& m) { return agentd::to_json(m); }));
  else if (mem.empty())
    std::cout << "memory of " << inv.args[0] << " is empty\n";
  else
    print_memory(mem);
  return kExitOk;
}

int cmd_delete(const Invocation& inv) {
  bool all = inv.flag("--all");
  if (all == !inv.args.empty())
    throw inv.usage(all ? "give either AGENT_ID... or --all, not both"
                        : "which agent? give AGENT_ID... (see `agentctl list`) or --all");
  auto c = connect(inv);
  if (all) {
    auto n = c.delete_all_agents();
    if (inv.g.json)
      print_json({{"deleted", n}});
    else
      std::cout << "deleted " << n << " agent(s) on " << c.address() << "\n";
    return kExitOk;
  }
  // Every agent given is tried: one that is not there is reported, and the others still go.
  Value deleted = Value::array(), failed = Value::array();
  std::optional<agentd::Error> first;
  for (std::size_t i = 0; i < inv.args.size(); ++i) {
    const auto& arg = inv.args[i];
    try {
      auto id = agent_named(c, inv, arg).id();
      c.delete_agent(id);
      deleted.push_back(id);
      if (!inv.g.json) std::cout << "deleted " << id << "\n";
    } catch (const agentd::Error& e) {
      if (!first) first = e;
      failed.push_back(
          {{"agent", arg}, {"code", std::string(agentd::to_string(e.code()))}, {"message", e.message()}});
      if (!inv.g.json)
        std::cerr << "agentctl delete: " << arg << ": " << agentd::to_string(e.code()) << ": " << e.message()
                  << "\n";
      if (e.code() == agentd::ErrorCode::disconnected) {
        // The rest cannot be reached either: say which were not tried.
        for (std::size_t j = i + 1; j < inv.args.size(); ++j) {
          failed.push_back(
              {{"agent", inv.args[j]}, {"code", "skipped"}, {"message", "not tried: the server went away"}});
          if (!inv.g.json) std::cerr << "agentctl delete: " << inv.args[j] << ": skipped\n";
        }
        break;
      }
    }
  }
  if (inv.g.json) print_json({{"deleted", deleted}, {"failed", failed}});
  if (!first) return kExitOk;
  if (!inv.g.json)
    std::cerr << "agentctl delete: deleted " << deleted.size() << " of " << inv.args.size()
              << " agent(s); `agentctl list` shows the agents there are\n";
  return first->code() == agentd::ErrorCode::disconnected ? kExitUnreachable : kExitFailed;
}

int cmd_reload(const Invocation& inv) {
  auto file = inv.value("--file");
  if (!file)
    throw inv.usage(
        "give the model config file to send: `agentctl reload --file models.yaml`.\n"
        "To make a server re-read its own --model-config-path (and --auth-token-file) instead,\n"
        "send it SIGHUP:\n"
        "  systemctl reload as_server        (or as_server@INSTANCE)\n"
        "  kill -HUP PID                     (PID: `agentctl status`)");
  std::ifstream in(*file, std::ios::binary);
  if (!in) throw inv.usage(fmt::format("cannot read --file {}", *file));
  std::ostringstream text;
  text << in.rdbuf();
  auto c = connect(inv);
  const auto before = c.info().model_configs;
  std::uint64_t version = 0;
  try {
    version = c.set_model_configs(text.str());
  } catch (const agentd::Error& e) {
    if (e.code() != agentd::ErrorCode::config_error) throw;
    // The server names what it parsed "setModelConfigs": that is this file.
    std::string message = e.message();
    for (auto at = message.find("setModelConfigs"); at != std::string::npos;
         at = message.find("setModelConfigs", at + file->size()))
      message.replace(at, std::string("setModelConfigs").size(), *file);
    throw agentd::Error(e.code(), message, e.agent_id(), e.agent_class(), e.retryable());
  }
  // The file replaces all the configs: say loudly which ones went (agents using them fail at
  // their next call).
  const auto after = c.info().model_configs;
  Value dropped = Value::array();
  for (const auto& name : before)
    if (std::find(after.begin(), after.end(), name) == after.end()) dropped.push_back(name);
  if (inv.g.json) {
    print_json({{"server", c.address()},
                {"model_config_version", version},
                {"file", *file},
                {"model_configs", after},
                {"removed", dropped}});
  } else {
    std::cout << "model configs on " << c.address() << " replaced from " << *file << " (version " << version
              << ")\n";
    if (!dropped.empty()) {
      std::string names;
      for (const auto& n : dropped) names += (names.empty() ? "" : ", ") + n.get<std::string>();
      std::cerr << "agentctl reload: warning: the file replaces all model configs: " << names << " (not in "
                << *file << ") are gone; agents using them fail at their next "
                << "call until a reload brings them back\n";
    }
  }
  return kExitOk;
}

int cmd_stop(const Invocation& inv) {
  auto c = connect(inv);
  auto address = c.address();
  auto id = c.server_id();
  bool waited = false;
  try {
    c.stop();
  } catch (const agentd::Error& e) {
    // An idle server may exit before its answer is on the wire: gone is what we asked for.
    if (e.code() != agentd::ErrorCode::disconnected) throw;
    waited = true;
  }
  if (inv.flag("--wait") && !waited) {
    // The server drains running calls, then closes every connection: wait for that.
    auto deadline = std::chrono::steady_clock::now() + inv.timeout();
    for (;;) {
      try {
        c.ping();
      } catch (const agentd::Error&) {
        waited = true;
        break;
      }
      if (std::chrono::steady_clock::now() >= deadline)
        throw agentd::Error(agentd::ErrorCode::timeout,
                            fmt::format("{} is still answering after {} s", address, inv.g.timeout_s));
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  if (inv.g.json)
    print_json({{"server", address}, {"server_id", id}, {"stopped", waited}, {"stopping", true}});
  else
    std::cout << (waited ? "stopped " : "stopping ") << "as_server " << id << " at " << address << "\n";
  return kExitOk;
}

int cmd_ping(const Invocation& inv) {
  auto t0 = std::chrono::steady_clock::now();
  auto c = connect(inv);
  auto t1 = std::chrono::steady_clock::now();
  c.ping();
  auto t2 = std::chrono::steady_clock::now();
  auto ms = [](auto d) { return std::chrono::duration<double, std::milli>(d).count(); };
  if (inv.g.json)
    print_json({{"server", c.address()},
                {"server_id", c.server_id()},
                {"connect_ms", ms(t1 - t0)},
                {"rtt_ms", ms(t2 - t1)}});
  else
    std::cout << fmt::format("pong from {} (server {}): {:.3f} ms (connect {:.3f} ms)\n", c.address(),
                             c.server_id(), ms(t2 - t1), ms(t1 - t0));
  return kExitOk;
}

int cmd_trace(const Invocation& inv) {
  std::uint32_t limit = 50;
  if (auto l = inv.value("--limit")) {
    auto n = parse_whole(*l, 0, 4096);
    if (!n)
      throw inv.usage(fmt::format("--limit must be a number from 0 to 4096 (0: all kept), not '{}'", *l));
    limit = static_cast<std::uint32_t>(*n);
  }
  const auto chrome = inv.value("--chrome");
  if (chrome && chrome->empty()) throw inv.usage("--chrome needs a file name ('-' for standard output)");
  auto c = connect(inv);
  auto spans = c.traces(limit);
  if (chrome) {
    const std::string text = agentd::to_chrome_trace({{c.address(), spans}});
    if (*chrome == "-") {
      std::cout << text << "\n";
      return kExitOk;
    }
    write_file_atomically(*chrome, text + "\n");
    std::cerr << fmt::format(
        "wrote {} span(s) of {} to {}: open it in https://ui.perfetto.dev or chrome://tracing\n",
        spans.size(), c.address(), *chrome);
    return kExitOk;
  }
  if (inv.g.json)
    print_json(json_array(spans, span_json));
  else if (spans.empty())
    std::cout << "no finished calls traced on " << c.address() << " yet\n";
  else
    print_spans(spans);
  return kExitOk;
}

namespace {

Value tool_usage_json(const agentd::ToolUsage& u) {
  return {{"calls", u.calls}, {"failures", u.failures}, {"latency_us_total", u.latency_us_total}};
}

Value tool_server_json(const agentd::ToolServerInfo& s) {
  return {{"name", s.name},
          {"transport", s.transport},
          {"state", s.state},
          {"error", s.error},
          {"protocol_version", s.protocol_version},
          {"server_name", s.server_name},
          {"server_version", s.server_version},
          {"restarts", s.restarts},
          {"usage", tool_usage_json(s.usage)},
          {"tools", json_array(s.tools, [](const agentd::ToolInfo& t) {
             Value v = {{"name", t.name},
                        {"title", t.title},
                        {"description", t.description},
                        {"input_schema", t.input_schema},
                        {"usage", tool_usage_json(t.usage)}};
             if (!t.output_schema.is_null()) v["output_schema"] = t.output_schema;
             if (!t.annotations.is_null()) v["annotations"] = t.annotations;
             return v;
           })}};
}

// The first line of a tool server's text (descriptions can be long), at most `max` characters,
// control characters (a terminal's escape sequences) shown as '?'.
std::string summary(const std::string& text, std::size_t max = 100) {
  std::string line = text.substr(0, text.find('\n'));
  if (line.size() > max) line = line.substr(0, max - 3) + "...";
  for (char& c : line)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  return line;
}

}  // namespace

int cmd_tools(const Invocation& inv) {
  auto c = connect(inv);
  const auto servers = c.tools(!inv.flag("--no-start"));
  if (inv.g.json) {
    print_json(json_array(servers, tool_server_json));
    return kExitOk;
  }
  if (servers.empty()) {
    std::cout << "no tool servers on " << c.address()
              << " (as_server --tool-config-path FILE; see config/tools.yaml)\n";
    return kExitOk;
  }
  for (const auto& s : servers) {
    std::cout << fmt::format("{} ({}): {}", s.name, s.transport, s.state);
    if (!s.error.empty()) std::cout << ": " << summary(s.error, 1000);
    std::cout << "\n";
    if (!s.server_name.empty())
      std::cout << fmt::format("  {} {}, MCP {}, {} call(s), {} failed, {} restart(s)\n",
                               summary(s.server_name), summary(s.server_version), s.protocol_version,
                               s.usage.calls, s.usage.failures, s.restarts);
    for (const auto& t : s.tools)
      std::cout << fmt::format("  {}/{}  [{} call(s)]  {}\n", s.name, t.name, t.usage.calls,
                               summary(t.description));
  }
  return kExitOk;
}

int cmd_tool(const Invocation& inv) {
  Value args = Value::object();
  if (inv.args.size() > 2) {
    args = parse_json_arg(inv, "JSON", inv.args[2]);
    if (!args.is_object())
      throw inv.usage("JSON must be an object of the tool's arguments, e.g. '{\"path\": \"a.txt\"}'");
  }
  std::optional<std::chrono::milliseconds> timeout;
  if (auto t = inv.value("--tool-timeout")) {
    auto n = parse_whole(*t, 1, 86400);
    if (!n)
      throw inv.usage(
          fmt::format("--tool-timeout must be a number of seconds from 1 to 86400, not '{}'", *t));
    timeout = std::chrono::seconds(*n);
  }
  auto c = connect(inv);
  const agentd::ToolResult r = c.call_tool(inv.args[0], inv.args[1], args, timeout);
  if (inv.g.json)
    print_json(r.to_value());
  else
    (r.is_error ? std::cerr : std::cout) << r.text() << "\n";
  return r.is_error ? kExitFailed : kExitOk;
}

// ---- local development servers ----

namespace {

// The local processes of one kind (LocalServer::kServer or kGateway).
std::vector<LocalServer> of_kind(const std::vector<LocalServer>& all, const std::string& kind) {
  std::vector<LocalServer> out;
  for (const auto& s : all)
    if (s.kind == kind) out.push_back(s);
  return out;
}

}  // namespace

int cmd_up(const Invocation& inv) {
  auto count = parse_whole(inv.args[0], 1, 256);
  if (!count)
    throw inv.usage(fmt::format("N must be a number of servers from 1 to 256, not '{}'", inv.args[0]));
  UpOptions o;
  o.count = static_cast<int>(*count);
  o.host = inv.g.host;
  o.server_path = inv.value("--server-path").value_or("");
  o.plugins = inv.values("--plugin");
  o.plugin_dirs = inv.values("--plugin-dir");
  o.agent_dirs = inv.values("--agent-dir");
  // The default plugins only when no plugin is named at all (also not after `--`).
  // A folder of Python agents counts as naming the agents: the shipped plugins would only add
  // classes whose names may clash with them.
  bool named = !o.plugins.empty() || !o.plugin_dirs.empty() || !o.agent_dirs.empty();
  for (const auto& a : inv.passthrough)
    named =
        named || a.rfind("--plugin", 0) == 0 || a.rfind("--config", 0) == 0 || a.rfind("--agent-dir", 0) == 0;
  if (!named) o.plugin_dirs = default_plugin_dirs();
  o.model_config_path = inv.value("--model-config-path").value_or("");
  o.extra_args = inv.passthrough;
  o.timeout = inv.timeout();
  if (auto g = inv.value("--gateway")) {
    const auto colon = g->rfind(':');
    if (colon == std::string::npos || colon == 0 || !parse_whole(g->substr(colon + 1), 0, 65535))
      throw inv.usage(fmt::format("--gateway must be HOST:PORT (port 0: a free port), not '{}'", *g));
    o.gateway_listen = *g;
    o.gateway_path = inv.value("--gateway-path").value_or("");
    o.gateway_extra_args = inv.values("--gateway-arg");
  } else if (inv.value("--gateway-path") || !inv.values("--gateway-arg").empty()) {
    throw inv.usage("--gateway-path and --gateway-arg go with --gateway HOST:PORT");
  }
  auto started = up(o);
  const auto servers = of_kind(started, LocalServer::kServer);
  const auto gateways = of_kind(started, LocalServer::kGateway);
  if (inv.g.json) {
    Value out{{"servers", servers_json(servers)}, {"state_dir", state_dir()}};
    if (!gateways.empty()) out["gateway"] = gateways.front().to_json();
    print_json(out);
  } else {
    print_servers(started);
    std::cerr << "started " << servers.size() << " as_server(s)"
              << (gateways.empty() ? "" : " and agentd-gateway at " + gateways.front().url)
              << "; stop them with `agentctl down`\n";
  }
  return kExitOk;
}

int cmd_down(const Invocation& inv) {
  const bool remove_logs = inv.flag("--remove-logs");
  auto known = recorded();
  auto stopped = down(inv.timeout(), remove_logs);
  if (inv.g.json) {
    print_json({{"stopped", servers_json(stopped)}, {"logs_removed", remove_logs}});
  } else if (stopped.empty() && known.empty()) {
    std::cout << kNoLocalServers;
  } else {
    auto name = [](const LocalServer& s) {
      return s.kind == LocalServer::kGateway ? "agentd-gateway " + s.url : s.address();
    };
    for (const auto& s : stopped) std::cout << "stopped " << name(s) << " (pid " << s.pid << ")\n";
    for (const auto& s : known)
      if (!s.alive) std::cout << "forgot " << name(s) << " (pid " << s.pid << "): it had died\n";
    if (!remove_logs)
      std::cerr << "their logs stay in " << state_dir() << " (`agentctl down --remove-logs` removes them)\n";
  }
  return kExitOk;
}

int cmd_ps(const Invocation& inv) {
  if (!inv.g.cluster.empty()) return cluster_members(inv, true);
  auto servers = recorded();
  if (inv.g.json) {
    auto with_state = [](const std::vector<LocalServer>& some) {
      auto list = servers_json(some);
      for (std::size_t i = 0; i < some.size(); ++i) list[i]["state"] = some[i].alive ? "running" : "dead";
      return list;
    };
    Value out{{"servers", with_state(of_kind(servers, LocalServer::kServer))}};
    const auto gateways = of_kind(servers, LocalServer::kGateway);
    if (!gateways.empty()) out["gateways"] = with_state(gateways);
    print_json(out);
  } else if (servers.empty()) {
    std::cout << kNoLocalServers;
  } else {
    print_servers(servers, /*show_state=*/true);
  }
  return kExitOk;
}

}  // namespace agentctl

// agentctl: the operator's command line for as_server.
//   agentctl [--host H] [--port P] [--json] [--timeout S] COMMAND [ARGS] [OPTIONS]
// main() is the wiring: parse the global options and the command's, run the command against a
// Client (or the local-server state for up/down), map failures to the documented exit codes.
#include "local_servers.h"

#include <agentd/client.h>
#include <agentd/error.h>
#include <agentd/version.h>

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

namespace agentctl {
namespace {

using agentd::Value;

// Exit codes: scripts rely on these (also in --help).
constexpr int kExitOk = 0;
constexpr int kExitFailed = 1;       // the server reported an error, or the operation failed
constexpr int kExitUsage = 2;        // bad command line: nothing was sent
constexpr int kExitUnreachable = 3;  // cannot connect to the server (or the connection was lost)

constexpr const char* kDefaultHost = "127.0.0.1";
constexpr int kDefaultPort = 12310;

// A command-line mistake; main prints it with a pointer to --help and exits 2.
struct UsageError : std::runtime_error {
  UsageError(std::string command, std::string message)
      : std::runtime_error(std::move(message)), command(std::move(command)) {}
  std::string command;  // empty: a global mistake
};

struct Globals {
  std::string host = kDefaultHost;
  std::uint16_t port = kDefaultPort;
  bool json = false;
  double timeout_s = 30;
};

struct OptionSpec {
  std::string name;        // "--args"
  std::string value_name;  // empty: a flag
  std::string help;
  bool repeatable = false;
};

struct Invocation;

struct CommandSpec {
  std::string name;
  std::vector<std::string> aliases;
  std::string args_usage;  // "CLASS NAME"
  std::string summary;
  std::string details;     // more lines for `COMMAND --help`
  std::vector<OptionSpec> options;
  std::size_t min_args = 0;
  std::size_t max_args = 0;
  std::function<int(Invocation&)> run;
};

struct Invocation {
  Globals g;
  const CommandSpec* command = nullptr;
  std::vector<std::string> args;
  std::vector<std::string> passthrough;  // after "--"
  std::map<std::string, std::vector<std::string>> options;

  bool flag(const std::string& name) const { return options.count(name) > 0; }
  std::optional<std::string> value(const std::string& name) const {
    auto it = options.find(name);
    if (it == options.end() || it->second.empty()) return std::nullopt;
    return it->second.back();
  }
  std::vector<std::string> values(const std::string& name) const {
    auto it = options.find(name);
    return it == options.end() ? std::vector<std::string>{} : it->second;
  }
  std::chrono::milliseconds timeout() const {
    return std::chrono::milliseconds(static_cast<std::int64_t>(g.timeout_s * 1000));
  }
  UsageError usage(std::string message) const { return UsageError(command->name, std::move(message)); }

  agentd::Client connect() const {
    agentd::ClientOptions o;
    o.timeout = timeout();
    o.connect_timeout = std::min(timeout(), std::chrono::milliseconds(10000));
    return agentd::Client::connect(g.host, g.port, o);
  }
};

// ---- output ----

void print_json(const Value& v) { std::cout << v.dump(2) << "\n"; }

// Columns padded to their widest cell, two spaces apart; the last column is not padded.
void print_table(const std::vector<std::string>& header,
                 const std::vector<std::vector<std::string>>& rows) {
  std::vector<std::size_t> width(header.size());
  for (std::size_t i = 0; i < header.size(); ++i) width[i] = header[i].size();
  for (const auto& r : rows)
    for (std::size_t i = 0; i < r.size() && i < width.size(); ++i)
      width[i] = std::max(width[i], r[i].size());
  auto line = [&](const std::vector<std::string>& cells) {
    std::string out;
    for (std::size_t i = 0; i < cells.size(); ++i) {
      out += cells[i];
      if (i + 1 < cells.size()) out += std::string(width[i] - cells[i].size() + 2, ' ');
    }
    std::cout << out << "\n";
  };
  line(header);
  for (const auto& r : rows) line(r);
}

// "key   value" lines with the keys aligned.
void print_fields(const std::vector<std::pair<std::string, std::string>>& fields) {
  std::size_t w = 0;
  for (const auto& [k, v] : fields) w = std::max(w, k.size());
  for (const auto& [k, v] : fields) std::cout << k << std::string(w - k.size() + 2, ' ') << v << "\n";
}

std::string human_bytes(std::uint64_t n) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  return u == 0 ? fmt::format("{} B", n) : fmt::format("{:.1f} {}", v, units[u]);
}

std::string human_seconds(double s) {
  if (s < 120) return fmt::format("{:.1f} s", s);
  auto total = static_cast<std::int64_t>(s);
  if (total < 7200) return fmt::format("{}m{:02}s", total / 60, total % 60);
  if (total < 172800) return fmt::format("{}h{:02}m", total / 3600, (total % 3600) / 60);
  return fmt::format("{}d{:02}h", total / 86400, (total % 86400) / 3600);
}

std::string join(const std::vector<std::string>& v, const std::string& sep) {
  std::string out;
  for (std::size_t i = 0; i < v.size(); ++i) out += (i ? sep : "") + v[i];
  return out;
}

// One line of a message's content for a table: text as is, other values as compact JSON.
std::string one_line(const agentd::Msg& m, std::size_t max = 72) {
  std::string t = m.text();
  for (auto& c : t)
    if (c == '\n' || c == '\r' || c == '\t') c = ' ';
  if (t.size() > max) t = t.substr(0, max - 3) + "...";
  return t;
}

Value agent_json(const agentd::AgentInfo& a) {
  return {{"id", a.id},
          {"name", a.name},
          {"class", a.class_name},
          {"queued_calls", a.queued_calls},
          {"completed_calls", a.completed_calls},
          {"failed_calls", a.failed_calls}};
}

Value server_json(const agentd::ServerInfo& i) {
  return {{"server_id", i.server_id},
          {"address", i.advertise_address},
          {"version", i.version},
          {"pid", i.pid},
          {"uptime_seconds", i.uptime_seconds},
          {"cpu_seconds", i.cpu_seconds},
          {"rss_bytes", i.rss_bytes},
          {"agents", i.agent_count},
          {"workers", i.workers},
          {"calls", {{"completed", i.calls_completed}, {"failed", i.calls_failed},
                     {"queued", i.calls_queued}}},
          {"pool", {{"size", i.pool_size}, {"max_size", i.max_pool_size},
                    {"max_expire_seconds", i.max_expire_seconds}}},
          {"classes", i.classes},
          {"model_configs", i.model_configs},
          {"model_usage", {{"config_version", i.model_config_version}, {"calls", i.model_calls},
                           {"errors", i.model_errors},
                           {"prompt_tokens", i.model_prompt_tokens},
                           {"completion_tokens", i.model_completion_tokens}}},
          {"bytes", {{"client_in", i.bytes_client_in}, {"client_out", i.bytes_client_out},
                     {"peer_in", i.bytes_peer_in}, {"peer_out", i.bytes_peer_out}}}};
}

Value parse_json_arg(const Invocation& inv, const std::string& what, const std::string& text) {
  auto v = Value::parse(text, nullptr, false);
  if (v.is_discarded())
    throw inv.usage(fmt::format("{} is not valid JSON: {} (quote it for the shell, e.g. "
                                "'{{\"prefix\": \"> \"}}')",
                                what, text));
  return v;
}

// ---- commands ----

int cmd_status(Invocation& inv) {
  auto c = inv.connect();
  auto i = c.info();
  if (inv.g.json) {
    print_json(server_json(i));
    return kExitOk;
  }
  print_fields({
      {"server", i.server_id},
      {"address", i.advertise_address},
      {"version", i.version},
      {"pid", std::to_string(i.pid)},
      {"uptime", human_seconds(i.uptime_seconds)},
      {"cpu", fmt::format("{:.2f} s", i.cpu_seconds)},
      {"rss", human_bytes(i.rss_bytes)},
      {"agents", std::to_string(i.agent_count)},
      {"calls", fmt::format("{} completed, {} failed, {} queued", i.calls_completed,
                            i.calls_failed, i.calls_queued)},
      {"workers", std::to_string(i.workers)},
      {"pool", fmt::format("{} / {} results, kept {} s", i.pool_size, i.max_pool_size,
                           i.max_expire_seconds)},
      {"classes", i.classes.empty() ? "(none: start as_server with --plugin or --plugin-dir)"
                                    : join(i.classes, ", ")},
      {"models", fmt::format("{} (config version {})", join(i.model_configs, ", "),
                             i.model_config_version)},
      {"model use", fmt::format("{} calls, {} failed, {} prompt + {} completion tokens",
                                i.model_calls, i.model_errors, i.model_prompt_tokens,
                                i.model_completion_tokens)},
      {"traffic", fmt::format("clients {} in / {} out, peers {} in / {} out",
                              human_bytes(i.bytes_client_in), human_bytes(i.bytes_client_out),
                              human_bytes(i.bytes_peer_in), human_bytes(i.bytes_peer_out))},
  });
  return kExitOk;
}

int cmd_list(Invocation& inv) {
  auto c = inv.connect();
  auto agents = c.list_agents();
  std::sort(agents.begin(), agents.end(),
            [](const auto& a, const auto& b) { return std::tie(a.name, a.id) < std::tie(b.name, b.id); });
  if (inv.g.json) {
    Value out = Value::array();
    for (const auto& a : agents) out.push_back(agent_json(a));
    print_json(out);
    return kExitOk;
  }
  if (agents.empty()) {
    std::cout << "no agents on " << c.address() << " (create one with `agentctl create CLASS NAME`)\n";
    return kExitOk;
  }
  std::vector<std::vector<std::string>> rows;
  for (const auto& a : agents)
    rows.push_back({a.id, a.name, a.class_name, std::to_string(a.queued_calls),
                    std::to_string(a.completed_calls), std::to_string(a.failed_calls)});
  print_table({"ID", "NAME", "CLASS", "QUEUED", "COMPLETED", "FAILED"}, rows);
  return kExitOk;
}

int cmd_create(Invocation& inv) {
  Value args = Value::object();
  if (auto a = inv.value("--args")) {
    args = parse_json_arg(inv, "--args", *a);
    if (!args.is_object()) throw inv.usage("--args must be a JSON object, e.g. '{\"k\": 1}'");
  }
  if (auto count_text = inv.value("--count")) {
    std::size_t count = 0;
    try {
      std::size_t used = 0;
      long long n = std::stoll(*count_text, &used);
      if (used != count_text->size() || n < 1) throw std::invalid_argument("range");
      count = static_cast<std::size_t>(n);
    } catch (const std::exception&) {
      throw inv.usage("--count must be a whole number of at least 1, not '" + *count_text + "'");
    }
    if (inv.value("--id")) throw inv.usage("--id names one agent; it cannot go with --count");
    auto c = inv.connect();
    auto refs = c.create_agents(inv.args[0], count, args, inv.args[1]);
    if (inv.g.json) {
      Value out = Value::array();
      for (const auto& r : refs)
        out.push_back({{"id", r.id()}, {"name", r.name()}, {"class", r.class_name()},
                       {"server", c.address()}});
      print_json(out);
    } else {
      for (const auto& r : refs) std::cout << r.id() << "\n";
    }
    return kExitOk;
  }
  auto c = inv.connect();
  auto ref = c.create_agent(inv.args[0], inv.args[1], args, inv.value("--id").value_or(""));
  if (inv.g.json)
    print_json({{"id", ref.id()}, {"name", ref.name()}, {"class", ref.class_name()},
                {"server", c.address()}});
  else
    std::cout << ref.id() << "\n";
  return kExitOk;
}

int cmd_call(Invocation& inv) {
  Value content = inv.args[1];
  if (inv.flag("--content-json")) content = parse_json_arg(inv, "MESSAGE", inv.args[1]);
  auto c = inv.connect();
  auto agent = c.agent(inv.args[0]);
  agentd::Msg x(inv.value("--name").value_or("user"), content, "user");
  auto reply = agent.reply(x).get(inv.timeout());
  if (inv.g.json)
    print_json(agentd::to_json(reply));
  else
    std::cout << reply.text() << "\n";
  return kExitOk;
}

int cmd_method(Invocation& inv) {
  Value args = Value::object();
  if (inv.args.size() > 2) args = parse_json_arg(inv, "JSON", inv.args[2]);
  auto c = inv.connect();
  auto v = c.agent(inv.args[0]).call(inv.args[1], args);
  if (!inv.g.json && v.is_string())
    std::cout << v.get<std::string>() << "\n";
  else
    print_json(v);
  return kExitOk;
}

int cmd_memory(Invocation& inv) {
  auto c = inv.connect();
  auto mem = c.agent(inv.args[0]).memory();
  if (inv.g.json) {
    Value out = Value::array();
    for (const auto& m : mem) out.push_back(agentd::to_json(m));
    print_json(out);
    return kExitOk;
  }
  if (mem.empty()) {
    std::cout << "memory of " << inv.args[0] << " is empty\n";
    return kExitOk;
  }
  std::vector<std::vector<std::string>> rows;
  for (std::size_t i = 0; i < mem.size(); ++i)
    rows.push_back({std::to_string(i + 1), mem[i].timestamp, mem[i].name, mem[i].role,
                    one_line(mem[i])});
  print_table({"#", "TIME", "NAME", "ROLE", "CONTENT"}, rows);
  return kExitOk;
}

int cmd_delete(Invocation& inv) {
  bool all = inv.flag("--all");
  if (all == !inv.args.empty())
    throw inv.usage(all ? "give either AGENT_ID... or --all, not both"
                        : "which agent? give AGENT_ID... (see `agentctl list`) or --all");
  auto c = inv.connect();
  if (all) {
    auto n = c.delete_all_agents();
    if (inv.g.json)
      print_json({{"deleted", n}});
    else
      std::cout << "deleted " << n << " agent(s) on " << c.address() << "\n";
    return kExitOk;
  }
  Value deleted = Value::array();
  for (const auto& id : inv.args) {
    c.delete_agent(id);
    deleted.push_back(id);
    if (!inv.g.json) std::cout << "deleted " << id << "\n";
  }
  if (inv.g.json) print_json({{"deleted", deleted}});
  return kExitOk;
}

int cmd_reload(Invocation& inv) {
  auto file = inv.value("--file");
  if (!file)
    throw inv.usage(
        "give the model config file to send: `agentctl reload --file models.yaml`.\n"
        "To make a server re-read its own --model-config-path instead, send it SIGHUP:\n"
        "  systemctl reload as_server        (or as_server@INSTANCE)\n"
        "  kill -HUP PID                     (PID: `agentctl status`)");
  std::ifstream in(*file, std::ios::binary);
  if (!in) throw inv.usage(fmt::format("cannot read --file {}", *file));
  std::ostringstream text;
  text << in.rdbuf();
  auto c = inv.connect();
  auto version = c.set_model_configs(text.str());
  if (inv.g.json)
    print_json({{"server", c.address()}, {"model_config_version", version}, {"file", *file}});
  else
    std::cout << "model configs on " << c.address() << " replaced from " << *file
              << " (version " << version << ")\n";
  return kExitOk;
}

int cmd_stop(Invocation& inv) {
  auto c = inv.connect();
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

int cmd_ping(Invocation& inv) {
  auto t0 = std::chrono::steady_clock::now();
  auto c = inv.connect();
  auto t1 = std::chrono::steady_clock::now();
  c.ping();
  auto t2 = std::chrono::steady_clock::now();
  auto ms = [](auto d) { return std::chrono::duration<double, std::milli>(d).count(); };
  if (inv.g.json)
    print_json({{"server", c.address()}, {"server_id", c.server_id()},
                {"connect_ms", ms(t1 - t0)}, {"rtt_ms", ms(t2 - t1)}});
  else
    std::cout << fmt::format("pong from {} (server {}): {:.3f} ms (connect {:.3f} ms)\n",
                             c.address(), c.server_id(), ms(t2 - t1), ms(t1 - t0));
  return kExitOk;
}

Value servers_json(const std::vector<LocalServer>& servers) {
  Value out = Value::array();
  for (const auto& s : servers) out.push_back(s.to_json());
  return out;
}

void print_servers(const std::vector<LocalServer>& servers) {
  std::vector<std::vector<std::string>> rows;
  for (const auto& s : servers)
    rows.push_back({s.address(), std::to_string(s.pid), s.server_id, s.log_path});
  print_table({"ADDRESS", "PID", "SERVER_ID", "LOG"}, rows);
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

int cmd_up(Invocation& inv) {
  UpOptions o;
  try {
    std::size_t used = 0;
    o.count = std::stoi(inv.args[0], &used);
    if (used != inv.args[0].size() || o.count < 1 || o.count > 256) throw std::invalid_argument("");
  } catch (const std::exception&) {
    throw inv.usage(fmt::format("N must be a number of servers from 1 to 256, not '{}'", inv.args[0]));
  }
  o.host = inv.g.host;
  o.server_path = inv.value("--server-path").value_or("");
  o.plugins = inv.values("--plugin");
  o.plugin_dirs = inv.values("--plugin-dir");
  if (o.plugins.empty() && o.plugin_dirs.empty()) o.plugin_dirs = default_plugin_dirs();
  o.model_config_path = inv.value("--model-config-path").value_or("");
  o.extra_args = inv.passthrough;
  o.timeout = inv.timeout();
  auto started = up(o);
  if (inv.g.json) {
    print_json({{"servers", servers_json(started)}, {"state_dir", state_dir()}});
  } else {
    print_servers(started);
    std::cerr << "started " << started.size() << " as_server(s); stop them with `agentctl down`\n";
  }
  return kExitOk;
}

int cmd_down(Invocation& inv) {
  auto grace = inv.timeout();
  auto stopped = down(grace);
  if (inv.g.json) {
    print_json({{"stopped", servers_json(stopped)}});
  } else if (stopped.empty()) {
    std::cout << "no servers started by `agentctl up` are running\n";
  } else {
    for (const auto& s : stopped)
      std::cout << "stopped " << s.address() << " (pid " << s.pid << ")\n";
  }
  return kExitOk;
}

int cmd_ps(Invocation& inv) {
  auto servers = recorded();
  if (inv.g.json)
    print_json({{"servers", servers_json(servers)}});
  else if (servers.empty())
    std::cout << "no servers started by `agentctl up` are running\n";
  else
    print_servers(servers);
  return kExitOk;
}

Value span_json(const agentd::TraceSpan& s) {
  return {{"seq", s.seq},
          {"call_id", s.call_id},
          {"agent_id", s.agent_id},
          {"agent_class", s.agent_class},
          {"kind", s.kind},
          {"method", s.method},
          {"consumed", s.consumed},
          {"enqueued_unix_ns", s.enqueued_unix_ns},
          {"queue_wait_ns", s.queue_wait_ns},
          {"run_ns", s.run_ns},
          {"outcome", s.outcome},
          {"error_message", s.error_message}};
}

int cmd_trace(Invocation& inv) {
  std::uint32_t limit = 50;
  if (auto l = inv.value("--limit")) {
    std::size_t used = 0;
    unsigned long n = 0;
    try {
      n = std::stoul(*l, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != l->size() || n > 4096 || (*l)[0] == '-')
      throw inv.usage(fmt::format("--limit must be a number from 0 to 4096 (0: all kept), not '{}'", *l));
    limit = static_cast<std::uint32_t>(n);
  }
  auto c = inv.connect();
  auto spans = c.traces(limit);
  if (inv.g.json) {
    Value out = Value::array();
    for (const auto& s : spans) out.push_back(span_json(s));
    print_json(out);
    return kExitOk;
  }
  if (spans.empty()) {
    std::cout << "no finished calls traced on " << c.address() << " yet\n";
    return kExitOk;
  }
  auto ms = [](std::int64_t ns) { return fmt::format("{:.3f}", static_cast<double>(ns) / 1e6); };
  std::vector<std::vector<std::string>> rows;
  for (const auto& s : spans)
    rows.push_back({std::to_string(s.seq), s.call_id.empty() ? "-" : s.call_id, s.agent_id,
                    s.agent_class, s.method.empty() ? s.kind : s.kind + ":" + s.method,
                    s.consumed.empty() ? "-" : join(s.consumed, ","), ms(s.queue_wait_ns),
                    ms(s.run_ns), s.outcome});
  print_table({"SEQ", "CALL_ID", "AGENT", "CLASS", "KIND", "CONSUMED", "WAIT_MS", "RUN_MS",
               "OUTCOME"},
              rows);
  return kExitOk;
}

const std::vector<CommandSpec>& commands() {
  static const std::vector<CommandSpec> specs = {
      {"status", {"info"}, "", "show the server's id, version, load, agents, classes and models",
       "", {}, 0, 0, cmd_status},
      {"list", {"ls"}, "", "list the agents on the server (ID, NAME, CLASS, call counts)", "", {},
       0, 0, cmd_list},
      {"create", {}, "CLASS NAME", "create an agent; prints its id",
       "CLASS is a class the server offers (see `agentctl status`).\n"
       "With --count N, creates N agents named NAME0 .. NAME<N-1> in bulk and prints their ids,\n"
       "one per line; all or nothing (on a failure none is left).",
       {{"--args", "JSON", "constructor arguments, a JSON object (default {})"},
        {"--id", "ID", "the agent id (default: generated)"},
        {"--count", "N", "create N agents of CLASS at once"}},
       2, 2, cmd_create},
      {"call", {"reply"}, "AGENT_ID MESSAGE",
       "send MESSAGE to an agent as a user message and print its reply",
       "Prints the reply's text content; --json prints the whole message.",
       {{"--name", "NAME", "the sender's name (default user)"},
        {"--content-json", "", "MESSAGE is a JSON value, not text"}},
       2, 2, cmd_call},
      {"method", {}, "AGENT_ID METHOD [JSON]",
       "call a named method of an agent synchronously and print its value",
       "JSON is the method's argument (default {}).", {}, 2, 3, cmd_method},
      {"memory", {}, "AGENT_ID", "print an agent's memory", "", {}, 1, 1, cmd_memory},
      {"delete", {"rm"}, "AGENT_ID...|--all", "delete agents", "",
       {{"--all", "", "delete every agent on the server"}}, 0, 1000, cmd_delete},
      {"reload", {}, "--file FILE", "replace the server's model configs with FILE (YAML or JSON)",
       "To make a server re-read its own --model-config-path, send it SIGHUP instead\n"
       "(`systemctl reload as_server`, or `kill -HUP PID`).",
       {{"--file", "FILE", "the model config file to send"}}, 0, 0, cmd_reload},
      {"stop", {}, "", "ask the server to stop (running calls finish first)", "",
       {{"--wait", "", "wait until it has stopped (at most --timeout)"}}, 0, 0, cmd_stop},
      {"ping", {}, "", "check that the server answers; prints the round trip time", "", {}, 0, 0,
       cmd_ping},
      {"trace", {}, "", "show the spans of the most recent finished agent calls",
       "One row per call, oldest first: call id, agent, class, kind, the call ids of the\n"
       "placeholders it consumed, queue wait and run time (ms), outcome.",
       {{"--limit", "N", "show at most N spans (default 50; 0: all the server keeps)"}}, 0, 0,
       cmd_trace},
      {"up", {}, "N [-- AS_SERVER_OPTIONS...]",
       "start N local as_server processes on free ports, in the background",
       "They listen on --host and keep running after agentctl exits; their pids, ports and\n"
       "logs are recorded in $AGENTD_STATE_DIR, else $XDG_RUNTIME_DIR/agentd, else\n"
       "/tmp/agentd-$UID. Without --plugin/--plugin-dir they load the plugins built or\n"
       "installed beside agentctl. Options after `--` go to each as_server.",
       {{"--plugin-dir", "DIR", "load every plugin in DIR (repeatable)", true},
        {"--plugin", "FILE", "load the plugin FILE (repeatable)", true},
        {"--model-config-path", "FILE", "model configs for the servers"},
        {"--server-path", "PATH", "the as_server binary (default: beside agentctl, then $PATH)"}},
       1, 1, cmd_up},
      {"down", {}, "", "stop the servers started by `agentctl up`", "", {}, 0, 0, cmd_down},
      {"ps", {}, "", "list the servers started by `agentctl up` that are running", "", {}, 0, 0,
       cmd_ps},
  };
  return specs;
}

const CommandSpec* find_command(const std::string& name) {
  for (const auto& c : commands()) {
    if (c.name == name) return &c;
    for (const auto& a : c.aliases)
      if (a == name) return &c;
  }
  return nullptr;
}

const char* kGlobalOptions =
    "Global options (anywhere on the line):\n"
    "  --host HOST      the server's host (default $AGENTD_HOST, else 127.0.0.1)\n"
    "  --port PORT      the server's port (default $AGENTD_PORT, else 12310)\n"
    "  --json           print JSON for scripts instead of tables\n"
    "  --timeout S      seconds to wait for an answer (default 30)\n"
    "  -h, --help       help (`agentctl COMMAND --help` for a command)\n"
    "  --version        print the version\n";

const char* kExitCodes =
    "Exit codes:\n"
    "  0  ok\n"
    "  1  the server reported an error (unknown agent, agent failed, ...) or the operation failed\n"
    "  2  usage error: bad command line, nothing was sent\n"
    "  3  cannot connect to the server (or the connection was lost)\n";

std::string main_help() {
  std::string out =
      "agentctl: operate agentd's as_server\n\n"
      "Usage: agentctl [--host HOST] [--port PORT] [--json] [--timeout S] COMMAND [ARGS]\n\n"
      "Commands:\n";
  for (const auto& c : commands()) {
    auto head = c.name + (c.args_usage.empty() ? "" : " " + c.args_usage);
    out += fmt::format("  {:<34}{}\n", head, c.summary);
  }
  out += "\n";
  out += kGlobalOptions;
  out += "\n";
  out += kExitCodes;
  return out;
}

std::string command_help(const CommandSpec& c) {
  std::string out = fmt::format("Usage: agentctl [GLOBAL OPTIONS] {}{}{}\n\n{}\n", c.name,
                                c.args_usage.empty() ? "" : " ", c.args_usage, c.summary);
  if (!c.details.empty()) out += "\n" + c.details + "\n";
  if (!c.aliases.empty()) out += "\nAlias: " + join(c.aliases, ", ") + "\n";
  if (!c.options.empty()) {
    out += "\nOptions:\n";
    for (const auto& o : c.options)
      out += fmt::format("  {:<26}{}\n", o.name + (o.value_name.empty() ? "" : " " + o.value_name),
                         o.help);
  }
  out += "\n";
  out += kGlobalOptions;
  out += "\n";
  out += kExitCodes;
  return out;
}

enum class Parsed { run, help, version };

// Parses argv into inv. Global options may appear anywhere; "--" ends option parsing (the rest
// is passed through, for `up`). Throws UsageError.
Parsed parse(int argc, char** argv, Invocation& inv) {
  if (const char* h = std::getenv("AGENTD_HOST"); h && *h) inv.g.host = h;
  std::string port_text;
  if (const char* p = std::getenv("AGENTD_PORT"); p && *p) port_text = p;
  bool help = false;
  std::vector<std::string> words;
  auto cmd_name = [&] { return inv.command ? inv.command->name : std::string{}; };

  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--") {
      // The rest: as_server options for `up`, plain arguments (e.g. "-x" as a MESSAGE) otherwise.
      bool for_up = inv.command && inv.command->name == "up";
      for (++i; i < argc; ++i) (for_up ? inv.passthrough : words).emplace_back(argv[i]);
      break;
    }
    std::string name = a, inline_value;
    bool has_inline = false;
    if (a.starts_with("--")) {
      if (auto eq = a.find('='); eq != std::string::npos) {
        name = a.substr(0, eq);
        inline_value = a.substr(eq + 1);
        has_inline = true;
      }
    }
    auto take_value = [&](const std::string& opt) -> std::string {
      if (has_inline) return inline_value;
      if (i + 1 >= argc) throw UsageError(cmd_name(), opt + " needs a value");
      return argv[++i];
    };
    if (name == "-h" || name == "--help") {
      help = true;
    } else if (name == "--version") {
      return Parsed::version;
    } else if (name == "--json") {
      inv.g.json = true;
    } else if (name == "--host") {
      inv.g.host = take_value(name);
      if (inv.g.host.empty()) throw UsageError(cmd_name(), "--host must not be empty");
    } else if (name == "--port") {
      port_text = take_value(name);
    } else if (name == "--timeout") {
      auto t = take_value(name);
      try {
        std::size_t used = 0;
        inv.g.timeout_s = std::stod(t, &used);
        if (used != t.size() || !(inv.g.timeout_s > 0)) throw std::invalid_argument("");
      } catch (const std::exception&) {
        throw UsageError(cmd_name(), fmt::format("--timeout must be a positive number of seconds, not '{}'", t));
      }
    } else if (a.size() > 1 && a[0] == '-' && !(a.size() > 1 && std::isdigit(static_cast<unsigned char>(a[1])))) {
      // A command option: known only once the command is (options may precede it).
      if (!inv.command) {
        if (!words.empty()) inv.command = find_command(words[0]);
        if (!inv.command)
          throw UsageError("", fmt::format("unknown option {} (options of a command come with "
                                           "the command: `agentctl COMMAND --help`)",
                                           name));
      }
      const OptionSpec* spec = nullptr;
      for (const auto& o : inv.command->options)
        if (o.name == name) spec = &o;
      if (!spec)
        throw UsageError(cmd_name(), fmt::format("{} has no option {}", inv.command->name, name));
      if (spec->value_name.empty()) {
        if (has_inline) throw UsageError(cmd_name(), name + " takes no value");
        inv.options[name];
      } else {
        auto& vals = inv.options[name];
        vals.push_back(take_value(name));
        if (vals.size() > 1 && !spec->repeatable)
          throw UsageError(cmd_name(), name + " given more than once");
      }
    } else {
      words.push_back(a);
      if (words.size() == 1 && a == "help") {
        help = true;  // `agentctl help [COMMAND]`
      } else if (words.size() == 2 && words[0] == "help") {
        inv.command = find_command(a);
        if (!inv.command) throw UsageError("", fmt::format("unknown command '{}'", a));
      } else if (words.size() == 1) {
        inv.command = find_command(a);
        if (!inv.command)
          throw UsageError("", fmt::format("unknown command '{}' (`agentctl --help` lists them)", a));
      }
    }
  }
  if (!port_text.empty()) {
    try {
      std::size_t used = 0;
      int p = std::stoi(port_text, &used);
      if (used != port_text.size() || p < 1 || p > 65535) throw std::invalid_argument("");
      inv.g.port = static_cast<std::uint16_t>(p);
    } catch (const std::exception&) {
      throw UsageError(cmd_name(), fmt::format("--port must be a port number from 1 to 65535, not '{}'", port_text));
    }
  }
  if (help) return Parsed::help;
  if (!inv.command) throw UsageError("", "which command? (`agentctl --help` lists them)");
  inv.args.assign(words.begin() + 1, words.end());
  const auto& c = *inv.command;
  if (inv.args.size() < c.min_args || inv.args.size() > c.max_args) {
    std::string usage = "agentctl " + c.name + (c.args_usage.empty() ? "" : " " + c.args_usage);
    if (inv.args.size() < c.min_args)
      throw UsageError(c.name, fmt::format("missing arguments; usage: {}", usage));
    throw UsageError(c.name, fmt::format("unexpected argument '{}'; usage: {}",
                                         inv.args[c.max_args], usage));
  }
  if (!inv.passthrough.empty() && c.name != "up")
    throw UsageError(c.name, "arguments after `--` are only for `agentctl up`");
  return Parsed::run;
}

std::string hint_for(const agentd::Error& e, const Invocation& inv) {
  using agentd::ErrorCode;
  switch (e.code()) {
    case ErrorCode::disconnected:
      return fmt::format("is as_server running at {}:{}? Point at it with --host/--port, or start "
                         "one: `systemctl start as_server`, or `agentctl up 1` for development",
                         inv.g.host, inv.g.port);
    case ErrorCode::unknown_agent:
      return "`agentctl list` shows the agents on this server";
    case ErrorCode::unknown_class:
      return "`agentctl status` shows the classes this server offers; load others with as_server "
             "--plugin or --plugin-dir";
    case ErrorCode::duplicate_agent:
      return "pick another --id, or delete the existing agent first";
    case ErrorCode::bad_args:
      return "check --args against what the agent class expects";
    case ErrorCode::unknown_method:
      return "check the method name with the agent's author";
    case ErrorCode::timeout:
      return "the server did not answer in time; raise --timeout if the work is slow";
    case ErrorCode::config_error:
      return "fix the file and run the command again; the server keeps its previous configs";
    case ErrorCode::stopping:
      return "the server is shutting down; use another server or wait for it to be restarted";
    case ErrorCode::overloaded:
      return "the server is overloaded; retry later";
    default:
      return {};
  }
}

int report(const agentd::Error& e, const Invocation& inv) {
  bool unreachable = e.code() == agentd::ErrorCode::disconnected;
  auto hint = hint_for(e, inv);
  std::cerr << "agentctl: " << agentd::to_string(e.code()) << ": " << e.message();
  if (!e.agent_id().empty() && e.message().find(e.agent_id()) == std::string::npos)
    std::cerr << " (agent " << e.agent_id() << ")";
  std::cerr << "\n";
  if (!hint.empty()) std::cerr << "hint: " << hint << "\n";
  if (inv.g.json) {
    print_json({{"error", {{"code", std::string(agentd::to_string(e.code()))},
                           {"message", e.message()},
                           {"agent_id", e.agent_id()},
                           {"agent_class", e.agent_class()},
                           {"retryable", e.retryable()}}}});
  }
  return unreachable ? kExitUnreachable : kExitFailed;
}

}  // namespace
}  // namespace agentctl

int main(int argc, char** argv) {
  using namespace agentctl;
  ::signal(SIGPIPE, SIG_IGN);
  Invocation inv;
  try {
    switch (parse(argc, argv, inv)) {
      case Parsed::version:
        std::cout << "agentctl " << agentd::version() << "\n";
        return kExitOk;
      case Parsed::help:
        std::cout << (inv.command ? command_help(*inv.command) : main_help());
        return kExitOk;
      case Parsed::run:
        break;
    }
    return inv.command->run(inv);
  } catch (const UsageError& e) {
    std::cerr << "agentctl" << (e.command.empty() ? "" : " " + e.command) << ": " << e.what() << "\n";
    std::cerr << "run `agentctl " << (e.command.empty() ? "" : e.command + " ") << "--help` for usage\n";
    if (inv.g.json)
      print_json({{"error", {{"code", "usage"}, {"message", e.what()}}}});
    return kExitUsage;
  } catch (const agentd::Error& e) {
    return report(e, inv);
  } catch (const LocalError& e) {
    std::cerr << "agentctl " << (inv.command ? inv.command->name : "") << ": " << e.what() << "\n";
    if (inv.g.json) print_json({{"error", {{"code", "local"}, {"message", e.what()}}}});
    return kExitFailed;
  } catch (const std::exception& e) {
    std::cerr << "agentctl: internal error: " << e.what() << "\n";
    if (inv.g.json) print_json({{"error", {{"code", "internal"}, {"message", e.what()}}}});
    return kExitFailed;
  }
}

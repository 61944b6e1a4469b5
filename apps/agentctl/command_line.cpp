#include "command_line.h"

#include "commands.h"

#include <cctype>
#include <cstdlib>
#include <exception>
#include <string>

#include <fmt/format.h>

namespace agentctl {

namespace {

constexpr const char* kGlobalOptions =
    "Global options (anywhere on the line):\n"
    "  --host HOST      the server's host (default $AGENTD_HOST, else 127.0.0.1)\n"
    "  --port PORT      the server's port (default $AGENTD_PORT, else 12310)\n"
    "  --json           print JSON for scripts instead of tables\n"
    "  --timeout S      seconds to wait for an answer (default 30)\n"
    "  --token-file F   log in with the token in file F (default $AGENTD_TOKEN)\n"
    "  --tls-ca F       use TLS, trusting the CA certificates in PEM file F\n"
    "  --tls-cert F     with --tls-key F: a client certificate (servers with --tls-client-ca)\n"
    "  --cluster SPEC   status, list and ps over every server of a cluster: SPEC is a cluster\n"
    "                   file (YAML, see the README), dns:NAME:PORT (each address NAME resolves\n"
    "                   to), or HOST:PORT,HOST:PORT,...\n"
    "  -h, --help       help (`agentctl COMMAND --help` for a command)\n"
    "  --version        print the version\n";

constexpr const char* kExitCodes =
    "Exit codes:\n"
    "  0  ok\n"
    "  1  the server reported an error (unknown agent, agent failed, ...) or the operation failed\n"
    "  2  usage error: bad command line, nothing was sent\n"
    "  3  cannot connect to the server (or the connection was lost)\n";

// The end of every help text.
std::string help_trailer() { return std::string("\n") + kGlobalOptions + "\n" + kExitCodes; }

const CommandSpec* find_command(const std::vector<CommandSpec>& table, const std::string& name) {
  for (const auto& c : table) {
    if (c.name == name) return &c;
    for (const auto& a : c.aliases)
      if (a == name) return &c;
  }
  return nullptr;
}

}  // namespace

std::string CommandSpec::synopsis() const { return args_usage.empty() ? name : name + " " + args_usage; }

std::optional<std::string> Invocation::value(const std::string& name) const {
  auto it = options.find(name);
  if (it == options.end() || it->second.empty()) return std::nullopt;
  return it->second.back();
}

std::vector<std::string> Invocation::values(const std::string& name) const {
  auto it = options.find(name);
  return it == options.end() ? std::vector<std::string>{} : it->second;
}

std::chrono::milliseconds Invocation::timeout() const {
  return std::chrono::milliseconds(static_cast<std::int64_t>(g.timeout_s * 1000));
}

std::optional<std::int64_t> parse_whole(const std::string& text, std::int64_t min, std::int64_t max) {
  if (!text.empty() && text[0] == '-') return std::nullopt;
  try {
    std::size_t used = 0;
    long long n = std::stoll(text, &used);
    if (used != text.size() || n < min || n > max) return std::nullopt;
    return n;
  } catch (const std::exception&) {  // not a number, or out of long long's range
    return std::nullopt;
  }
}

std::vector<CommandSpec> command_table() {
  return {
      {"status",
       {"info"},
       "",
       "show the server's id, version, load, agents, classes and models",
       "With --cluster: one row per member (address, up or down, pid, uptime, agents, calls,\n"
       "rss) and the totals; exits 3 when any member is down.",
       {},
       0,
       0,
       cmd_status},
      {"list",
       {"ls"},
       "",
       "list the agents on the server (ID, NAME, CLASS, call counts)",
       "With --cluster: the agents of every member, with a SERVER column.",
       {},
       0,
       0,
       cmd_list},
      {"create",
       {},
       "CLASS NAME",
       "create an agent; prints its id",
       "CLASS is a class the server offers (see `agentctl status`).\n"
       "With --count N, creates N agents named NAME0 .. NAME<N-1> in bulk and prints their ids,\n"
       "one per line; all or nothing (on a failure none is left).",
       {{"--args", "JSON", "constructor arguments, a JSON object (default {})"},
        {"--id", "ID", "the agent id (default: generated)"},
        {"--count", "N", "create N agents of CLASS at once"}},
       2,
       2,
       cmd_create},
      {"clone",
       {},
       "AGENT_ID [NAME]",
       "create a copy of an agent; prints the copy's id",
       "The copy has the agent's class and args, a copy of its memory and of its own saved\n"
       "state (save_state()), taken after the calls already made on it. NAME defaults to the\n"
       "copy's id.",
       {{"--id", "ID", "the copy's id (default: generated)"}},
       1,
       2,
       cmd_clone},
      {"call",
       {"reply"},
       "AGENT_ID MESSAGE",
       "send MESSAGE to an agent as a user message and print its reply",
       "AGENT_ID is the agent's id, or its name when no other agent has that name (as for\n"
       "method, memory and delete).\n"
       "Prints the reply's text content; --json prints the whole message.\n"
       "With --stream, prints the chunks the agent emits as they arrive (with --json, one\n"
       "{\"chunk\": TEXT} line each, then the whole message).",
       {{"--name", "NAME", "the sender's name (default user)"},
        {"--content-json", "", "MESSAGE is a JSON value, not text"},
        {"--stream", "", "print the reply's chunks as the agent emits them"}},
       2,
       2,
       cmd_call},
      {"method",
       {},
       "AGENT_ID METHOD [JSON]",
       "call a named method of an agent synchronously and print its value",
       "JSON is the method's argument (default {}).",
       {},
       2,
       3,
       cmd_method},
      {"memory", {}, "AGENT_ID", "print an agent's memory", "", {}, 1, 1, cmd_memory},
      {"delete",
       {"rm"},
       "AGENT_ID...|--all",
       "delete agents",
       "Each AGENT_ID is an id, or a name no other agent has. Every agent given is tried: one\n"
       "that is not there is reported on stderr (exit 1) and the others are still deleted.",
       {{"--all", "", "delete every agent on the server"}},
       0,
       1000,
       cmd_delete},
      {"reload",
       {},
       "--file FILE",
       "replace the server's model configs with FILE (YAML or JSON)",
       "FILE replaces ALL the server's model configs: configs not in FILE are removed (a\n"
       "warning names them; agents using them fail at their next call). The server then\n"
       "re-reads its --auth-token-file too, as SIGHUP does.\n"
       "To make a server re-read its own --model-config-path, send it SIGHUP instead\n"
       "(`systemctl reload as_server`, or `kill -HUP PID`); SIGHUP also re-reads its\n"
       "--auth-token-file and closes connections logged in with a token no longer there.",
       {{"--file", "FILE", "the model config file to send"}},
       0,
       0,
       cmd_reload},
      {"stop",
       {},
       "",
       "ask the server to stop (running calls finish first)",
       "",
       {{"--wait", "", "wait until it has stopped (at most --timeout)"}},
       0,
       0,
       cmd_stop},
      {"ping", {}, "", "check that the server answers; prints the round trip time", "", {}, 0, 0, cmd_ping},
      {"trace",
       {},
       "",
       "show the spans of the most recent finished agent calls",
       "One row per call, oldest first: call id, agent, class, kind, the call ids of the\n"
       "placeholders it consumed, queue wait and run time (ms), outcome, and the trace id the\n"
       "caller gave (AgentRef::with_trace_id; agentd-gateway passes each HTTP request's).\n"
       "--json adds the model calls and tokens of each call. --chrome FILE writes the spans\n"
       "instead in the Chrome trace-event format, which Perfetto (ui.perfetto.dev) and\n"
       "chrome://tracing open: a row per agent, queue wait and run of each call, and arrows from\n"
       "each placeholder's producing call to the calls that consumed it ('-': standard output).",
       {{"--limit", "N", "show at most N spans (default 50; 0: all the server keeps)"},
        {"--chrome", "FILE", "write the spans as a Chrome trace-event JSON file"}},
       0,
       0,
       cmd_trace},
      {"tools",
       {},
       "",
       "list the server's MCP tool servers, their state and their tools",
       "One block per tool server of the server's --tool-config-path: its name, transport,\n"
       "state (idle: starts at first use; running; restarting; failed: why), the MCP version\n"
       "and server it reports, calls and failures, then one line per tool with its calls and\n"
       "description. Servers not running yet are started first (so their tools show) unless\n"
       "--no-start. --json prints everything, input schemas included.",
       {{"--no-start", "", "show what is known now; start nothing"}},
       0,
       0,
       cmd_tools},
      {"tool",
       {},
       "SERVER TOOL [JSON]",
       "call one tool of one of the server's MCP tool servers and print its result",
       "JSON is the tool's arguments, an object (default {}). Prints the result's text (text\n"
       "blocks; other blocks as JSON lines); --json prints the whole result (content,\n"
       "structuredContent, isError). A result the tool marks isError is printed to stderr and\n"
       "exits 1. The call belongs to no agent; it counts in the server's tool metrics.",
       {{"--tool-timeout", "SECONDS", "give the tool this long (default: the tool server's call_timeout)"}},
       2,
       3,
       cmd_tool},
      {"up",
       {},
       "N [-- AS_SERVER_OPTIONS...]",
       "start N local as_server processes on free ports, in the background",
       "They listen on --host and keep running after agentctl exits; their pids, ports and\n"
       "logs are recorded in $AGENTD_STATE_DIR, else $XDG_RUNTIME_DIR/agentd, else\n"
       "/tmp/agentd-$UID. Without --plugin/--plugin-dir/--agent-dir (here or after `--`) they load the\n"
       "plugins built or installed beside agentctl. Options after `--` go to each as_server.\n"
       "With --gateway HOST:PORT, an agentd-gateway also starts in front of them (--server for one,\n"
       "--cluster for several; their --auth-token-file, if given after `--`, is its upstream token),\n"
       "recorded with them and stopped by `agentctl down`; its URL is printed. It is the\n"
       "agentd-gateway beside agentctl, else the first on $PATH (or --gateway-path).",
       {{"--plugin-dir", "DIR", "load every plugin in DIR (repeatable)", true},
        {"--plugin", "FILE", "load the plugin FILE (repeatable)", true},
        {"--agent-dir", "DIR", "host the agent classes written in Python in DIR/*.py (repeatable)", true},
        {"--model-config-path", "FILE", "model configs for the servers"},
        {"--server-path", "PATH",
         "the as_server binary (default: $AGENTD_AS_SERVER, beside libagentd, beside agentctl, "
         "then $PATH)"},
        {"--gateway", "HOST:PORT",
         "also start agentd-gateway listening there (port 0: a free port) in front of the servers"},
        {"--gateway-arg", "ARG",
         "an option for agentd-gateway, e.g. --gateway-arg=--tls-cert=cert.pem (repeatable)", true},
        {"--gateway-path", "PATH",
         "the agentd-gateway binary (default: $AGENTD_GATEWAY, beside agentctl, then $PATH)"}},
       1,
       1,
       cmd_up},
      {"down",
       {},
       "",
       "stop the servers started by `agentctl up`",
       "Their logs stay in the state directory unless --remove-logs.",
       {{"--remove-logs", "", "also remove the servers' logs"}},
       0,
       0,
       cmd_down},
      {"ps",
       {},
       "",
       "list the servers started by `agentctl up`, running or dead",
       "With --cluster: every member's process instead (pid, uptime, cpu, rss, as the servers\n"
       "report them); exits 3 when any member is down.",
       {},
       0,
       0,
       cmd_ps},
  };
}

std::string main_help(const std::vector<CommandSpec>& table) {
  std::string out =
      "agentctl: operate agentd's as_server\n\n"
      "Usage: agentctl [--host HOST] [--port PORT] [--token-file F] [--json] [--timeout S] COMMAND "
      "[ARGS]\n"
      "       agentctl --cluster SPEC status|list|ps\n\n"
      "Commands:\n";
  for (const auto& c : table) out += fmt::format("  {:<34}{}\n", c.synopsis(), c.summary);
  return out + help_trailer();
}

std::string command_help(const CommandSpec& c) {
  std::string out = fmt::format("Usage: agentctl [GLOBAL OPTIONS] {}\n\n{}\n", c.synopsis(), c.summary);
  if (!c.details.empty()) out += "\n" + c.details + "\n";
  if (!c.aliases.empty()) out += fmt::format("\nAlias: {}\n", fmt::join(c.aliases, ", "));
  if (!c.options.empty()) {
    out += "\nOptions:\n";
    for (const auto& o : c.options)
      out += fmt::format("  {:<26}{}\n", o.name + (o.value_name.empty() ? "" : " " + o.value_name), o.help);
  }
  return out + help_trailer();
}

Parsed parse(const std::vector<CommandSpec>& table, int argc, char** argv, Invocation& inv) {
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
    } else if (name == "--token-file") {
      inv.g.token_file = take_value(name);
      if (inv.g.token_file.empty()) throw UsageError(cmd_name(), "--token-file must not be empty");
    } else if (name == "--tls-ca" || name == "--tls-cert" || name == "--tls-key") {
      auto v = take_value(name);
      if (v.empty()) throw UsageError(cmd_name(), name + " must not be empty");
      (name == "--tls-ca" ? inv.g.tls_ca : name == "--tls-cert" ? inv.g.tls_cert : inv.g.tls_key) = v;
    } else if (name == "--cluster") {
      inv.g.cluster = take_value(name);
      if (inv.g.cluster.empty()) throw UsageError(cmd_name(), "--cluster must not be empty");
    } else if (name == "--timeout") {
      auto t = take_value(name);
      try {
        std::size_t used = 0;
        inv.g.timeout_s = std::stod(t, &used);
        if (used != t.size() || !(inv.g.timeout_s > 0)) throw std::invalid_argument("");
      } catch (const std::exception&) {
        throw UsageError(cmd_name(),
                         fmt::format("--timeout must be a positive number of seconds, not '{}'", t));
      }
    } else if (a.size() > 1 && a[0] == '-' && !std::isdigit(static_cast<unsigned char>(a[1]))) {
      // A command option: known only once the command is (options may precede it).
      if (!inv.command) {
        if (!words.empty()) inv.command = find_command(table, words[0]);
        if (!inv.command)
          throw UsageError("", fmt::format("unknown option {} (options of a command come with "
                                           "the command: `agentctl COMMAND --help`)",
                                           name));
      }
      const OptionSpec* spec = nullptr;
      for (const auto& o : inv.command->options)
        if (o.name == name) spec = &o;
      if (!spec) throw UsageError(cmd_name(), fmt::format("{} has no option {}", inv.command->name, name));
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
        inv.command = find_command(table, a);
        if (!inv.command) throw UsageError("", fmt::format("unknown command '{}'", a));
      } else if (words.size() == 1) {
        inv.command = find_command(table, a);
        if (!inv.command)
          throw UsageError("", fmt::format("unknown command '{}' (`agentctl --help` lists them)", a));
      }
    }
  }
  if (!port_text.empty()) {
    auto p = parse_whole(port_text, 1, 65535);
    if (!p)
      throw UsageError(cmd_name(),
                       fmt::format("--port must be a port number from 1 to 65535, not '{}'", port_text));
    inv.g.port = static_cast<std::uint16_t>(*p);
  }
  if (help) return Parsed::help;
  if (!inv.command) throw UsageError("", "which command? (`agentctl --help` lists them)");
  inv.args.assign(words.begin() + 1, words.end());
  const auto& c = *inv.command;
  if (inv.args.size() < c.min_args || inv.args.size() > c.max_args) {
    std::string usage = "agentctl " + c.synopsis();
    if (inv.args.size() < c.min_args)
      throw UsageError(c.name, fmt::format("missing arguments; usage: {}", usage));
    throw UsageError(c.name, fmt::format("unexpected argument '{}'; usage: {}", inv.args[c.max_args], usage));
  }
  if (!inv.passthrough.empty() && c.name != "up")
    throw UsageError(c.name, "arguments after `--` are only for `agentctl up`");
  if (!inv.g.cluster.empty() && c.name != "status" && c.name != "list" && c.name != "ps")
    throw UsageError(c.name, fmt::format("--cluster works with status, list and ps; {} acts on one "
                                         "server (--host/--port)",
                                         c.name));
  return Parsed::run;
}

}  // namespace agentctl

#include "server_config.h"

#include <agentd/error.h>
#include <agentd/version.h>

#include <boost/program_options.hpp>
#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <arpa/inet.h>
#include <netinet/in.h>

#include <sstream>

namespace agentd::detail {

namespace po = boost::program_options;

namespace {

po::options_description make_description(ServerOptions& o) {
  po::options_description d(
      "as_server: hosts agentd agents and serves them over Cap'n Proto RPC\n\n"
      "Usage: as_server [options]\n\nOptions");
  // clang-format off
  d.add_options()
    ("help,h", "print this help and exit")
    ("version", "print the version and exit")
    ("config", po::value<std::string>(&o.config_file)->value_name("FILE"),
     "YAML file with any of these options as keys (e.g. 'port: 12001', 'plugin: [a.so]'); "
     "command-line flags override it")
    ("host", po::value<std::string>(&o.host)->default_value(o.host)->value_name("ADDR"),
     "address to listen on (0.0.0.0 for every interface)")
    ("port", po::value<int>(&o.port)->default_value(o.port)->value_name("PORT"),
     "port to listen on; 0 picks a free port (the ready line names it)")
    ("advertise-address", po::value<std::string>(&o.advertise_address)->value_name("HOST:PORT"),
     "address other servers and clients should use to reach this one "
     "(default: host:port, or the machine's hostname when listening on 0.0.0.0)")
    ("model-config-path", po::value<std::string>(&o.model_config_path)->value_name("FILE"),
     "model configs (YAML, or AgentScope's JSON); default: only the built-in 'echo' model")
    ("tool-config-path", po::value<std::string>(&o.tool_config_path)->value_name("FILE"),
     "MCP tool servers every agent may use (YAML or JSON: the 'mcpServers' map tool servers' "
     "READMEs give, plus agentd's keys; see config/tools.yaml); SIGHUP re-reads it; default: none")
    ("plugin", po::value<std::vector<std::string>>(&o.plugins)->composing()->value_name("PATH"),
     "agent plugin shared object to load (repeatable); a bare name is looked for in the current "
     "directory, the --plugin-dir directories, then the plugins shipped with agentd")
    ("plugin-dir", po::value<std::vector<std::string>>(&o.plugin_dirs)->composing()->value_name("DIR"),
     "load every .so in this directory (repeatable)")
    ("agent-dir", po::value<std::vector<std::string>>(&o.agent_dirs)->composing()->value_name("DIR"),
     "host the agent classes written in Python in DIR: every class deriving from agentd.Agent in "
     "DIR/*.py, under its class name (repeatable; loads the libagentd_python.so plugin)")
    ("max-workers", po::value<std::size_t>(&o.max_workers)->default_value(o.max_workers)->value_name("N"),
     "most worker threads running agent code at once (agents may block; the pool grows to this)")
    ("max-pool-size", po::value<std::size_t>(&o.max_pool_size)->default_value(o.max_pool_size)->value_name("N"),
     "most finished call results kept for placeholders (oldest evicted first)")
    ("max-expire-time", po::value<double>(&o.max_expire_time)->default_value(o.max_expire_time)->value_name("SECONDS"),
     "how long a finished call result is kept")
    ("server-id", po::value<std::string>(&o.server_id)->value_name("ID"),
     "this server's id (default: generated at start)")
    ("log-level", po::value<std::string>(&o.log_level)->default_value(o.log_level)->value_name("LEVEL"),
     "trace, debug, info, warn, error or off (debug adds one line per finished call)")
    ("log-format", po::value<std::string>(&o.log_format)->default_value(o.log_format)->value_name("FORMAT"),
     "text, or json (one JSON object per line: time, level, msg)")
    ("metrics-port", po::value<int>(&o.metrics_port)->default_value(o.metrics_port)->value_name("PORT"),
     "serve Prometheus metrics at http://HOST:PORT/metrics (on --host); 0: off")
    ("trace-file", po::value<std::string>(&o.trace_file)->value_name("PATH"),
     "append one OpenTelemetry JSON line per finished agent call to PATH")
    ("shutdown-grace", po::value<double>(&o.shutdown_grace)->default_value(o.shutdown_grace)->value_name("SECONDS"),
     "on SIGINT/SIGTERM, how long running calls get to finish")
    ("peer-connect-timeout", po::value<double>(&o.peer_connect_timeout)->default_value(o.peer_connect_timeout)->value_name("SECONDS"),
     "how long a call consuming another server's placeholder keeps trying to reach that server "
     "(its origin) when it cannot: connection refused or timing out, the connection lost, or no "
     "answer to the pings sent every few seconds while the call waits (a frozen server). "
     "Counted from the first failure, which is logged; then the call fails with disconnected "
     "(retryable). A certificate or login the origin refuses, or cannot be trusted, fails it "
     "at once")
    ("peer-fetch-timeout", po::value<double>(&o.peer_fetch_timeout)->default_value(o.peer_fetch_timeout)->value_name("SECONDS"),
     "how long a call consuming another server's placeholder waits for that server to finish "
     "computing the result (while it can be reached; see --peer-connect-timeout); then it "
     "fails with timeout (retryable)")
    ("auth-token-file", po::value<std::string>(&o.auth_token_file)->value_name("FILE"),
     "require clients to log in with one of the tokens in FILE (one per line; the file must not "
     "be readable by group or others)")
    ("peer-token-file", po::value<std::string>(&o.peer_token_file)->value_name("FILE"),
     "the token this server logs in to other servers with, to fetch their placeholders and reach "
     "their agents (default: the first token of --auth-token-file)")
    ("allow-unauthenticated", po::bool_switch(&o.allow_unauthenticated),
     "serve without a token on an address other machines can reach (only on a trusted network)")
    ("login-timeout", po::value<double>(&o.login_timeout)->default_value(o.login_timeout)->value_name("SECONDS"),
     "close a connection that has not logged in this long after connecting (TLS handshake "
     "included); before its login a connection may send at most 64 KiB")
    ("max-unauthenticated-connections", po::value<std::size_t>(&o.max_unauthenticated_connections)->default_value(o.max_unauthenticated_connections)->value_name("N"),
     "most connections waiting to log in at once; one more closes the one waiting longest")
    ("lane-threads", po::value<std::size_t>(&o.lane_threads)->default_value(o.lane_threads)->value_name("N"),
     "serve up to N synchronous lanes at once (plaintext TCP or --unix-socket; README \"The "
     "synchronous lane\"): a client's blocking call then runs on the thread reading its lane, "
     "with no thread hand-off. Each lane holds a thread while its client keeps it open; past N, "
     "clients use their RPC connection. 0: none")
    ("lane-idle-timeout", po::value<double>(&o.lane_idle_timeout)->default_value(o.lane_idle_timeout)->value_name("SECONDS"),
     "close a lane that has carried no call this long, ending its thread (its client opens a "
     "new one when it next calls)")
    ("lane-spin", po::value<std::int64_t>(&o.lane_spin_us)->default_value(o.lane_spin_us)->value_name("MICROSECONDS"),
     "after answering a lane's call, poll its socket this long for the caller's next call before "
     "sleeping (spares the wake-up: README \"Polling for the answer\"); only while the caller's "
     "calls come within it, and never more pollers than CPUs less one. 0: never poll. At most 10000")
    ("tls-cert", po::value<std::string>(&o.tls_cert)->value_name("FILE"),
     "serve TLS only, with this PEM certificate (chain); needs --tls-key. Clients reach the "
     "server by a name the certificate lists")
    ("tls-key", po::value<std::string>(&o.tls_key)->value_name("FILE"),
     "the PEM private key of --tls-cert")
    ("tls-client-ca", po::value<std::string>(&o.tls_client_ca)->value_name("FILE"),
     "require client certificates signed by a CA in this PEM bundle (mutual TLS)")
    ("peer-tls-ca", po::value<std::string>(&o.peer_tls_ca)->value_name("FILE"),
     "the CAs that sign other servers' certificates, for peer connections over TLS "
     "(default: --tls-client-ca, else the system's CAs); servers with certificates from a "
     "private CA need it to fetch each other's placeholders")
    ("unix-socket", po::value<std::string>(&o.unix_socket)->value_name("PATH"),
     "also listen on a Unix domain socket at PATH (mode 0660; clients use the address unix:PATH)")
    ("unix-socket-group", po::value<std::string>(&o.unix_socket_group)->value_name("GROUP"),
     "the group owning --unix-socket (its members may connect)")
    ("max-client-backlog", po::value<std::size_t>(&o.max_client_backlog_mb)->default_value(o.max_client_backlog_mb)->value_name("MIB"),
     "close the connection of a client that leaves more than this many MiB of call completions unread")
    ("max-message-bytes", po::value<std::size_t>(&o.max_message_bytes)->default_value(o.max_message_bytes)->value_name("BYTES"),
     "the largest call or answer one message may carry; a bigger one fails alone with too_large "
     "(the default, 64 MiB, is Cap'n Proto's single-message limit and the most allowed)")
    ("max-agents", po::value<std::size_t>(&o.max_agents)->default_value(o.max_agents)->value_name("N"),
     "most agents at once; creating more fails with overloaded (retryable); 0: no limit")
    ("max-queued-calls", po::value<std::size_t>(&o.max_queued_calls)->default_value(o.max_queued_calls)->value_name("N"),
     "most calls waiting or running on the whole server; more fail with overloaded (retryable); "
     "0: no limit")
    ("max-queued-calls-per-agent", po::value<std::size_t>(&o.max_queued_calls_per_agent)->default_value(o.max_queued_calls_per_agent)->value_name("N"),
     "most calls waiting or running on one agent; more fail with overloaded (retryable); 0: no limit")
    ("call-timeout", po::value<double>(&o.call_timeout)->default_value(o.call_timeout)->value_name("SECONDS"),
     "a call not finished this long after the server queued it fails with timeout (a running "
     "call's agent code cannot be stopped: it runs on, its result is discarded, and the agent's "
     "next calls wait for it); 0: no deadline")
    ("class-call-timeout", po::value<std::vector<std::string>>(&o.class_call_timeout_args)->composing()->value_name("CLASS=SECONDS"),
     "the call deadline of one agent class, over --call-timeout (0: none for that class; "
     "repeatable)")
    ("slow-call-warn", po::value<double>(&o.slow_call_warn)->default_value(o.slow_call_warn)->value_name("SECONDS"),
     "log a call in progress this long (once, at warn, with its agent, class and call id) and "
     "count it in info, metrics and STATUS=; 0: never")
    ("state-dir", po::value<std::string>(&o.state_dir)->value_name("DIR"),
     "keep agents and finished results in DIR (SQLite): every call is saved before it is "
     "reported done, and a restart restores them; default: in memory only (a restart loses them)")
    ("drop-missing-classes", po::bool_switch(&o.drop_missing_classes),
     "on restoring --state-dir, delete the agents whose class no loaded plugin provides (listed "
     "in the log) instead of refusing to start")
    ("stop-on-stdin-eof", po::bool_switch(&o.stop_on_stdin_eof),
     "stop when standard input closes (used by child mode to follow its parent)");
  // clang-format on
  return d;
}

// Turns the YAML file into "--key=value" tokens so one parser validates both sources; each with
// where it came from ("--config FILE:LINE:COLUMN"), for the errors of its value.
struct FileArg {
  std::string arg;
  std::string where;
};
std::vector<FileArg> yaml_to_args(const std::string& path, const po::options_description& d) {
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::BadFile&) {
    throw Error(ErrorCode::config_error, fmt::format("--config {}: cannot read the file", path));
  } catch (const YAML::Exception& e) {
    throw Error(ErrorCode::config_error,
                fmt::format("--config {}:{}:{}: {}", path, e.mark.line + 1, e.mark.column + 1, e.msg));
  }
  std::vector<FileArg> args;
  if (root.IsNull()) return args;
  if (!root.IsMap())
    throw Error(ErrorCode::config_error,
                fmt::format("--config {}: expected a mapping of option names to values", path));
  for (const auto& kv : root) {
    std::string key = kv.first.as<std::string>();
    auto where = fmt::format("--config {}:{}:{}", path, kv.first.Mark().line + 1, kv.first.Mark().column + 1);
    if (key == "config" || key == "help" || key == "version" || d.find_nothrow(key, false) == nullptr)
      throw Error(
          ErrorCode::config_error,
          fmt::format("{}: unknown key '{}'; keys are the long option names (see --help)", where, key));
    auto add = [&](const YAML::Node& v) {
      if (!v.IsScalar())
        throw Error(ErrorCode::config_error, fmt::format("{}: '{}' needs a plain value", where, key));
      args.push_back({fmt::format("--{}={}", key, v.Scalar()),
                      fmt::format("--config {}:{}:{}", path, v.Mark().line + 1, v.Mark().column + 1)});
    };
    if (kv.second.IsSequence()) {
      for (const auto& v : kv.second) add(v);
    } else if (key == "stop-on-stdin-eof" || key == "allow-unauthenticated") {
      if (kv.second.as<bool>(false)) args.push_back({"--" + key, where});
    } else {
      add(kv.second);
    }
  }
  return args;
}

}  // namespace

// localhost, or an address literal in 127.0.0.0/8 or ::1. Any other name may resolve to
// anything (127.example.org included), so it counts as beyond loopback.
bool is_loopback_host(const std::string& host) {
  if (host == "localhost") return true;
  std::string h = host;
  if (h.size() > 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  in_addr v4{};
  if (::inet_pton(AF_INET, h.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  return ::inet_pton(AF_INET6, h.c_str(), &v6) == 1 && IN6_IS_ADDR_LOOPBACK(&v6);
}

ParsedArgs parse_server_args(int argc, const char* const* argv) {
  ParsedArgs out;
  auto desc = make_description(out.options);
  po::variables_map vm;
  try {
    auto parsed = po::command_line_parser(argc, argv).options(desc).run();
    po::store(parsed, vm);
    if (vm.count("help")) {
      std::ostringstream s;
      s << desc << "\nOn start-up as_server prints one line to stdout:\n"
        << "  as_server ready: listening on HOST:PORT server_id=ID pid=PID\n"
        << "Exit codes: 0 clean stop, 2 bad option or config, 3 cannot listen, 4 plugin error.\n";
      out.action = ParsedArgs::Action::help;
      out.text = s.str();
      return out;
    }
    if (vm.count("version")) {
      out.action = ParsedArgs::Action::version;
      out.text = fmt::format("as_server (agentd) {}\n", AGENTD_VERSION_STRING);
      return out;
    }
    if (vm.count("config")) {
      // Command-line values were stored first, so they win over the file's. One value at a
      // time, so that a bad one ("port: twelve") is reported at its place in the file.
      for (const auto& a : yaml_to_args(vm["config"].as<std::string>(), desc)) {
        try {
          po::store(po::command_line_parser(std::vector<std::string>{a.arg}).options(desc).run(), vm);
        } catch (const po::error& e) {
          throw Error(ErrorCode::config_error,
                      fmt::format("{}: {} (see as_server --help)", a.where, e.what()));
        }
      }
    }
    po::notify(vm);
  } catch (const po::error& e) {
    throw Error(ErrorCode::config_error, fmt::format("{} (see as_server --help)", e.what()));
  }
  auto& o = out.options;
  if (o.port < 0 || o.port > 65535)
    throw Error(ErrorCode::config_error, fmt::format("--port {}: must be 0..65535", o.port));
  if (o.metrics_port < 0 || o.metrics_port > 65535)
    throw Error(ErrorCode::config_error,
                fmt::format("--metrics-port {}: must be 0..65535 (0: off)", o.metrics_port));
  if (o.log_format != "text" && o.log_format != "json")
    throw Error(ErrorCode::config_error, fmt::format("--log-format {}: use text or json", o.log_format));
  if (o.max_workers < 1) throw Error(ErrorCode::config_error, "--max-workers must be at least 1");
  if (o.max_message_bytes < (std::size_t{64} << 10) || o.max_message_bytes > (std::size_t{64} << 20))
    throw Error(ErrorCode::config_error,
                fmt::format("--max-message-bytes {}: must be 65536..67108864 (64 KiB to 64 MiB, "
                            "Cap'n Proto's single-message limit)",
                            o.max_message_bytes));
  if (o.max_pool_size < 1) throw Error(ErrorCode::config_error, "--max-pool-size must be at least 1");
  if (o.peer_connect_timeout <= 0 || o.peer_fetch_timeout <= 0)
    throw Error(ErrorCode::config_error, "--peer-connect-timeout and --peer-fetch-timeout must be positive");
  if (!(o.login_timeout > 0) || o.login_timeout > 3600)
    throw Error(
        ErrorCode::config_error,
        fmt::format("--login-timeout {}: must be more than 0 and at most 3600 seconds", o.login_timeout));
  if (o.lane_threads > 1024)
    throw Error(ErrorCode::config_error,
                fmt::format("--lane-threads {}: must be 0..1024 (each lane holds a thread)", o.lane_threads));
  if (o.lane_spin_us < 0 || o.lane_spin_us > 10000)
    throw Error(ErrorCode::config_error,
                fmt::format("--lane-spin {}: must be 0..10000 microseconds (0: never poll)", o.lane_spin_us));
  if (!(o.lane_idle_timeout >= 1) || o.lane_idle_timeout > 86400)
    throw Error(ErrorCode::config_error,
                fmt::format("--lane-idle-timeout {}: must be 1..86400 seconds", o.lane_idle_timeout));
  if (o.max_unauthenticated_connections < 1)
    throw Error(ErrorCode::config_error,
                "--max-unauthenticated-connections must be at least 1 (connections log in "
                "before anything else)");
  if (o.max_expire_time <= 0) throw Error(ErrorCode::config_error, "--max-expire-time must be positive");
  if (!(o.call_timeout >= 0))
    throw Error(ErrorCode::config_error,
                fmt::format("--call-timeout {}: must be seconds >= 0 (0: no deadline)", o.call_timeout));
  if (!(o.slow_call_warn >= 0))
    throw Error(ErrorCode::config_error,
                fmt::format("--slow-call-warn {}: must be seconds >= 0 (0: never)", o.slow_call_warn));
  for (const auto& arg : o.class_call_timeout_args) {
    const auto eq = arg.find('=');
    double seconds = -1;
    if (eq != std::string::npos && eq > 0) {
      try {
        std::size_t used = 0;
        seconds = std::stod(arg.substr(eq + 1), &used);
        if (used != arg.size() - eq - 1) seconds = -1;
      } catch (const std::exception&) {
        seconds = -1;
      }
    }
    if (!(seconds >= 0))
      throw Error(ErrorCode::config_error,
                  fmt::format("--class-call-timeout {}: expected CLASS=SECONDS with SECONDS >= 0 "
                              "(e.g. --class-call-timeout WebAgent=120; 0: no deadline)",
                              arg));
    o.class_call_timeouts[arg.substr(0, eq)] = seconds;
  }
  if (o.tls_cert.empty() != o.tls_key.empty())
    throw Error(ErrorCode::config_error,
                "TLS needs both --tls-cert and --tls-key (PEM files); give both, or neither");
  if (!o.tls_client_ca.empty() && o.tls_cert.empty())
    throw Error(ErrorCode::config_error, "--tls-client-ca requires TLS: give --tls-cert and --tls-key too");
  if (!o.unix_socket_group.empty() && o.unix_socket.empty())
    throw Error(ErrorCode::config_error, "--unix-socket-group needs --unix-socket PATH");
  if (!is_loopback_host(o.host) && o.auth_token_file.empty() && !o.allow_unauthenticated)
    throw Error(ErrorCode::config_error,
                fmt::format("--host {}: refusing to listen on an address other machines can reach without "
                            "a token: anyone who reaches the port could create and delete agents, read "
                            "their memories, replace the model configs and stop the server. Either require "
                            "a token with --auth-token-file FILE (make one with `openssl rand -hex 32 > "
                            "FILE && chmod 600 FILE`), or, on a trusted network only, pass "
                            "--allow-unauthenticated",
                            o.host));
  static const char* kLevels[] = {"trace", "debug", "info", "warn", "error", "critical", "off"};
  bool level_ok = false;
  for (auto* l : kLevels) level_ok = level_ok || o.log_level == l;
  if (!level_ok)
    throw Error(ErrorCode::config_error,
                fmt::format("--log-level {}: use trace, debug, info, warn, error or off", o.log_level));
  return out;
}

}  // namespace agentd::detail

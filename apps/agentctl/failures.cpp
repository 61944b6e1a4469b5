#include "failures.h"

#include "output.h"

#include <initializer_list>
#include <iostream>
#include <string>

#include <fmt/format.h>

namespace agentctl {

namespace {

// {"error": error} on stdout, for --json.
void print_json_error(const agentd::Value& error) { print_json({{"error", error}}); }

bool mentions(const std::string& text, std::initializer_list<const char*> words) {
  for (const char* w : words)
    if (text.find(w) != std::string::npos) return true;
  return false;
}

// What the operator can do about e, chosen by its cause (not only its code); empty: nothing to
// add.
std::string hint_for(const agentd::Error& e, const Invocation& inv) {
  using agentd::ErrorCode;
  const std::string command = inv.command ? inv.command->name : "";
  // A TLS failure: the server may well be running; its certificate or ours is the matter.
  if (e.code() == ErrorCode::disconnected &&
      mentions(e.message(), {"certificate", "TLS", "tls", "SSL", "ssl", "handshake"}))
    return fmt::format(
        "the TLS handshake with {}:{} failed, though something answers there: "
        "check that the server serves TLS (--tls-cert), that --tls-ca is the CA "
        "that signed its certificate and that --host is a name the certificate "
        "carries",
        inv.g.host, inv.g.port);
  if (!inv.g.cluster.empty()) {
    if (e.code() == ErrorCode::disconnected)
      return "no server of the cluster answered: are they running at the addresses above?";
    if (e.code() == ErrorCode::config_error || e.code() == ErrorCode::bad_args)
      return "--cluster takes a cluster file, dns:NAME:PORT or HOST:PORT,HOST:PORT (see the "
             "README's \"Clusters\")";
  }
  switch (e.code()) {
    case ErrorCode::disconnected:
      return fmt::format(
          "is as_server running at {}:{}? Point at it with --host/--port, or start "
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
      if (command == "reload")
        return "fix the file and run the command again; the server keeps its previous configs";
      return {};
    case ErrorCode::stopping:
      return "the server is shutting down; use another server or wait for it to be restarted";
    case ErrorCode::overloaded:
      return "the server is overloaded; retry later";
    case ErrorCode::unauthenticated:
      return "pass one of the server's tokens with --token-file FILE (or $AGENTD_TOKEN); a TLS "
             "server also needs --tls-ca FILE";
    default:
      return {};
  }
}

}  // namespace

int report_usage_error(const UsageError& e, const Invocation& inv) {
  std::cerr << "agentctl" << (e.command.empty() ? "" : " " + e.command) << ": " << e.what() << "\n";
  std::cerr << "run `agentctl " << (e.command.empty() ? "" : e.command + " ") << "--help` for usage\n";
  if (inv.g.json) print_json_error({{"code", "usage"}, {"message", e.what()}});
  return kExitUsage;
}

int report_server_error(const agentd::Error& e, const Invocation& inv) {
  bool unreachable = e.code() == agentd::ErrorCode::disconnected;
  auto hint = hint_for(e, inv);
  std::cerr << "agentctl: " << agentd::to_string(e.code()) << ": " << e.message();
  if (!e.agent_id().empty() && e.message().find(e.agent_id()) == std::string::npos)
    std::cerr << " (agent " << e.agent_id() << ")";
  std::cerr << "\n";
  if (!hint.empty()) std::cerr << "hint: " << hint << "\n";
  if (inv.g.json)
    print_json_error({{"code", std::string(agentd::to_string(e.code()))},
                      {"message", e.message()},
                      {"agent_id", e.agent_id()},
                      {"agent_class", e.agent_class()},
                      {"retryable", e.retryable()}});
  return unreachable ? kExitUnreachable : kExitFailed;
}

int report_local_error(const LocalError& e, const Invocation& inv) {
  std::cerr << "agentctl " << (inv.command ? inv.command->name : "") << ": " << e.what() << "\n";
  if (inv.g.json) print_json_error({{"code", "local"}, {"message", e.what()}});
  return kExitFailed;
}

int report_internal_error(const std::exception& e, const Invocation& inv) {
  std::cerr << "agentctl: internal error: " << e.what() << "\n";
  if (inv.g.json) print_json_error({{"code", "internal"}, {"message", e.what()}});
  return kExitFailed;
}

}  // namespace agentctl

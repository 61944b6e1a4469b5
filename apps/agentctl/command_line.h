// What agentctl's command line may say: the global options, the command table (each command's
// arguments, options, help and the function that runs it), parsing argv into an Invocation, and
// the --help texts rendered from the table.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace agentctl {

// Exit codes: scripts rely on these (also in --help).
constexpr int kExitOk = 0;
constexpr int kExitFailed = 1;       // the server reported an error, or the operation failed
constexpr int kExitUsage = 2;        // bad command line: nothing was sent
constexpr int kExitUnreachable = 3;  // cannot connect to the server (or the connection was lost)

// A command-line mistake; main prints it with a pointer to --help and exits 2.
struct UsageError : std::runtime_error {
  UsageError(std::string command, std::string message)
      : std::runtime_error(std::move(message)), command(std::move(command)) {}
  std::string command;  // empty: a global mistake
};

// The global options: their defaults, then $AGENTD_HOST/$AGENTD_PORT, then the command line.
struct Globals {
  std::string host = "127.0.0.1";
  std::uint16_t port = 12310;
  bool json = false;
  double timeout_s = 30;
  std::string token_file;  // --token-file (empty: $AGENTD_TOKEN, if set)
  std::string tls_ca;      // --tls-ca: TLS, trusting this CA bundle (empty: plaintext)
  std::string tls_cert;    // --tls-cert/--tls-key: a client certificate for mutual TLS
  std::string tls_key;
  std::string cluster;  // --cluster: status/list/ps over every member (file, dns:, list)
};

struct OptionSpec {
  std::string name;        // "--args"
  std::string value_name;  // empty: a flag
  std::string help;
  bool repeatable = false;
};

struct Invocation;

// Runs a command; returns the exit code. Throws UsageError, agentd::Error or LocalError for main
// to report.
using CommandFn = int (*)(const Invocation&);

struct CommandSpec {
  std::string name;
  std::vector<std::string> aliases;
  std::string args_usage;  // "CLASS NAME"
  std::string summary;
  std::string details;  // more lines for `COMMAND --help`
  std::vector<OptionSpec> options;
  std::size_t min_args = 0;
  std::size_t max_args = 0;
  CommandFn run = nullptr;

  // "create CLASS NAME": the name and its arguments, as in the usage lines.
  std::string synopsis() const;
};

// One run of agentctl: the parsed command line.
struct Invocation {
  Globals g;
  const CommandSpec* command = nullptr;  // into the table given to parse(), which outlives this
  std::vector<std::string> args;
  std::vector<std::string> passthrough;  // after "--"
  std::map<std::string, std::vector<std::string>> options;

  bool flag(const std::string& name) const { return options.count(name) > 0; }
  std::optional<std::string> value(const std::string& name) const;
  std::vector<std::string> values(const std::string& name) const;
  std::chrono::milliseconds timeout() const;
  // A usage error of this command.
  UsageError usage(std::string message) const { return UsageError(command->name, std::move(message)); }
};

// agentctl's commands, in the order --help lists them.
std::vector<CommandSpec> command_table();

enum class Parsed { run, help, version };

// Parses argv into inv against the table (which must outlive inv). Global options may appear
// anywhere; "--" ends option parsing (the rest is passed through, for `up`). $AGENTD_HOST and
// $AGENTD_PORT give the defaults of --host and --port. Throws UsageError.
Parsed parse(const std::vector<CommandSpec>& table, int argc, char** argv, Invocation& inv);

// `agentctl --help`.
std::string main_help(const std::vector<CommandSpec>& table);
// `agentctl COMMAND --help`.
std::string command_help(const CommandSpec& c);

// text as a whole number from min to max (min >= 0): decimal digits, as std::stoll reads them
// (leading blanks and '+' allowed), but no leading '-' (so "-0" is refused too).
std::optional<std::int64_t> parse_whole(const std::string& text, std::int64_t min, std::int64_t max);

}  // namespace agentctl

// agentctl: the operator's command line for as_server.
//   agentctl [--host H] [--port P] [--json] [--timeout S] COMMAND [ARGS] [OPTIONS]
// main() is the wiring: the command table -> parsing -> the command (against a Client, or the
// local-server state for up/down/ps) -> failures mapped to the documented exit codes.
#include "command_line.h"
#include "failures.h"
#include "local_servers.h"

#include <agentd/error.h>
#include <agentd/version.h>

#include <signal.h>

#include <exception>
#include <iostream>
#include <vector>

int main(int argc, char** argv) {
  using namespace agentctl;
  ::signal(SIGPIPE, SIG_IGN);
  const std::vector<CommandSpec> table = command_table();
  Invocation inv;  // points into table
  try {
    switch (parse(table, argc, argv, inv)) {
      case Parsed::version:
        std::cout << "agentctl " << agentd::version() << "\n";
        return kExitOk;
      case Parsed::help:
        std::cout << (inv.command ? command_help(*inv.command) : main_help(table));
        return kExitOk;
      case Parsed::run:
        break;
    }
    return inv.command->run(inv);
  } catch (const UsageError& e) {
    return report_usage_error(e, inv);
  } catch (const agentd::Error& e) {
    return report_server_error(e, inv);
  } catch (const LocalError& e) {
    return report_local_error(e, inv);
  } catch (const std::exception& e) {
    return report_internal_error(e, inv);
  }
}

// A main program built against the installed package: starts the installed as_server in child
// mode with the plugin built beside it, and prints one reply. Built with
// AGENTD_AS_SERVER_INSTALLED it names the daemon; without, child mode finds it by itself (beside
// the installed libagentd). A plugin path given as an argument replaces GREET_PLUGIN.
#include <agentd/agentd.h>

#include <iostream>

int main(int argc, char** argv) {
  agentd::ChildOptions options;
  options.plugins = {argc > 1 ? argv[1] : GREET_PLUGIN};
#ifdef AGENTD_AS_SERVER_INSTALLED
  options.server_path = AGENTD_AS_SERVER_INSTALLED;
#endif
  try {
    auto client = agentd::Client::spawn_child(options);
    auto greeter = client.create_agent("GreetAgent", "g");
    std::cout << greeter.reply(agentd::Msg("user", "world", "user")).get().text() << "\n";
  } catch (const agentd::Error& e) {
    std::cerr << e.what() << "\n";
    return 1;
  }
  return 0;
}

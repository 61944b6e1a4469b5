// A main program built against the installed package: starts the installed as_server in child
// mode with the plugin built beside it, and prints one reply.
#include <agentd/agentd.h>

#include <iostream>

int main() {
  agentd::ChildOptions options;
  options.plugins = {GREET_PLUGIN};
  options.server_path = AGENTD_AS_SERVER_INSTALLED;
  auto client = agentd::Client::spawn_child(options);
  auto greeter = client.create_agent("GreetAgent", "g");
  std::cout << greeter.reply(agentd::Msg("user", "world", "user")).get().text() << "\n";
  return 0;
}

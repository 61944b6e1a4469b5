// A program that only talks to servers, linked with the client library alone
// (agentd::client, libagentd-client.so): it starts a child as_server (another process, which
// links libagentd.so) and calls an agent there.
#include <agentd/client.h>

#include <iostream>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: client_only ECHO_PLUGIN\n";
    return 2;
  }
  agentd::ChildOptions options;
  options.plugins = {argv[1]};
  auto client = agentd::Client::spawn_child(options);
  auto echo = client.create_agent("EchoAgent", "e");
  std::cout << echo.reply(agentd::Msg("user", "client only")).get().text() << "\n";
  return 0;
}

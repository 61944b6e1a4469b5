// A main program for the fault tests that must stop a client (SIGSTOP) while its calls are in
// flight: lost_calls_client PORT CALLS AGENT_ID... sends CALLS replies round-robin to the agents
// on 127.0.0.1:PORT (a reconnecting client), prints "sent" once the server has them all, then
// one line per call as its get() ends: "call I ok" or "call I error CODE MESSAGE", then "done".
#include <agentd/client.h>

#include <cstdio>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: lost_calls_client PORT CALLS AGENT_ID...\n");
    return 2;
  }
  const auto port = static_cast<std::uint16_t>(std::stoi(argv[1]));
  const int calls = std::stoi(argv[2]);
  agentd::ClientOptions o;
  o.reconnect_initial = std::chrono::milliseconds(20);
  o.reconnect_max = std::chrono::milliseconds(200);
  o.reconnect_deadline = std::chrono::seconds(60);
  o.timeout = std::chrono::seconds(120);
  auto c = agentd::Client::connect("127.0.0.1", port, o);
  std::vector<agentd::AgentRef> agents;
  for (int i = 3; i < argc; ++i) agents.push_back(c.agent(argv[i]));
  std::vector<agentd::Placeholder> ps;
  ps.reserve(calls);
  for (int i = 0; i < calls; ++i)
    ps.push_back(agents[i % agents.size()].reply(agentd::Msg("user", std::to_string(i))));
  c.info();  // answered after the calls made before it: the server has them all
  std::printf("sent\n");
  std::fflush(stdout);
  for (int i = 0; i < calls; ++i) {
    try {
      ps[i].get();
      std::printf("call %d ok\n", i);
    } catch (const agentd::Error& e) {
      std::printf("call %d error %s %s\n", i, std::string(agentd::to_string(e.code())).c_str(),
                  e.message().c_str());
    }
  }
  std::printf("done\n");
  std::fflush(stdout);
  return 0;
}

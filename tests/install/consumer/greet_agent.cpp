// A plugin built against the installed package: replies "hello, <input>".
#include <agentd/agent.h>

class GreetAgent : public agentd::Agent {
 public:
  using agentd::Agent::Agent;
  agentd::Msg reply(const agentd::Msg& x) override { return agentd::Msg(name(), "hello, " + x.text()); }
};
AGENTD_REGISTER_AGENT(GreetAgent);

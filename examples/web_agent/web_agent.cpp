// The web agent from AgentScope's distributed tutorial: each reply "fetches a page" (a 5 s
// sleep; args {"sleep_ms": N} changes it) and answers "Answer from <name>".
#include <agentd/agent.h>

#include <chrono>
#include <thread>

class WebAgent : public agentd::Agent {
 public:
  explicit WebAgent(agentd::AgentInit init)
      : Agent(std::move(init)), sleep_ms_(args().value("sleep_ms", 5000)) {}

  // The question (x) does not change the tutorial's answer: only the time it takes matters.
  agentd::Msg reply(const agentd::Msg& /*x*/) override {
    std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms_));  // stands in for a web fetch
    return agentd::Msg(name(), "Answer from " + name());
  }

 private:
  int sleep_ms_;
};
AGENTD_REGISTER_AGENT(WebAgent);

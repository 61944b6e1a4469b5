"""A Python class named EchoAgent, which the C++ plugin libecho_agent.so also registers."""
import agentd


class EchoAgent(agentd.Agent):
    def reply(self, x):
        return agentd.Msg(self.name, "python echo", "assistant")

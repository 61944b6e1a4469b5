"""An agent module that raises while it is imported."""
import agentd


class PyNeverRegistered(agentd.Agent):
    def reply(self, x):
        return x


raise RuntimeError("this agent module refuses to load")  # ERROR LINE

"""An agent module with a syntax error (the marked line lacks its colon)."""
import agentd


class PyBroken(agentd.Agent):
    def reply(self, x)  # ERROR LINE
        return x

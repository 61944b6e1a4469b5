"""PyTwice, second definition (the other is dup_one.py)."""
import agentd


class PyTwice(agentd.Agent):
    def reply(self, x):
        return agentd.Msg(self.name, "two", "assistant")

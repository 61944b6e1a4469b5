"""PyTwice, first definition (the other is dup_two.py)."""
import agentd


class PyTwice(agentd.Agent):
    def reply(self, x):
        return agentd.Msg(self.name, "one", "assistant")

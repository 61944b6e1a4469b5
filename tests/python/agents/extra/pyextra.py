"""A second agent folder: as_server takes --agent-dir more than once."""
import agentd


class PyExtra(agentd.Agent):
    def reply(self, x):
        return agentd.Msg(self.name, "extra:" + x.text(), "assistant")

"""A module that imports fine, sorted before the broken one: the server must still not start."""
import agentd


class PyFineBeforeBroken(agentd.Agent):
    def reply(self, x):
        return x

"""An agent module that imports a module which does not exist."""
import agentd
import agentd_tests_no_such_module_xyz  # ERROR LINE


class PyNeedsMissing(agentd.Agent):
    def reply(self, x):
        return x

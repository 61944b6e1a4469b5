import agentd


class Fine(agentd.Agent):
    def reply(self, x):
        return x


raise RuntimeError("configuration missing")

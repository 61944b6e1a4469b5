"""Python agents the C++ integration tests call (tests/integration/python_agents_test.cpp)."""
import asyncio
import time

import agentd


class Upper(agentd.Agent):
    """Answers with its input's text in capitals; remembers what it saw."""

    def __init__(self, name, suffix=""):
        super().__init__(name)
        self.suffix = suffix
        self.calls = 0

    def reply(self, x):
        self.calls += 1
        self.memory.add(x)
        return agentd.Msg(self.name, str(x.content).upper() + self.suffix, "assistant")

    @agentd.method
    def stats(self):
        return {"calls": self.calls, "memory": self.memory.size()}

    def save_state(self):
        return {"calls": self.calls}

    def load_state(self, state):
        self.calls = state["calls"]


class Relay(agentd.Agent):
    """Asks the agent named in its creation args (an AgentRef value) and wraps its answer, without
    holding a thread while it waits."""

    def __init__(self, name, peer=None):
        super().__init__(name)
        self.peer = peer

    async def reply(self, x):
        other = self.connect(self.peer)
        answer = await other.reply(x)
        return agentd.Msg(self.name, "relayed(" + answer.text() + ")", "assistant")


class Broken(agentd.Agent):
    def reply(self, x):
        if x.content == "ok":
            return agentd.Msg(self.name, "fine", "assistant")
        raise KeyError("no such page: " + str(x.content))


class Hog(agentd.Agent):
    """An async agent that blocks the shared asyncio loop (what not to do)."""

    async def reply(self, x):
        time.sleep(float(x.content))
        return agentd.Msg(self.name, "done", "assistant")


class Nap(agentd.Agent):
    async def reply(self, x):
        await asyncio.sleep(0.05)
        return agentd.Msg(self.name, "napped", "assistant")

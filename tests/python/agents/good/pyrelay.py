"""Python agents that call other agents by reference (self.connect), blocking and async."""
import agentd


class PyRelay(agentd.Agent):
    """Blocking: asks its target (an AgentRef's to_value(), on any server) and waits with get().
    reply: "relayed: <target's answer>"; method ask_twice: the target's answers to two calls, the
    second given the first's placeholder (a placeholder passed on without waiting)."""

    def __init__(self, name, target=None, **kwargs):
        super().__init__(name)
        self.target = target

    def reply(self, x):
        ref = self.connect(self.target)
        answer = ref.reply(x).get()
        return agentd.Msg(self.name, "relayed: " + answer.text(), "assistant")

    @agentd.method
    def ask_twice(self, text=""):
        ref = self.connect(self.target)
        first = ref.reply(agentd.Msg("user", text, "user"))
        second = ref.reply(first)
        return [first.get().text(), second.get().text()]

    @agentd.method
    def ping_target(self):
        return self.connect(self.target).call("ping", {"n": 7})


class PyAsyncRelay(agentd.Agent):
    """Async: awaits its target's placeholder (no thread held while waiting)."""

    def __init__(self, name, target=None, **kwargs):
        super().__init__(name)
        self.target = target

    async def reply(self, x):
        other = self.connect(self.target)
        answer = await other.reply(x)
        return agentd.Msg(self.name, "async relayed: " + answer.text(), "assistant")

    @agentd.method
    async def fan_out(self, text="", n=3):
        """n calls to the target at once, awaited together with asyncio.gather."""
        import asyncio
        other = self.connect(self.target)
        answers = await asyncio.gather(*[other.reply(agentd.Msg("user", f"{text}{i}", "user"))
                                         for i in range(n)])
        return [a.text() for a in answers]

"""Asynchronous Python agents (async def reply / methods): they run on the server's asyncio loop
thread and must hold no thread while they wait."""
import asyncio
import time

import agentd


class PyAsyncSleeper(agentd.Agent):
    """Awaits asyncio.sleep(x.content["seconds"]) (1 s when x is None)."""

    async def reply(self, x):
        seconds = x.content["seconds"] if x is not None else 1
        started = time.time()
        await asyncio.sleep(seconds)
        return agentd.Msg(self.name, {"started": started, "ended": time.time()}, "assistant")


class PyAsyncSeq(agentd.Agent):
    """Records the order its calls run in; each call suspends a varying time, so calls that were
    allowed to overlap would finish (and record) out of order."""

    def __init__(self, name, **kwargs):
        super().__init__(name)
        self.seen = []

    async def reply(self, x):
        await asyncio.sleep(0.001 * ((x.content * 7) % 5))
        self.seen.append(x.content)
        return agentd.Msg(self.name, len(self.seen), "assistant")

    @agentd.method
    async def seen_so_far(self):
        await asyncio.sleep(0)
        return list(self.seen)


class PyAsyncFail(agentd.Agent):
    """Raises after a suspension."""

    async def reply(self, x):
        await asyncio.sleep(0.01)
        if x.content == "fail":
            raise LookupError("async agent asked to fail")  # PyAsyncFail.reply raise
        return agentd.Msg(self.name, x.content, "assistant")

    @agentd.method
    async def twice(self, n=0):
        await asyncio.sleep(0.01)
        return 2 * n


class PyAsyncModel(agentd.Agent):
    """Awaits the server's "echo" model on the loop."""

    async def reply(self, x):
        r = await self.model("echo").chat_async([x])
        return agentd.Msg(self.name, "model said: " + r.text, "assistant")

"""agentd-bench's agents written in Python (workload W13), hosted by the as_server children the
bench starts with this folder as --agent-dir (or by a server given with --server that was started
with it). Each mirrors the C++ agent the bench measures beside it in the same run, doing the same
work, so that the ratios show what hosting the agent in Python costs:

  BenchPyEcho     the C++ EchoAgent (examples/echo_agent): echoes the content, remembers what it
                  hears and says, counts its replies, answers call("ping") with "pong"
  BenchPySleeper  EchoAgent with {"sleep_ms": N}: a blocking reply, here time.sleep (the GIL is
                  released while it sleeps)
  BenchPyAsk      the C++ AskAgent (examples/async_agents): an asynchronous reply that awaits the
                  server's model config args["model"] (chat_async: HTTP on the server's event loop)

The class names must not clash with the C++ plugins' classes on the same server.
"""
import time

import agentd


class BenchPyEcho(agentd.Agent):
    def __init__(self, name, prefix="", **kwargs):
        super().__init__(name)
        self.prefix = prefix
        self.replies = 0

    def reply(self, x):
        self.memory.add(x)
        self.replies += 1
        content = x.content if x is not None else None
        if self.prefix:
            content = self.prefix + str(content)
        out = agentd.Msg(self.name, content)
        self.memory.add(out)
        return out

    @agentd.method
    def ping(self):
        return "pong"

    def save_state(self):
        return {"replies": self.replies}

    def load_state(self, state):
        self.replies = state.get("replies", 0)


class BenchPySleeper(agentd.Agent):
    def __init__(self, name, sleep_ms=1000, **kwargs):
        super().__init__(name)
        self.sleep_s = sleep_ms / 1000.0

    def reply(self, x):
        time.sleep(self.sleep_s)
        return agentd.Msg(self.name, x.content if x is not None else None)


class BenchPyAsk(agentd.Agent):
    def __init__(self, name, model="echo", **kwargs):
        super().__init__(name)
        self.model_name = model

    async def reply(self, x):
        question = [agentd.Msg("user", x.content if x is not None else None, "user")]
        answer = await self.model(self.model_name).chat_async(question)
        out = agentd.Msg(self.name, answer.msg.content)
        self.memory.add(out)
        return out

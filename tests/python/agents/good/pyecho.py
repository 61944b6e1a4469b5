"""Blocking Python agents the tests call: echo, memory, methods, state, failures, streaming."""
import os
import time

import agentd


class NotAnAgent:
    """A plain class in an agent module: must not be registered."""


class PyEcho(agentd.Agent):
    """Replies with its input's content (prefix + text when a prefix is given), as the C++
    EchoAgent does; remembers what it hears and says; counts its replies (saved state)."""

    def __init__(self, name, prefix="", **kwargs):
        super().__init__(name)
        self.prefix = prefix
        self.count = 0
        self.extra = dict(kwargs)

    def reply(self, x):
        self.count += 1
        if x is None:
            return agentd.Msg(self.name, "<none>", "assistant",
                              metadata={"pid": os.getpid(), "count": self.count})
        self.memory.add(x)
        content = self.prefix + x.text() if self.prefix else x.content
        out = agentd.Msg(self.name, content, "assistant",
                         metadata={"pid": os.getpid(), "count": self.count})
        self.memory.add(out)
        return out

    @agentd.method
    def ping(self, n=1):
        return {"pong": n}

    @agentd.method
    def count_replies(self):
        return self.count

    @agentd.method
    def extra_args(self):
        """The creation args beyond prefix, as plain values (a Msg as its dict, an agent
        reference as its to_value())."""
        out = {}
        for k, v in self.extra.items():
            if isinstance(v, agentd.Msg):
                v = v.to_dict()
            elif hasattr(v, "to_value"):
                v = v.to_value()
            out[k] = v
        return out

    @agentd.method
    def whoami(self):
        return {"name": self.name, "id": self.id, "pid": os.getpid()}

    @agentd.method
    def memory_size(self):
        return self.memory.size()

    @agentd.method
    def memory_texts(self):
        return [m.text() for m in self.memory.get()]

    @agentd.method
    def forget(self):
        self.memory.clear()
        return self.memory.size()

    def not_exposed(self):
        """No @agentd.method: callers must not reach it."""
        return "secret"

    def save_state(self):
        return {"count": self.count}

    def load_state(self, state):
        self.count = state["count"]


class PyTrail(agentd.Agent):
    """Appends its name to a text trail, as the C++ TrailAgent does: "x" -> "x>P"."""

    def reply(self, x):
        text = x.text() if x is not None else ""
        return agentd.Msg(self.name, text + ">" + self.name, "assistant")


class PySeq(agentd.Agent):
    """Records the order its calls run in. Each reply returns how many it had seen."""

    def __init__(self, name, **kwargs):
        super().__init__(name)
        self.seen = []

    def reply(self, x):
        self.seen.append(x.content)
        if len(self.seen) % 7 == 0:
            time.sleep(0.002)  # a call that takes longer must still not be overtaken
        return agentd.Msg(self.name, len(self.seen), "assistant")

    @agentd.method
    def seen_so_far(self):
        return list(self.seen)


class PySleeper(agentd.Agent):
    """Sleeps x.content["seconds"] with time.sleep (which must release the GIL)."""

    def reply(self, x):
        started = time.time()
        time.sleep(x.content["seconds"])
        return agentd.Msg(self.name, {"started": started, "ended": time.time()}, "assistant")


class PyFail(agentd.Agent):
    """Raises when asked to: reply with content "fail", the method `boom`."""

    def __init__(self, name, **kwargs):
        super().__init__(name)
        self.calls = 0

    def reply(self, x):
        self.calls += 1
        if x.content == "fail":
            raise ValueError("asked to fail on call " + str(self.calls))  # PyFail.reply raise
        return agentd.Msg(self.name, x.content, "assistant")

    @agentd.method
    def boom(self, key="missing"):
        return {}[key]  # PyFail.boom raise

    @agentd.method
    def calls_made(self):
        return self.calls


class PyStrict(agentd.Agent):
    """A constructor without **kwargs: unknown creation args are the caller's error."""

    def __init__(self, name, level=0):
        super().__init__(name)
        self.level = int(level)

    def reply(self, x):
        return agentd.Msg(self.name, self.level, "assistant")


class PyStream(agentd.Agent):
    """Emits its input word by word with emit_chunk ("a b" -> "a ", "b"); replies with the
    whole text and whether the caller was streaming."""

    def reply(self, x):
        text = x.text()
        words = text.split(" ")
        whole = ""
        for i, w in enumerate(words):
            piece = w if i == len(words) - 1 else w + " "
            self.emit_chunk(piece)
            whole += piece
        return agentd.Msg(self.name, whole, "assistant", metadata={"streaming": self.streaming})


class PyModel(agentd.Agent):
    """Asks the server's model (the built-in "echo" model answers with the last user text)."""

    def __init__(self, name, config="echo", **kwargs):
        super().__init__(name)
        self.config = config

    def reply(self, x):
        r = self.model(self.config).chat([x])
        return agentd.Msg(self.name, r.text, "assistant",
                          metadata={"usage": r.usage, "latency": r.latency})

    @agentd.method
    def streamed(self, text=""):
        r = self.model(self.config).stream([agentd.Msg("user", text, "user")])
        return r.text


class PyModelStream(agentd.Agent):
    """Streams the echo model's answer: with on_chunk None each piece becomes a chunk of the
    running reply."""

    def reply(self, x):
        r = self.model("echo").stream([x])
        return agentd.Msg(self.name, r.text, "assistant")


class PyChatty(agentd.Agent):
    """Prints as much as it is asked to on its server's stdout (what debugging agents do)."""

    def reply(self, x):
        for i in range(int(x.content)):
            print(f"{self.name} line {i} " + "x" * 1000, flush=True)
        return agentd.Msg(self.name, "printed", "assistant")

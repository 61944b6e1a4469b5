"""AgentScope's DialogAgent as an asynchronous Python agent for agentd.

It keeps the dialogue in its memory and asks the server's model config for each answer. Its
reply is `async def`: it runs on the server's asyncio loop thread, and while it awaits the model
(`chat_async` / `stream_async`, HTTP on the server's event loop) it holds no thread at all, so
one server keeps thousands of such agents waiting on their models at once.

When the caller reads the reply as a stream (`ref.reply_stream(x)`, `agentctl call --stream`),
self.streaming is true: it asks the model for a stream and passes each piece on with
emit_chunk as it arrives. The whole answer is still the reply (what get() and other agents see).
"""
import agentd
from agentd import Msg


class DialogAgent(agentd.Agent):
    """Talks with whoever calls it, with a system prompt and a model config of the server."""

    def __init__(self, name, sys_prompt="You are a helpful assistant.", model_config_name="echo", **kwargs):
        super().__init__(name)
        self.sys_prompt = sys_prompt
        self.model_config_name = model_config_name
        self.calls = 0   # model calls and tokens so far: this agent's own state, see save_state
        self.tokens = 0

    async def reply(self, x=None):
        if x is not None:
            self.memory.add(x)
        prompt = [Msg("system", self.sys_prompt, role="system")] + self.memory.get()
        model = self.model(self.model_config_name)
        if self.streaming:
            # The caller reads chunks: each piece of the model's stream becomes one as it comes.
            r = await model.stream_async(prompt, on_chunk=self.emit_chunk)
        else:
            r = await model.chat_async(prompt)
        self.calls += 1
        self.tokens += r.usage.get("total_tokens", 0)
        answer = Msg(self.name, r.text, role="assistant")
        self.memory.add(answer)
        return answer

    @agentd.method
    def usage(self):
        """ref.call("usage"): model calls and tokens this agent has used."""
        return {"calls": self.calls, "total_tokens": self.tokens}

    def save_state(self):
        return {"calls": self.calls, "tokens": self.tokens}

    def load_state(self, state):
        self.calls = state.get("calls", 0)
        self.tokens = state.get("tokens", 0)

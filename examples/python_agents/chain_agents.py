"""Python agents for chain.py, which mixes them with C++ agents on two servers.

Wrapper is a blocking agent: its reply wraps what it hears in its name ("x" -> "py(x)").
Asker is an asynchronous agent holding a reference to another agent (on any server, written in
any language): its reply asks that agent and awaits the placeholder, holding no thread meanwhile.
"""
import agentd
from agentd import Msg


class Wrapper(agentd.Agent):
    """'x' -> '<name>(x)'."""

    def reply(self, x=None):
        heard = x.content if x is not None else ""
        return Msg(self.name, f"{self.name}({heard})", role="assistant")


class Asker(agentd.Agent):
    """Asks `target` (an AgentRef, given at creation) and answers with what it said."""

    def __init__(self, name, target=None, **kwargs):
        super().__init__(name)
        self.target = target  # arrives as the reference's plain value (AgentRef.to_value())

    async def reply(self, x=None):
        other = self.connect(self.target)  # an AgentRef to it, wherever it lives
        answer = await other.reply(x)      # a placeholder; awaiting it holds no thread
        return Msg(self.name, f"{self.name} asked {other.name}: {answer.content}", role="assistant")

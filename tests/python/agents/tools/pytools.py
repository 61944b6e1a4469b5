"""Python agents that use the hosting server's MCP tools (Agent.tools), blocking and async."""
import agentd


class PyToolUser(agentd.Agent):
    """x.content is {"tool": "SERVER/TOOL", "arguments": {...}}; answers the result's text.
    Method list(patterns) answers the matching tools' names."""

    def reply(self, x):
        r = self.tools.call(x.content["tool"], x.content.get("arguments"))
        return agentd.Msg(self.name, {"text": r.text, "is_error": r.is_error}, "assistant")

    @agentd.method
    def list(self, patterns=None):
        return [t["name"] for t in self.tools.list(patterns)]


class PyAsyncToolUser(agentd.Agent):
    """PyToolUser's reply, awaiting the call on the server's loop."""

    async def reply(self, x):
        r = await self.tools.call_async(x.content["tool"], x.content.get("arguments"))
        return agentd.Msg(self.name, {"text": r.text, "is_error": r.is_error}, "assistant")

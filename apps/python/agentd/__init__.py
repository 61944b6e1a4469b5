"""agentd: drive agentd agent servers from Python, with the C++ client underneath.

    import agentd
    with agentd.Client.spawn_child(plugins=["libweb_agent.so"]) as client:
        a = client.create_agent("WebAgent", "W0")
        p = a(agentd.Msg("user", "page_1"))   # returns at once: a Placeholder
        print(p.content)                      # waits until the reply is there

Client.connect(host, port) reaches a running as_server (independent mode), Client.spawn_child
starts one for this program (child mode), Client.local hosts the agents in this process.
Cluster.open / Cluster.spawn_children drive several servers as one.

Agents can be written in Python too: subclass agentd.Agent (agent.py), host the class with
`as_server --agent-dir DIR`, or move one made here with `MyAgent("A0").to_dist()`.
"""
import os as _os

from . import _agentd

from ._agentd import (  # noqa: F401
    AgentInfo,
    AgentRef,
    ChatResponse,
    Client,
    Cluster,
    Error,
    Model,
    Msg,
    Placeholder,
    ServerInfo,
    ToolResult,
    Tools,
    __version__,
)
from .agent import Agent, method  # noqa: F401  (agents written in Python; agent.py)

Agent.__module__ = "agentd"
method.__module__ = "agentd"

__all__ = ["Agent", "AgentInfo", "AgentRef", "ChatResponse", "Client", "Cluster", "Error", "Model",
           "Msg", "Placeholder", "ServerInfo", "ToolResult", "Tools", "method"]

# Child mode in a build tree: use the as_server built beside this package (build/bin) unless
# $AGENTD_AS_SERVER or server_path says otherwise; installed, the library finds the installed one.
_built = _os.path.normpath(_os.path.join(_os.path.dirname(__file__), "..", "..", "bin", "as_server"))
if _os.path.isfile(_built):
    _agentd._set_default_server_path(_built)

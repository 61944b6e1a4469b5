"""Python agents hosted by as_server use the MCP tools of its --tool-config-path (issue #31):
the reference server-everything from npm (tests/mcp/node_modules) over stdio."""
import os
import shutil
import tempfile

import pytest

import agentd
from agentd import Msg
from conftest import Server

HERE = os.path.dirname(os.path.abspath(__file__))
EVERYTHING = os.path.join(HERE, "..", "mcp", "node_modules", "@modelcontextprotocol", "server-everything",
                          "dist", "index.js")
NODE = shutil.which("node")

pytestmark = pytest.mark.skipif(
    NODE is None or not os.path.exists(EVERYTHING),
    reason="needs node and tests/mcp/node_modules (scripts/setup.sh installs both)")


@pytest.fixture(scope="module")
def tool_server():
    with tempfile.TemporaryDirectory() as d:
        config = os.path.join(d, "tools.json")
        with open(config, "w") as f:
            # JSON, as MCP servers' READMEs print it.
            f.write('{"mcpServers": {"everything": {"command": "%s", "args": ["%s", "stdio"]}}}' %
                    (NODE, EVERYTHING))
        s = Server(["--agent-dir", os.path.join(HERE, "agents", "tools"), "--tool-config-path", config])
        try:
            yield s
        finally:
            s.close()


def test_a_blocking_python_agent_lists_and_calls_tools(tool_server):
    c = tool_server.connect()
    a = c.create_agent("PyToolUser", "user")
    assert a.call("list", ["everything/get-su*"]) == ["everything/get-sum"]
    r = a.reply(Msg("user", {"tool": "everything/get-sum", "arguments": {"a": 20, "b": 22}}, "user")).get()
    assert "42" in r.content["text"]
    assert r.content["is_error"] is False


def test_an_async_python_agent_awaits_tool_calls(tool_server):
    c = tool_server.connect()
    agents = [c.create_agent("PyAsyncToolUser", f"u{i}") for i in range(10)]
    calls = [a.reply(Msg("user", {"tool": "everything/echo", "arguments": {"message": f"m{i}"}}, "user"))
             for i, a in enumerate(agents)]
    for i, p in enumerate(calls):
        assert f"m{i}" in p.get().content["text"]


def test_tool_errors_reach_python_agents_as_agentd_errors(tool_server):
    c = tool_server.connect()
    a = c.create_agent("PyToolUser", "erring")
    with pytest.raises(agentd.Error) as e:
        a.reply(Msg("user", {"tool": "everything/no-such-tool"}, "user")).get()
    assert "no-such-tool" in str(e.value)

"""What a new user meets: get(timeout) names the whole wait, close() really closes, errors name
what Python offers (server_path=), not only C++ names, child mode leaves nothing in $TMPDIR,
plugins given by bare name are found (or the error says where it looked), and a DialogAgent on
a model config the server does not have is refused at creation."""
import os
import subprocess
import sys
import time

import pytest

import agentd
from agentd import Msg

from conftest import PLUGIN_DIR, PLUGINS


def test_get_timeout_names_the_timeout_given(client):
    a = client.create_agent("WebAgent", "W", {"sleep_ms": 3000})
    p = a(Msg("user", "q"))
    with pytest.raises(agentd.Error) as e:
        p.get(timeout=0.5)
    assert e.value.code == "timeout"
    assert "within 500 ms" in str(e.value), str(e.value)


def _established_to(port):
    """The ESTABLISHED TCP connections of this machine whose remote port is port."""
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        if not os.path.exists(table):
            continue
        with open(table) as f:
            next(f)
            for row in f:
                fields = row.split()
                if int(fields[2].rsplit(":", 1)[1], 16) == port and fields[3] == "01":
                    count += 1
    return count


def test_close_ends_the_connection_while_a_ref_lives(server):
    c = server.connect()
    a = c.create_agent("EchoAgent", "E")
    assert a(Msg("user", "hi")).content == "hi"
    # The connection, and this thread's lane (README "The synchronous lane") unless the reply
    # went on the connection.
    assert _established_to(server.port) in (1, 2)
    c.close()
    # Both are gone at once, though `a` still holds the client.
    assert _established_to(server.port) == 0
    with pytest.raises(agentd.Error) as e:
        a(Msg("user", "again"))
    assert e.value.code == "disconnected"
    # And it does not come back (no reconnecting behind the closed client).
    server.connect().close()
    assert _established_to(server.port) == 0


def test_a_missing_as_server_names_the_python_keyword():
    with pytest.raises(agentd.Error) as e:
        agentd.Client.spawn_child(plugins=PLUGINS, server_path="/nonexistent/as_server")
    text = str(e.value)
    assert "/nonexistent/as_server" in text
    assert "server_path=" in text, text


_PARENT = """
import sys, agentd
c = agentd.Client.spawn_child(plugins=sys.argv[1:])
print(c.info().pid, flush=True)
sys.stdin.read()
"""


def test_a_killed_parent_leaves_no_private_dir(tmp_path):
    env = dict(os.environ, TMPDIR=str(tmp_path))
    parent = subprocess.Popen([sys.executable, "-c", _PARENT] + PLUGINS, env=env,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    child_pid = int(parent.stdout.readline())
    parent.kill()
    parent.wait()
    # The child stops when its parent's end of its stdin closes; wait for it to go.
    deadline = time.monotonic() + 30
    while os.path.exists(f"/proc/{child_pid}") and time.monotonic() < deadline:
        with open(f"/proc/{child_pid}/stat") as f:
            if f.read().split(") ", 1)[1].startswith("Z"):
                break  # a zombie: exited (its parent, killed, cannot reap it)
        time.sleep(0.01)
    assert list(tmp_path.iterdir()) == [], "left behind: " + ", ".join(
        p.name for p in tmp_path.iterdir())


def test_a_bare_plugin_name_is_found_beside_the_library(tmp_path, monkeypatch):
    # As the README writes it: no directory. Found in the plugins shipped with the build.
    monkeypatch.chdir(tmp_path)
    with agentd.Client.local(plugins=["libecho_agent.so"]) as c:
        assert c.create_agent("EchoAgent", "E")(Msg("user", "found")).content == "found"
    with pytest.raises(agentd.Error) as e:
        agentd.Client.local(plugins=["libno_such_agent.so"])
    text = str(e.value)
    assert "libno_such_agent.so" in text and str(tmp_path) in text, text
    assert "plugin_dirs=" in text, text


@pytest.mark.parametrize("mode", ["local", "child"])
def test_a_dialog_agent_on_an_unknown_model_config_is_refused_at_creation(mode):
    dialog = os.path.join(PLUGIN_DIR, "libdialog_agents.so")
    make = agentd.Client.local if mode == "local" else agentd.Client.spawn_child
    with make(plugins=[dialog]) as c:
        with pytest.raises(agentd.Error) as e:
            c.create_agent("DialogAgent", "D", {"model_config_name": "nope"})
        assert e.value.code == "config_error"
        assert "'nope'" in e.value.message and "known model configs: echo" in e.value.message
        assert c.list_agents() == []
        d = c.create_agent("DialogAgent", "D", {"model_config_name": "echo"})
        assert d(Msg("user", "hi", "user")).content == "hi"

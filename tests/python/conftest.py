"""Fixtures for the agentd Python tests: real as_server processes on loopback.

CTest sets PYTHONPATH (build/python), AGENTD_AS_SERVER, AGENTD_TEST_PLUGIN_DIR (build/plugins)
and AGENTD_TEST_GOOD_PLUGIN_DIR (build/test_plugins/good); see tests/python/CMakeLists.txt.
"""
import os
import secrets
import subprocess
import tempfile
import time

import pytest

import agentd

AS_SERVER = os.environ["AGENTD_AS_SERVER"]
PLUGIN_DIR = os.environ["AGENTD_TEST_PLUGIN_DIR"]
TEST_PLUGIN_DIR = os.environ["AGENTD_TEST_GOOD_PLUGIN_DIR"]
PLUGINS = [
    os.path.join(PLUGIN_DIR, "libecho_agent.so"),
    os.path.join(PLUGIN_DIR, "libweb_agent.so"),
    os.path.join(TEST_PLUGIN_DIR, "libtest_agents.so"),
]
READY = "as_server ready: listening on "

# Children require a token (child mode makes one unless given). The session's shared server
# logs in to children with this one (--peer-token-file), so placeholders made on a child can be
# fetched there; tests that mix the two spawn children with token=CHILD_TOKEN.
CHILD_TOKEN = secrets.token_hex(32)
_TOKEN_DIR = tempfile.TemporaryDirectory()
CHILD_TOKEN_FILE = os.path.join(_TOKEN_DIR.name, "child-token")
with os.fdopen(os.open(CHILD_TOKEN_FILE, os.O_WRONLY | os.O_CREAT, 0o600), "w") as _f:
    _f.write(CHILD_TOKEN + "\n")


class Server:
    """An as_server started by a test (--port 0); its ready line names the port."""

    def __init__(self, extra=()):
        args = [AS_SERVER, "--host", "127.0.0.1", "--port", "0", "--log-level", "warn"]
        for p in PLUGINS:
            args += ["--plugin", p]
        self.proc = subprocess.Popen(list(args) + list(extra), stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 30
        while True:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError("as_server exited early: " + self.proc.stderr.read())
            if READY in line:
                address = line.split(READY, 1)[1].split()[0]
                self.host, port = address.rsplit(":", 1)
                self.port = int(port)
                return
            if time.monotonic() > deadline:
                raise RuntimeError("as_server printed no ready line")

    def connect(self, **kw):
        return agentd.Client.connect(self.host, self.port, **kw)

    def wait_exit(self, timeout=30):
        return self.proc.wait(timeout=timeout)

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.proc.stdout.close()
        self.proc.stderr.close()


@pytest.fixture(scope="session")
def shared_server():
    s = Server(extra=["--peer-token-file", CHILD_TOKEN_FILE])
    yield s
    s.close()


@pytest.fixture
def server():
    s = Server()
    yield s
    s.close()


def make_client(mode, shared):
    if mode == "local":
        return agentd.Client.local(plugins=PLUGINS)
    if mode == "child":
        return agentd.Client.spawn_child(plugins=PLUGINS, token=CHILD_TOKEN)
    return shared.connect()


@pytest.fixture(params=["local", "child", "independent"])
def client(request, shared_server):
    """A client in each of the three modes (independent: a server shared by the session)."""
    with make_client(request.param, shared_server) as c:
        yield c


@pytest.fixture(params=["child", "independent"])
def remote_client(request, shared_server):
    """A client whose agents run in another process."""
    with make_client(request.param, shared_server) as c:
        yield c


# Python agents (issue #25): modules under tests/python/agents/<folder>, loaded with --agent-dir.
AGENTS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "agents")
GOOD_AGENTS = os.path.join(AGENTS_DIR, "good")


def agent_dir(name):
    """The absolute path of tests/python/agents/<name>."""
    return os.path.join(AGENTS_DIR, name)


def drain_stderr(server):
    """Reads a test server's stderr on a thread into server.stderr_lines, so a server that logs
    a lot (Python tracebacks) never blocks on a full pipe."""
    import threading
    server.stderr_lines = []

    def run():
        try:
            for line in server.proc.stderr:
                server.stderr_lines.append(line)
        except (ValueError, OSError):  # closed by Server.close()
            pass

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return server


@pytest.fixture(scope="session")
def py_server():
    """An as_server hosting the Python agents of agents/good beside the C++ test plugins."""
    s = drain_stderr(Server(extra=["--agent-dir", GOOD_AGENTS, "--peer-token-file", CHILD_TOKEN_FILE]))
    yield s
    s.close()


def make_py_client(mode, py_server):
    if mode == "child":
        return agentd.Client.spawn_child(plugins=PLUGINS, agent_dirs=[GOOD_AGENTS], token=CHILD_TOKEN)
    return py_server.connect()


@pytest.fixture(params=["child", "independent"])
def py_client(request, py_server):
    """A client of a server hosting agents/good: a child started with agent_dirs, or py_server."""
    with make_py_client(request.param, py_server) as c:
        yield c

"""Fixtures for the gateway tests: a real as_server with the echo plugin's agents, and a real
agentd-gateway in front of it, both on free loopback ports.

CTest sets AGENTD_AS_SERVER, AGENTD_GATEWAY, AGENTD_AGENTCTL and AGENTD_ECHO_PLUGIN (see
tests/gateway/CMakeLists.txt). The tests speak plain HTTP (urllib, http.client, sockets).
"""
import os
import secrets
import subprocess
import tempfile
import time

import pytest

AS_SERVER = os.environ["AGENTD_AS_SERVER"]
GATEWAY = os.environ["AGENTD_GATEWAY"]
AGENTCTL = os.environ["AGENTD_AGENTCTL"]
ECHO_PLUGIN = os.environ["AGENTD_ECHO_PLUGIN"]

# The agents the tests call, by id: (class, args).
AGENTS = {
    "echo": ("EchoAgent", "{}"),
    "stream": ("StreamEchoAgent", "{}"),
    "flaky": ("FlakyAgent", "{}"),
    "slow": ("EchoAgent", '{"sleep_ms": 2500}'),
}


class Process:
    """A process that prints a ready line naming HOST:PORT after `marker`; stderr to a file."""

    def __init__(self, args, marker, timeout=60):
        self.err = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=self.err, text=True)
        deadline = time.monotonic() + timeout
        while True:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError(f"{args[0]} exited early: {self.stderr()}")
            if marker in line:
                address = line.split(marker, 1)[1].split()[0]
                self.host, port = address.rsplit(":", 1)
                self.port = int(port)
                self.ready_line = line
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"{args[0]} printed no ready line")

    def stderr(self):
        self.err.seek(0)
        return self.err.read()

    def close(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc.stdout.close()
        self.err.close()


def write_secret(directory, name, text):
    path = os.path.join(directory, name)
    with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
        f.write(text + "\n")
    return path


@pytest.fixture(scope="session")
def tmpdir_session():
    with tempfile.TemporaryDirectory() as d:
        yield d


def start_server(port=0):
    s = Process([AS_SERVER, "--host", "127.0.0.1", "--port", str(port), "--log-level", "warn",
                 "--plugin", ECHO_PLUGIN], "as_server ready: listening on ")
    for agent_id, (cls, args) in AGENTS.items():
        subprocess.run([AGENTCTL, "--host", s.host, "--port", str(s.port), "create", cls, agent_id,
                        "--id", agent_id, "--args", args], check=True, capture_output=True, timeout=60)
    return s


@pytest.fixture(scope="session")
def server():
    s = start_server()
    yield s
    s.close()


class Gateway(Process):
    """agentd-gateway on a free port in front of server (anything with host and port), or of a
    cluster when cluster (a --cluster SPEC) is given."""

    def __init__(self, server=None, extra=(), cluster=None):
        upstream = ["--cluster", cluster] if cluster else ["--server", f"{server.host}:{server.port}"]
        super().__init__([GATEWAY, "--listen", "127.0.0.1:0"] + upstream + list(extra),
                         "agentd-gateway ready: listening on ")
        self.base = f"http://{self.host}:{self.port}"

    def close(self):
        """Stops the gateway (SIGTERM); it must exit 0 with no sanitizer report."""
        running = self.proc.poll() is None
        if running:
            self.proc.terminate()
            code = self.proc.wait(timeout=20)
        err = self.stderr()
        super().close()
        if running:
            assert code == 0, f"agentd-gateway exited {code} on SIGTERM: {err[-3000:]}"
        assert "Sanitizer" not in err, err[-3000:]


@pytest.fixture(scope="session")
def token():
    return secrets.token_hex(32)


@pytest.fixture(scope="session")
def gateway(server, tmpdir_session, token):
    """A gateway that requires a bearer token."""
    g = Gateway(server, ["--token-file", write_secret(tmpdir_session, "tokens", token)])
    yield g
    g.close()


@pytest.fixture
def open_gateway(server):
    """A gateway without tokens, with small limits and short timeouts."""
    g = Gateway(server, ["--max-body-bytes", "65536", "--max-header-bytes", "4096", "--request-timeout", "1",
                         "--reply-timeout", "1"])
    yield g
    g.close()

"""examples/python_agents/ runs as its README says, and prints what it promises.

Each example runs as a user runs it (python3 FILE ..., the package on PYTHONPATH); the servers
are real as_server processes loading the folder with --agent-dir. The dialog example talks to
the model tests' fake OpenAI-compatible endpoint (tests/unit/models/fake_model_server.py).
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import urllib.request

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
EXAMPLES = os.path.join(ROOT, "examples", "python_agents")
FAKE_MODEL_SERVER = os.path.join(ROOT, "tests", "unit", "models", "fake_model_server.py")
AS_SERVER = os.environ["AGENTD_AS_SERVER"]
AGENTCTL = os.path.join(os.path.dirname(AS_SERVER), "agentctl")
READY = "as_server ready: listening on "


def run(script, *args, timeout=180):
    """Runs an example as a user would (from the repository root); returns its stdout."""
    env = dict(os.environ, AGENTD_PLUGIN_DIR=os.environ["AGENTD_TEST_PLUGIN_DIR"])
    r = subprocess.run([sys.executable, os.path.join(EXAMPLES, script), *args], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, f"{script} exited {r.returncode}\nstdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    return r.stdout


def run_time(out, mode):
    """The `run: X s` time main.py printed for `mode`."""
    m = re.search(rf"^{mode}\s+init (\d+) agents:\s+([\d.]+) s\s+run:\s+([\d.]+) s", out, re.M)
    assert m, f"no timing line for {mode} in:\n{out}"
    return float(m.group(3))


class AgentDirServer:
    """`as_server --agent-dir examples/python_agents` on a free loopback port (independent mode)."""

    def __init__(self, *extra):
        self.proc = subprocess.Popen([AS_SERVER, "--host", "127.0.0.1", "--port", "0", "--log-level", "warn",
                                      "--agent-dir", EXAMPLES, *extra],
                                     cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        if READY not in line:
            self.proc.kill()
            raise RuntimeError(f"as_server did not start: {line}{self.proc.stderr.read()}")
        address = line.split(READY, 1)[1].split()[0]
        self.host, port = address.rsplit(":", 1)
        self.port = int(port)

    def close(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc.stdout.close()
        self.proc.stderr.close()


@pytest.fixture(scope="module")
def agent_dir_server():
    s = AgentDirServer()
    yield s
    s.close()


AGENTS, TIMEOUT = 4, 0.8  # each mode: 4 pages of 0.8 s, so 3.2 s one after another


def check_answers(out):
    for i in range(AGENTS):
        assert re.search(rf"^  W{i} read https://\S+: an answer to 'What is this page about\?'$", out, re.M), out


def test_web_agent_local_runs_one_after_another():
    out = run("main.py", "--mode", "local", "--agents", str(AGENTS), "--timeout", str(TIMEOUT))
    check_answers(out)
    assert run_time(out, "local") >= AGENTS * TIMEOUT * 0.95


def test_web_agent_child_and_local_speed_up():
    """The default run: local, then child mode (to_dist()), and the speed-up it prints."""
    out = run("main.py", "--agents", str(AGENTS), "--timeout", str(TIMEOUT))
    check_answers(out)
    local, child = run_time(out, "local"), run_time(out, "child")
    # Distributed, the sleeps overlap: about one page's time for all of them (one after another
    # would be AGENTS times that; the bounds leave room for a loaded, sanitized machine).
    assert child < AGENTS * TIMEOUT / 2, out
    assert local / child > 2, out
    speedup = float(re.search(r"speed-up of distributed over local: ([\d.]+)x", out).group(1))
    assert speedup > 2, out


def test_web_agent_independent(agent_dir_server):
    out = run("main.py", "--mode", "independent", "--agents", str(AGENTS), "--timeout", str(TIMEOUT),
              "--connect", f"{agent_dir_server.host}:{agent_dir_server.port}")
    check_answers(out)
    assert run_time(out, "independent") < AGENTS * TIMEOUT / 2, out


def agentctl(server, *args):
    r = subprocess.run([AGENTCTL, "--host", server.host, "--port", str(server.port), *args],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, f"agentctl {' '.join(args)} exited {r.returncode}: {r.stdout}{r.stderr}"
    return r.stdout


def test_agentctl_on_the_python_agents(agent_dir_server):
    """The README's agentctl steps against `as_server --agent-dir examples/python_agents`."""
    status = agentctl(agent_dir_server, "--json", "status")
    for cls in ("WebAgent", "DialogAgent", "Wrapper", "Asker"):
        assert cls in status, status
    agentctl(agent_dir_server, "create", "WebAgent", "Wctl", "--args", '{"timeout": 0.1}')
    out = agentctl(agent_dir_server, "call", "Wctl", "https://agentscope.io")
    assert "Wctl read https://agentscope.io" in out, out
    assert agentctl(agent_dir_server, "method", "Wctl", "pages_read").strip() == "1"
    agentctl(agent_dir_server, "create", "DialogAgent", "Dctl")
    out = agentctl(agent_dir_server, "call", "--stream", "Dctl", "hello there")
    assert "hello there" in out, out


@pytest.fixture(scope="module")
def fake_model():
    """The model tests' fake OpenAI-compatible endpoint; yields its base URL for a key."""
    proc = subprocess.Popen([sys.executable, FAKE_MODEL_SERVER], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    assert line.startswith("PORT "), line
    port = int(line.split()[1])
    yield port
    proc.stdin.close()  # it exits when its stdin closes
    proc.wait(timeout=30)


def test_conversation_on_a_model(fake_model, tmp_path):
    key = "pyexamples-conversation"
    config = tmp_path / "models.yaml"
    config.write_text("- config_name: fake\n"
                      "  model_type: openai_chat\n"
                      "  model_name: test-model\n"
                      "  api_key: test-key\n"
                      "  client_args:\n"
                      f"    base_url: http://127.0.0.1:{fake_model}/s/{key}/ok/v1\n"
                      "    max_retries: 0\n")
    out = run("conversation.py", "--model-config-path", str(config), "--model-config-name", "fake",
              "--say", "Plan a day in Paris", "--say", "Make it cheaper", "--say", "exit")
    # The fake model answers "echo: <the last message>", streamed word by word.
    assert "Alice on 127.0.0.1:" in out and "model config 'fake'" in out, out
    assert "You: Plan a day in Paris\nAlice: echo: Plan a day in Paris\n" in out, out
    assert "You: Make it cheaper\nAlice: echo: Make it cheaper\n" in out, out
    m = re.search(r"Alice: (\d+) model calls, (\d+) tokens, (\d+) messages in memory", out)
    assert m and m.group(1) == "2" and int(m.group(2)) > 0 and m.group(3) == "4", out

    with urllib.request.urlopen(f"http://127.0.0.1:{fake_model}/requests/{key}", timeout=10) as r:
        requests = json.loads(r.read())
    assert len(requests) == 2
    for req in requests:
        assert req["body"]["stream"] is True  # streamed, since the program read chunks
        assert req["body"]["messages"][0]["role"] == "system"
        assert "You are Alice" in req["body"]["messages"][0]["content"]
    # The second request carries the dialogue so far from the agent's memory.
    contents = [m["content"] for m in requests[1]["body"]["messages"][1:]]
    assert contents == ["Plan a day in Paris", "echo: Plan a day in Paris", "Make it cheaper"], contents


def test_conversation_on_the_echo_model():
    out = run("conversation.py", "--say", "hello", "--say", "exit")
    # The built-in echo model answers with the user's last words.
    assert "model config 'echo'" in out and "You: hello\nAlice: hello\n" in out, out
    assert re.search(r"Alice: 1 model calls, \d+ tokens, 2 messages in memory", out), out


def test_chain_of_cpp_and_python_agents():
    out = run("chain.py")
    assert re.search(r"C\+\+ EchoAgent 'cpp' on 127\.0\.0\.1:\d+, Python Wrapper 'py' on 127\.0\.0\.1:\d+", out), out
    assert "6 calls issued in" in out, out
    assert "final: py(cpp:py(cpp:py(cpp:hello)))\n" in out, out
    assert "asker asked cpp: cpp:hi\n" in out, out

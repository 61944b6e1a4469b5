"""The Python examples run (quickly) and print what they promise."""
import os
import subprocess
import sys

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "python")


def run(script, *args):
    r = subprocess.run([sys.executable, os.path.join(EXAMPLES, script), *args], capture_output=True,
                       text=True, timeout=120, env=dict(os.environ, AGENTD_PLUGIN_DIR=os.environ["AGENTD_TEST_PLUGIN_DIR"]))
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_tutorial_all_three_modes(shared_server):
    out = run("tutorial.py", "--agents", "5", "--sleep-ms", "300",
              "--connect", f"{shared_server.host}:{shared_server.port}")
    assert "local, sequential" in out and "child mode, distributed" in out
    assert f"independent {shared_server.host}:{shared_server.port}, distributed" in out
    assert out.count("(Answer from W4)") == 3
    speedup = float(out.split("speed-up of distributed over sequential: ")[1].split("x")[0])
    assert speedup > 1.5


def test_dialog():
    out = run("dialog.py", "--rounds", "2")
    assert "Alice on 127.0.0.1:" in out and "Round limit reached after 2 rounds." in out
    assert "Alice: " in out and "Bob: " in out and "model calls" in out

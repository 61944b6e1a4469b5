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


def test_bench_python_rows_run():
    """The W1/W2 Python driver runs (its pass/fail is the bench's business, not a test's)."""
    script = os.path.join(os.path.dirname(__file__), "..", "..", "apps", "agentd-bench", "python_rows.py")
    build = os.path.dirname(os.environ["AGENTD_TEST_PLUGIN_DIR"])
    r = subprocess.run([sys.executable, script, "--quick", "--bench", os.path.join(build, "bin", "agentd-bench"),
                        "--plugin-dir", os.environ["AGENTD_TEST_PLUGIN_DIR"]],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode in (0, 1), r.stderr
    assert "reply().get() p50" in r.stdout and "replies in flight" in r.stdout

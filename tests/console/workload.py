#!/usr/bin/env python3
"""The work the console browser test looks at, done through the Python client (apps/python).

    workload.py A_HOST:PORT B_HOST:PORT

Two as_server processes (A and B) with the echo and dialog plugins and the model configs `echo`
and `echo-slow` (console.test.js starts them). It makes the agents below, runs a program whose
placeholders go from A to B, and prints one JSON line describing what it made, which the test
checks the console against:

- planner (A, DialogAgent on echo-slow) and reviewer (B, DialogAgent on echo): ROUNDS rounds of
  reviewer(planner(x)); each reviewer call consumes a placeholder produced on the other server,
  so the timeline has producer -> consumer links.
- hostile (A, DialogAgent on echo): a name and messages made of markup and script; its reply (the
  echo model repeats it) goes on to reviewer too. The console must show them as text.
- chatty (B, DialogAgent on echo-slow): the agent the test sends a message from the page to.
- worker-00 .. worker-11 (EchoAgent, alternating A and B): worker-i gets (5 i) mod 12 calls, all
  different and in neither the order of the ids nor its reverse, so sorting by calls has one
  right order and it differs from the default (by id) both ways.
- flaky (B, FlakyAgent): one failed call.
- pinger (A, EchoAgent): no calls here; the test calls it to see the live numbers move.
- tooler (A, AsyncToolAgent): one call that calls the MCP tool faults/echo, which its span shows.
"""
import json
import sys

import agentd
from agentd import Msg

HOSTILE_NAME = '<img src=x onerror="window.__pwned=1">'
HOSTILE_TEXT = '<script>window.__pwned=1</script> and <img src=x onerror="window.__pwned=1"> & <b>bold</b>'
ROUNDS = 3
WORKERS = 12


def worker_calls(i):
    return (5 * i) % WORKERS


def connect(address):
    host, port = address.rsplit(":", 1)
    return agentd.Client.connect(host, int(port))


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: workload.py A_HOST:PORT B_HOST:PORT")
    a, b = connect(sys.argv[1]), connect(sys.argv[2])

    planner = a.create_agent("DialogAgent", "Planner",
                             {"model_config_name": "echo-slow", "sys_prompt": "You plan."}, id="planner")
    reviewer = b.create_agent("DialogAgent", "Reviewer", {"model_config_name": "echo"}, id="reviewer")
    hostile = a.create_agent("DialogAgent", HOSTILE_NAME, {"model_config_name": "echo"}, id="hostile")
    b.create_agent("DialogAgent", "Chatty", {"model_config_name": "echo-slow"}, id="chatty")
    flaky = b.create_agent("FlakyAgent", "Flaky", id="flaky")
    a.create_agent("EchoAgent", "Pinger", id="pinger")
    tooler = a.create_agent("AsyncToolAgent", "Tooler", id="tooler")
    workers = []
    for i in range(WORKERS):
        server = a if i % 2 == 0 else b
        workers.append(server.create_agent("EchoAgent", f"Worker {i:02d}", id=f"worker-{i:02d}"))

    # The program: B's reviewer consumes A's planner placeholders (passed on, not awaited).
    for r in range(ROUNDS):
        reviewer(planner(Msg("user", f"plan step {r}: book the train", "user"))).get()
    reviewer(hostile(Msg(HOSTILE_NAME, HOSTILE_TEXT, "user"))).get()

    for i, w in enumerate(workers):
        pending = [w(Msg("user", f"job {j} for worker {i}", "user")) for j in range(worker_calls(i))]
        for p in pending:
            p.get()
    tooler(Msg("user", {"tool": "faults/echo", "arguments": {"text": "hello tools"}}, "user")).get()
    try:
        flaky(Msg("user", "fail", "user")).get()
        sys.exit("workload.py: FlakyAgent did not fail on 'fail'")
    except agentd.Error:
        pass

    print(json.dumps({
        "servers": [sys.argv[1], sys.argv[2]],
        "agents": {
            "planner": sys.argv[1], "reviewer": sys.argv[2], "hostile": sys.argv[1],
            "chatty": sys.argv[2], "flaky": sys.argv[2], "pinger": sys.argv[1], "tooler": sys.argv[1],
            **{f"worker-{i:02d}": sys.argv[1 + i % 2] for i in range(WORKERS)},
        },
        "worker_calls": {f"worker-{i:02d}": worker_calls(i) for i in range(WORKERS)},
        "rounds": ROUNDS,
        "hostile_name": HOSTILE_NAME,
        "hostile_text": HOSTILE_TEXT,
        "model_configs": ["echo", "echo-slow"],
    }), flush=True)


if __name__ == "__main__":
    main()

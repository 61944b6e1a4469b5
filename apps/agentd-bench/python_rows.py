#!/usr/bin/env python3
"""agentd-bench's W1 and W2 with the Python client, beside the C++ client's rows from one run.

Starts one as_server child (echo_agent plugin), runs agentd-bench --workloads W1,W2 --json
against it (the C++ rows), then the same workloads through the `agentd` Python module, and
prints both with the targets of issue 13: Python reply().get() p50 within 1.3x of C++, Python
throughput at least 0.5x of C++.

    PYTHONPATH=build/python python3 apps/agentd-bench/python_rows.py [--quick] [--repeat N]
"""
import argparse
import json
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import time

import agentd
from agentd import Msg


def percentile(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def w1(agent, calls, payload):
    msg = Msg("bench", "x" * payload)
    for _ in range(50):
        agent.call("ping")
    ping = []
    for _ in range(calls):
        t0 = time.perf_counter()
        assert agent.call("ping") == "pong"
        ping.append((time.perf_counter() - t0) * 1e6)
    for _ in range(50):
        agent.reply(msg).get()
    reply = []
    for _ in range(calls):
        t0 = time.perf_counter()
        m = agent.reply(msg).get()
        reply.append((time.perf_counter() - t0) * 1e6)
        assert m.content == msg.content
    return {'call("ping") p50': percentile(ping, 50), 'call("ping") p99': percentile(ping, 99),
            "reply().get() p50": percentile(reply, 50), "reply().get() p99": percentile(reply, 99)}


def w2(agents, replies, payload, window):
    msg = Msg("bench", "x" * payload)
    t0 = time.perf_counter()
    for start in range(0, replies, window):
        inflight = [agents[i % len(agents)].reply(msg) for i in range(start, min(replies, start + window))]
        for p in inflight:
            assert p.get().content == msg.content
    return replies / (time.perf_counter() - t0)


def main():
    here = os.path.dirname(os.path.abspath(agentd.__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bench", default=os.path.normpath(os.path.join(here, "..", "..", "bin", "agentd-bench")),
                    help="the agentd-bench binary (default: the build tree's)")
    ap.add_argument("--plugin-dir", default=os.path.normpath(os.path.join(here, "..", "..", "plugins")))
    ap.add_argument("--quick", action="store_true", help="small sizes (200 calls, 300 replies), 1 repeat")
    ap.add_argument("--repeat", type=int)
    ap.add_argument("--payload", type=int, default=64)
    o = ap.parse_args()
    calls, replies = (200, 300) if o.quick else (2000, 4000)
    repeat = o.repeat or (1 if o.quick else 3)

    # The child requires a token; the C++ bench run against it logs in with the same one.
    secret_dir = tempfile.TemporaryDirectory()
    token_file = os.path.join(secret_dir.name, "token")
    token = secrets.token_hex(32)
    with os.fdopen(os.open(token_file, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
        f.write(token + "\n")
    with secret_dir, agentd.Client.spawn_child(plugins=[os.path.join(o.plugin_dir, "libecho_agent.so")],
                                            extra_args=["--auth-token-file", token_file],
                                            token=token) as c:
        window = max(1, c.info().max_pool_size // 2)
        cpp = subprocess.run([o.bench, "--server", c.address, "--token-file", token_file,
                              "--workloads", "W1,W2", "--json",
                              "--repeat", str(repeat), "--payload", str(o.payload),
                              "--calls", str(calls), "--replies", str(replies)],
                             capture_output=True, text=True, check=True)
        cpp_rows = {(r["workload"], r["metric"]): r["agentd"]["median"] for r in json.loads(cpp.stdout)["rows"]}

        agent = c.create_agent("EchoAgent", "bench-py-w1")
        agents = c.create_agents("EchoAgent", 10, name_prefix="bench-py-w2-")
        lat = [w1(agent, calls, o.payload) for _ in range(repeat)]
        thr = [w2(agents, replies, o.payload, window) for _ in range(repeat)]
        c.delete_all_agents()

    w2_metric = next(m for (w, m) in cpp_rows if w == "W2")
    rows = [("W1", m, "us", statistics.median(x[m] for x in lat), cpp_rows[("W1", m)]) for m in lat[0]]
    rows.append(("W2", w2_metric, "replies/s", statistics.median(thr), cpp_rows[("W2", w2_metric)]))
    print(f"{'workload':<4} {'metric':<38} {'unit':<10} {'Python':>10} {'C++':>10} {'Py/C++':>7}  target")
    ok = True
    for w, m, unit, py, cc in rows:
        ratio = py / cc
        target = ""
        if m == "reply().get() p50":
            target = "<= 1.3x " + ("pass" if ratio <= 1.3 else "FAIL")
            ok &= ratio <= 1.3
        elif w == "W2":
            target = ">= 0.5x " + ("pass" if ratio >= 0.5 else "FAIL")
            ok &= ratio >= 0.5
        print(f"{w:<8} {m:<38} {unit:<10} {py:>10.1f} {cc:>10.1f} {ratio:>7.2f}  {target}")
    print(f"({repeat} repeat{'s' if repeat != 1 else ''}, medians; payload {o.payload} bytes; one child server)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

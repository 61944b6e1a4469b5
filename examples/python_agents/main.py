#!/usr/bin/env python3
"""AgentScope's distributed tutorial, with the web agent written in Python (web_agent.py).

The program is AgentScope's: make the agents, ask each one about its page, print the answers.
Only the line that makes the agents differs between the three modes:

    local        WebAgent(f"W{i}")                              in this process, one after another
    child        WebAgent(f"W{i}").to_dist()                    on an as_server child started for it
    independent  WebAgent(f"W{i}").to_dist(host=H, port=P)     on a running as_server

From the repository root, with the build tree:

    PYTHONPATH=build/python python3 examples/python_agents/main.py              # local, then child
    build/bin/as_server --agent-dir examples/python_agents &                   # port 12310
    PYTHONPATH=build/python python3 examples/python_agents/main.py --mode independent

as_server imports every *.py in this folder (this file too), so the program itself runs only
under `if __name__ == "__main__"`.
"""
import argparse
import sys
import time

import agentd
from agentd import Msg

from web_agent import WebAgent

URLS = [
    "https://agentscope.io",
    "https://github.com/modelscope/agentscope",
    "https://docs.python.org/3/library/asyncio.html",
    "https://www.debian.org/releases/bookworm/",
    "https://isocpp.org/std/the-standard",
]
QUERY = "What is this page about?"


def run(mode, n, timeout, host, port):
    """Makes n web agents in `mode`, asks each one about its page, prints the answers and times."""
    init_start = time.monotonic()
    if mode == "local":
        agents = [WebAgent(f"W{i}", timeout=timeout) for i in range(n)]
    elif mode == "child":
        agents = [WebAgent(f"W{i}", timeout=timeout).to_dist() for i in range(n)]
    else:
        agents = [WebAgent(f"W{i}", timeout=timeout).to_dist(host=host, port=port) for i in range(n)]
    init_end = time.monotonic()

    # From here on the program is the same in every mode. Locally each reply() runs at once and
    # returns the Msg; distributed it returns a placeholder at once, and reading .content waits.
    results = []
    for i in range(n):
        question = Msg(name="system", role="system", content={"url": URLS[i % len(URLS)], "query": QUERY})
        results.append(agents[i].reply(question))
    for result in results:
        print(f"  {result.content}")
    run_end = time.monotonic()

    print(f"{mode:<12} init {n} agents: {init_end - init_start:6.3f} s   run: {run_end - init_end:6.3f} s",
          flush=True)
    return run_end - init_end


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mode", default="local,child",
                    help="local, child or independent; several, comma-separated, run in turn (default local,child)")
    ap.add_argument("--agents", type=int, default=5)
    ap.add_argument("--timeout", type=float, default=2.0, help="seconds each page takes to fetch (default 2)")
    ap.add_argument("--connect", default="127.0.0.1:12310", metavar="HOST:PORT",
                    help="the as_server of independent mode (default 127.0.0.1:12310, as_server's default)")
    o = ap.parse_args()
    host, _, port = o.connect.rpartition(":")
    modes = o.mode.split(",")
    for mode in modes:
        if mode not in ("local", "child", "independent"):
            ap.error(f"unknown mode {mode!r} (local, child, independent)")

    times = {}
    try:
        for mode in modes:
            times[mode] = run(mode, o.agents, o.timeout, host, int(port))
    except agentd.Error as e:
        sys.exit(f"main.py: {e} (code {e.code})")
    distributed = [t for m, t in times.items() if m != "local"]
    if "local" in times and distributed:
        print(f"speed-up of distributed over local: {times['local'] / min(distributed):.1f}x")


if __name__ == "__main__":
    main()

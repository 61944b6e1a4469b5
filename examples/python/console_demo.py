#!/usr/bin/env python3
"""Something for the console to show: a program that keeps two servers busy for a while.

    agentctl up 2 --gateway 127.0.0.1:8080 --gateway-arg=--console-send
    PYTHONPATH=build/python python3 examples/python/console_demo.py --seconds 120
    # open http://127.0.0.1:8080/console

Without addresses it works on the servers `agentctl ps` lists (the first two). On them it makes a
planner (server 1) and a reviewer (server 2), dialog agents on the built-in echo model, and a
dozen echo workers spread over both; then, until --seconds have passed, each round passes the
planner's placeholder straight on to the reviewer (the console's Calls view draws that arrow
across the servers), keeps the workers busy, and now and then makes a call fail. Ctrl-C stops it;
`agentctl down` stops the servers.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import time

import agentd
from agentd import Msg


def servers_from_agentctl():
    """The addresses of the local servers `agentctl ps --json` lists."""
    here = os.path.dirname(os.path.abspath(__file__))
    agentctl = shutil.which("agentctl") or os.path.join(here, "..", "..", "build", "bin", "agentctl")
    try:
        out = subprocess.run([agentctl, "ps", "--json"], check=True, capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        sys.exit(f"console_demo.py: cannot ask agentctl which servers run ({e}); "
                 "start them with `agentctl up 2` or name them: console_demo.py HOST:PORT HOST:PORT")
    return [s["address"] for s in json.loads(out).get("servers", []) if s.get("state", "up") != "dead"]


def connect(address):
    host, port = address.rsplit(":", 1)
    return agentd.Client.connect(host, int(port))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("servers", nargs="*", metavar="HOST:PORT", help="default: those `agentctl ps` lists")
    ap.add_argument("--seconds", type=float, default=60, help="how long to keep working (default 60)")
    args = ap.parse_args()
    addresses = args.servers or servers_from_agentctl()
    if not addresses:
        sys.exit("console_demo.py: no servers: start them with `agentctl up 2`, or name them")
    clients = [connect(a) for a in addresses[:2]]
    first, second = clients[0], clients[-1]

    planner = first.create_agent("DialogAgent", "Planner", {"model_config_name": "echo"})
    reviewer = second.create_agent("DialogAgent", "Reviewer", {"model_config_name": "echo"})
    flaky = second.create_agent("FlakyAgent", "Flaky")
    workers = [clients[i % len(clients)].create_agent("EchoAgent", f"Worker {i:02d}") for i in range(12)]
    print(f"console_demo.py: working on {', '.join(addresses[:2])} for {args.seconds:g} s "
          f"(planner {planner.id}, reviewer {reviewer.id})", flush=True)

    deadline = time.monotonic() + args.seconds
    rounds = 0
    try:
        while time.monotonic() < deadline:
            review = reviewer(planner(Msg("user", f"round {rounds}: plan the next step", "user")))
            pending = [w(Msg("user", f"job {rounds}.{i}", "user"))
                       for i, w in enumerate(workers) for _ in range(1 + (i * rounds) % 4)]
            for p in pending:
                p.get()
            review.get()
            if rounds % 5 == 4:
                try:
                    flaky(Msg("user", "fail", "user")).get()
                except agentd.Error:
                    pass
            rounds += 1
            time.sleep(0.2)
    except KeyboardInterrupt:
        pass
    print(f"console_demo.py: {rounds} round(s); the agents stay for the console (agentctl down ends all)")


if __name__ == "__main__":
    main()

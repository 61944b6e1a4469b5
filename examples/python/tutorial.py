#!/usr/bin/env python3
"""AgentScope's distributed tutorial, from Python on agentd: five web agents, each reply
"fetches a page" (sleeps sleep_ms). Run one after another in this process (local mode), then
distributed: every reply issued at once as a placeholder, then read (child mode, and
independent mode against a running as_server with --connect).

    PYTHONPATH=build/python python3 examples/python/tutorial.py --sleep-ms 1000
    build/bin/as_server --port 12001 --plugin-dir build/plugins &    # independent mode too:
    PYTHONPATH=build/python python3 examples/python/tutorial.py --connect 127.0.0.1:12001
"""
import argparse
import glob
import os
import sys
import time

import agentd
from agentd import Msg


def find_web_agent(plugin_dir):
    """libweb_agent.so: --plugin-dir, $AGENTD_PLUGIN_DIR, the build tree, then installed."""
    here = os.path.dirname(agentd.__file__)
    dirs = [plugin_dir, os.environ.get("AGENTD_PLUGIN_DIR"), os.path.join(here, "..", "..", "plugins")]
    dirs += glob.glob("/usr/lib/*/agentd/plugins") + glob.glob("/usr/local/lib*/agentd/plugins")
    dirs += glob.glob("/usr/local/lib/*/agentd/plugins")
    for d in filter(None, dirs):
        path = os.path.join(d, "libweb_agent.so")
        if os.path.isfile(path):
            return os.path.abspath(path)
    sys.exit("tutorial: libweb_agent.so not found (pass --plugin-dir)")


def run(label, client, agents, sleep_ms, sequential):
    """Creates the agents, asks each one question, prints how long it took."""
    with client:
        t0 = time.monotonic()
        web = [client.create_agent("WebAgent", f"W{i}", {"sleep_ms": sleep_ms}) for i in range(agents)]
        init = time.monotonic() - t0

        t1 = time.monotonic()
        if sequential:
            # Plain code: reading .content waits, so each reply waits for the one before.
            answers = [w(Msg("system", "page_1")).content for w in web]
        else:
            # Ask everyone first (each call returns a placeholder at once), then read.
            results = [w(Msg("system", "page_1")) for w in web]
            answers = [r.content for r in results]
        run_time = time.monotonic() - t1
    print(f"{label:<34} init {agents} agents: {init:6.3f} s   run: {run_time:6.3f} s   ({answers[-1]})",
          flush=True)
    return run_time


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--agents", type=int, default=5)
    ap.add_argument("--sleep-ms", type=int, default=5000, help="how long each reply takes")
    ap.add_argument("--plugin-dir", help="where libweb_agent.so is")
    ap.add_argument("--connect", metavar="HOST:PORT", help="also run on this as_server (independent mode)")
    ap.add_argument("--modes", default="", help="comma-separated: local,child,independent")
    o = ap.parse_args()
    modes = o.modes.split(",") if o.modes else ["local", "child"] + (["independent"] if o.connect else [])
    plugin = find_web_agent(o.plugin_dir)

    sequential = distributed = None
    try:
        for mode in modes:
            if mode == "local":
                sequential = run("local, sequential", agentd.Client.local(plugins=[plugin]),
                                 o.agents, o.sleep_ms, True)
            elif mode == "child":
                t = run("child mode, distributed", agentd.Client.spawn_child(plugins=[plugin]),
                        o.agents, o.sleep_ms, False)
                distributed = min(t, distributed or t)
            elif mode == "independent":
                if not o.connect:
                    ap.error("independent mode needs --connect HOST:PORT")
                host, port = o.connect.rsplit(":", 1)
                t = run(f"independent {o.connect}, distributed", agentd.Client.connect(host, int(port)),
                        o.agents, o.sleep_ms, False)
                distributed = min(t, distributed or t)
            else:
                ap.error(f"unknown mode {mode!r} (local, child, independent)")
    except agentd.Error as e:
        sys.exit(f"tutorial: {e} (code {e.code})")
    if sequential and distributed:
        print(f"speed-up of distributed over sequential: {sequential / distributed:.1f}x")


if __name__ == "__main__":
    main()

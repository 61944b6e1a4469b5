#!/usr/bin/env python3
"""Two dialog agents on two servers talking, in AgentScope's conversation loop:

    x = None
    while x is None or x.content != "exit":
        x = alice(x)
        x = bob(x)

Each agent lives on its own as_server child process; Bob's call gets Alice's answer as a
placeholder and his server fetches it from hers directly. Both replies are streamed: their
words are printed as they come (reply_stream, chunks()). The loop is also bounded by --rounds,
so with the built-in echo model (which only repeats what it hears, no network) it ends too.

    PYTHONPATH=build/python python3 examples/python/dialog.py --rounds 2
"""
import argparse
import glob
import os
import sys

import agentd
from agentd import Msg

HERE = os.path.dirname(os.path.abspath(__file__))


def find(name, dirs):
    for d in filter(None, dirs):
        path = os.path.join(d, name)
        if os.path.isfile(path):
            return os.path.abspath(path)
    sys.exit(f"dialog: {name} not found (see --help)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model-config-path", help="model configs (default: the source tree's config/models.yaml)")
    ap.add_argument("--model-config-name", default="echo", help="the config both agents use (default: echo)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--message", default="Hi! Shall we plan a trip together? Say exit when you are done.")
    ap.add_argument("--plugin-dir", help="where libdialog_agents.so is")
    o = ap.parse_args()
    pkg = os.path.dirname(agentd.__file__)
    plugin = find("libdialog_agents.so",
                  [o.plugin_dir, os.environ.get("AGENTD_PLUGIN_DIR"), os.path.join(pkg, "..", "..", "plugins")]
                  + glob.glob("/usr/lib/*/agentd/plugins") + glob.glob("/usr/local/lib*/agentd/plugins"))
    config = o.model_config_path or find("models.yaml", [os.path.join(HERE, "..", "..", "config"),
                                                         "/etc/agentd", "/usr/local/etc/agentd"])

    try:
        with agentd.Client.spawn_child(plugins=[plugin], model_config_path=config) as server1, \
             agentd.Client.spawn_child(plugins=[plugin], model_config_path=config) as server2:
            alice = server1.create_agent("DialogAgent", "Alice", {
                "sys_prompt": "You are Alice, a cheerful travel planner. Keep answers short.",
                "model_config_name": o.model_config_name})
            bob = server2.create_agent("DialogAgent", "Bob", {
                "sys_prompt": "You are Bob, a careful budget keeper. Say exit when the plan is done.",
                "model_config_name": o.model_config_name})
            print(f"Alice on {server1.address}, Bob on {server2.address}, model config '{o.model_config_name}'\n")

            x = Msg("user", o.message, role="user")
            print(f"{x.name}: {x.content}")
            for round_ in range(1, o.rounds + 1):
                a = alice.reply_stream(x)  # returns at once; Alice's words stream in
                b = bob.reply_stream(a)    # Bob's server fetches Alice's whole answer from hers
                for name, p in (("Alice", a), ("Bob", b)):
                    print(f"{name}: ", end="", flush=True)
                    for chunk in p.chunks():  # printed as the model produces them
                        print(chunk, end="", flush=True)
                    print()
                x = b.get()
                if x.content == "exit":
                    break
            print(f"\n{'Bob said exit' if x.content == 'exit' else 'Round limit reached'} after {round_} "
                  f"round{'s' if round_ != 1 else ''}.")
            for agent in (alice, bob):
                usage = agent.call("usage")
                print(f"{agent.name}: {usage['calls']} model calls, {usage['total_tokens']} tokens")
    except agentd.Error as e:
        sys.exit(f"dialog: {e} (code {e.code})")


if __name__ == "__main__":
    main()

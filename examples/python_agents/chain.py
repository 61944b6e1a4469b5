#!/usr/bin/env python3
"""A chain of C++ and Python agents across two servers, passing placeholders without waiting.

Two as_server children each load the C++ example plugin libecho_agent.so and this folder's
Python agents. A C++ EchoAgent on the first ("cpp", prefix "cpp:") and a Python Wrapper on the
second ("py", "x" -> "py(x)") take turns:

    x = Msg("user", "hello")
    for _ in range(rounds):
        x = cpp(x)     # a placeholder, at once
        x = py(x)      # handed on unread: server 2 fetches cpp's answer from server 1 itself

Nothing waits until the last line reads x.content: "py(cpp:py(cpp:py(cpp:hello)))" for three
rounds. Then an asynchronous Python agent on server 2 (Asker) calls the C++ agent on server 1
by reference and awaits its placeholder.

From the repository root, with the build tree:

    PYTHONPATH=build/python python3 examples/python_agents/chain.py

as_server imports every *.py in this folder (this file too), so the program itself runs only
under `if __name__ == "__main__"`.
"""
import argparse
import os
import sys
import time

import agentd
from agentd import Msg

from chain_agents import Asker, Wrapper

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--message", default="hello")
    ap.add_argument("--plugin-dir", default=os.environ.get("AGENTD_PLUGIN_DIR"),
                    help="where libecho_agent.so is (default: $AGENTD_PLUGIN_DIR, else the plugins "
                         "built or installed beside libagentd)")
    o = ap.parse_args()
    # Only this plugin: a whole plugin dir of the examples would also bring C++ classes named
    # like this folder's Python ones (WebAgent, DialogAgent), which the server refuses.
    echo = os.path.join(o.plugin_dir, "libecho_agent.so") if o.plugin_dir else "libecho_agent.so"

    try:
        with agentd.Client.spawn_child(plugins=[echo], agent_dirs=[HERE]) as server1, \
             agentd.Client.spawn_child(plugins=[echo], agent_dirs=[HERE]) as server2:
            cpp = server1.create_agent("EchoAgent", "cpp", {"prefix": "cpp:"})  # C++, by class name
            py = Wrapper("py").to_dist(client=server2)                           # Python, by to_dist
            print(f"C++ EchoAgent 'cpp' on {server1.address}, Python Wrapper 'py' on {server2.address}")

            x = Msg("user", o.message, role="user")
            t0 = time.monotonic()
            for _ in range(o.rounds):
                x = cpp(x)
                x = py(x)
            issued = time.monotonic() - t0
            print(f"{2 * o.rounds} calls issued in {issued * 1000:.1f} ms, none waited for")
            t1 = time.monotonic()
            print(f"final: {x.content}")  # the first and only wait
            print(f"answered {(time.monotonic() - t1) * 1000:.1f} ms later, by {x.name} (origin {x.origin})")

            # An asynchronous Python agent calling the C++ agent on the other server by reference.
            asker = Asker("asker", target=cpp).to_dist(client=server2)
            print(asker(Msg("user", "hi", role="user")).content)
    except agentd.Error as e:
        sys.exit(f"chain.py: {e} (code {e.code})")


if __name__ == "__main__":
    main()

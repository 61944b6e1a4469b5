#!/usr/bin/env python3
"""A conversation with the Python DialogAgent (dialog_agent.py) on a model, in AgentScope's loop:

    x = user(x); x = dialog_agent(x)   # until the user says "exit"

The agent runs on an as_server child started for it with a model config file; its answers are
streamed (reply_stream) and printed as the model produces them. Without --model-config-path the
server's built-in `echo` model answers (it repeats what it hears; no network).

From the repository root, with the build tree:

    PYTHONPATH=build/python python3 examples/python_agents/conversation.py --say "Plan a day in Paris" --say exit
    PYTHONPATH=build/python python3 examples/python_agents/conversation.py \\
        --model-config-path my_models.yaml --model-config-name gpt     # type, "exit" to end

as_server imports every *.py in this folder (this file too), so the program itself runs only
under `if __name__ == "__main__"`.
"""
import argparse
import os
import sys

import agentd
from agentd import Msg

from dialog_agent import DialogAgent

HERE = os.path.dirname(os.path.abspath(__file__))


def user_lines(said):
    """The user's turns: the --say texts, else lines typed on stdin (end: "exit" or end of input)."""
    if said:
        yield from said
        return
    while True:
        try:
            yield input("You: ")
        except EOFError:
            return


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model-config-path", help="the server's model configs (default: none, the built-in echo)")
    ap.add_argument("--model-config-name", default="echo", help="the config the agent uses (default: echo)")
    ap.add_argument("--sys-prompt", default="You are Alice, a cheerful travel planner. Keep answers short.")
    ap.add_argument("--say", action="append", default=[], metavar="TEXT",
                    help="what the user says (repeatable); without it, read lines from stdin")
    o = ap.parse_args()

    try:
        # A child server for this program, loading this folder's agents and the model configs.
        with agentd.Client.spawn_child(agent_dirs=[HERE], model_config_path=o.model_config_path or "") as server:
            # Made in this process's syntax, created on the server by class name; the arguments
            # travel as plain values.
            alice = DialogAgent("Alice", sys_prompt=o.sys_prompt,
                                model_config_name=o.model_config_name).to_dist(client=server)
            print(f"Alice on {server.address}, model config '{o.model_config_name}'", flush=True)
            for line in user_lines(o.say):
                if line.strip() == "exit":
                    break
                x = Msg("user", line, role="user")
                if o.say:
                    print(f"You: {line}")
                p = alice.reply_stream(x)  # returns at once; her words arrive as chunks
                print("Alice: ", end="", flush=True)
                for chunk in p.chunks():
                    print(chunk, end="", flush=True)
                print()
            usage = alice.call("usage")  # a named method of the Python agent
            print(f"Alice: {usage['calls']} model calls, {usage['total_tokens']} tokens, "
                  f"{len(alice.memory())} messages in memory")
    except agentd.Error as e:
        sys.exit(f"conversation.py: {e} (code {e.code})")


if __name__ == "__main__":
    main()

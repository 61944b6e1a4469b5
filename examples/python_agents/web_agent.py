"""The web agent of AgentScope's distributed tutorial, as a Python agent for agentd.

Each reply "fetches" the page named in the question and answers from it. Fetching is a
time.sleep(timeout) here, standing in for a web request: a blocking agent's reply runs on one of
the server's worker threads, and the sleep releases the GIL, so agents on one server fetch in
parallel.

as_server hosts it by class name: `as_server --agent-dir examples/python_agents` imports this
file and registers WebAgent. main.py runs it locally, on a child server and on a running server.
"""
import time

import agentd
from agentd import Msg


class WebAgent(agentd.Agent):
    """Answers a question about a web page; fetching the page takes `timeout` seconds."""

    def __init__(self, name, timeout=5.0, **kwargs):
        # A creation's args arrive as keyword arguments: WebAgent("W0", timeout=0.5) here,
        # `agentctl create WebAgent W0 --args '{"timeout": 0.5}'` on a server.
        super().__init__(name)
        self.timeout = timeout
        self.pages = 0  # this agent's own state: saved and restored with --state-dir

    def get_answer(self, url, query):
        time.sleep(self.timeout)  # "fetching" the page; the GIL is released while it sleeps
        return f"{self.name} read {url}: an answer to {query!r}"

    def reply(self, x=None):
        # The tutorial sends {"url": ..., "query": ...}; `agentctl call W0 URL` sends plain text.
        content = x.content if x is not None else None
        if isinstance(content, dict):
            url, query = content.get("url", ""), content.get("query", "")
        else:
            url, query = str(content or ""), "what is this page about?"
        self.pages += 1
        return Msg(name=self.name, content=self.get_answer(url, query), role="assistant")

    @agentd.method
    def pages_read(self):
        """A named method: ref.call("pages_read"), `agentctl method W0 pages_read`."""
        return self.pages

    def save_state(self):
        return {"pages": self.pages}

    def load_state(self, state):
        self.pages = state.get("pages", 0)

"""`usage` and the trace id through agentd-gateway, against real processes: a fake
OpenAI-compatible model server (tests/unit/models/fake_model_server.py), an as_server whose
DialogAgent asks it (examples/dialog, --model-config-path), and a gateway in front. The tokens the
model server reports arrive in the completion's `usage`; a request's W3C traceparent (or a
generated id) reaches the call's trace span, the gateway's log line and the X-Trace-Id header."""
import json
import os
import re
import subprocess
import sys
import urllib.request

import pytest

from conftest import AGENTCTL, AS_SERVER, Gateway, Process
from http_helpers import chat, request, sse_events

DIALOG_PLUGIN = os.environ["AGENTD_DIALOG_PLUGIN"]
FAKE_MODEL_SERVER = os.path.join(os.path.dirname(__file__), "..", "unit", "models", "fake_model_server.py")
KEY = "gateway-usage"


def words(text):
    return len(text.split())


class ModelServer:
    """fake_model_server.py on a free port; it exits when its stdin closes."""

    def __init__(self):
        self.proc = subprocess.Popen([sys.executable, FAKE_MODEL_SERVER], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        assert line.startswith("PORT "), f"fake model server printed {line!r}"
        self.base = f"http://127.0.0.1:{int(line.split()[1])}"

    def requests(self, key):
        with urllib.request.urlopen(f"{self.base}/requests/{key}", timeout=10) as r:
            return json.loads(r.read())

    def close(self):
        self.proc.stdin.close()
        self.proc.terminate()
        self.proc.wait(timeout=20)
        self.proc.stdout.close()


@pytest.fixture(scope="module")
def model_stack(tmpdir_session):
    model = ModelServer()
    config = os.path.join(tmpdir_session, "usage-models.yaml")
    with open(config, "w") as f:
        f.write(f"""- config_name: fake
  model_type: openai_chat
  model_name: test-model
  api_key: test-key
  client_args:
    base_url: {model.base}/s/{KEY}/ok/v1
    max_retries: 0
""")
    server = Process([AS_SERVER, "--host", "127.0.0.1", "--port", "0", "--log-level", "warn",
                      "--plugin", DIALOG_PLUGIN, "--model-config-path", config], "as_server ready: listening on ")
    gateway = None
    try:
        for agent_id in ("dialog", "dialog2"):
            subprocess.run([AGENTCTL, "--host", server.host, "--port", str(server.port), "create", "DialogAgent",
                            agent_id, "--id", agent_id, "--args", '{"model_config_name": "fake"}'],
                           check=True, capture_output=True, timeout=60)
        gateway = Gateway(server)
        yield model, server, gateway
    finally:
        if gateway:
            gateway.close()
        server.close()
        model.close()


def expected_usage(model, n):
    """The usage the fake model server answered its n-th request with (its own formula: the words
    of every message in, the words of "echo: <last message>" out)."""
    body = model.requests(KEY)[n]["body"]
    messages = body["messages"]
    prompt = sum(words(m["content"]) for m in messages if isinstance(m.get("content"), str))
    completion = words("echo: " + messages[-1]["content"])
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def spans(server):
    out = subprocess.run([AGENTCTL, "--host", server.host, "--port", str(server.port), "trace", "--json",
                          "--limit", "0"], check=True, capture_output=True, text=True, timeout=60)
    return json.loads(out.stdout)


def test_a_completion_reports_the_model_servers_tokens_in_usage(model_stack):
    model, _, gw = model_stack
    before = len(model.requests(KEY))
    status, _, body = request(gw, "POST", "/v1/chat/completions", chat("dialog", "how many tokens is this"))
    assert status == 200, body
    c = json.loads(body)
    assert c["choices"][0]["message"]["content"] == "echo: how many tokens is this"
    assert len(model.requests(KEY)) == before + 1  # one model call
    usage = expected_usage(model, before)
    assert usage["prompt_tokens"] >= 5 and usage["completion_tokens"] == 6
    assert c["usage"] == usage


def test_a_stream_with_include_usage_ends_with_a_usage_chunk(model_stack):
    model, _, gw = model_stack
    before = len(model.requests(KEY))
    status, _, body = request(gw, "POST", "/v1/chat/completions",
                              chat("dialog2", "stream me please", stream=True,
                                   stream_options={"include_usage": True}))
    assert status == 200, body
    events = sse_events(body)
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    assert text == "echo: stream me please"
    # OpenAI's convention: the last chunk has no choices and carries the usage; no other one does.
    assert chunks[-1]["choices"] == [] and chunks[-1]["object"] == "chat.completion.chunk"
    assert chunks[-1]["usage"] == expected_usage(model, before)
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop"
    assert all("usage" not in c for c in chunks[:-1])

    # Without stream_options, no usage chunk.
    status, _, body = request(gw, "POST", "/v1/chat/completions", chat("dialog2", "again", stream=True))
    chunks = [json.loads(e) for e in sse_events(body)[:-1]]
    assert all(c["choices"] for c in chunks)


def test_an_agent_without_a_model_reports_zero_usage(gateway, token):
    status, _, body = request(gateway, "POST", "/v1/chat/completions", chat("echo", "no model"), token=token)
    assert status == 200, body
    assert json.loads(body)["usage"] == {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
    status, _, body = request(gateway, "POST", "/v1/chat/completions",
                              chat("stream", "a b", stream=True, stream_options={"include_usage": True}),
                              token=token)
    chunks = [json.loads(e) for e in sse_events(body)[:-1]]
    assert chunks[-1]["usage"] == {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}


@pytest.mark.parametrize("options, says", [
    ("yes", "'stream_options' must be an object"),
    ({"include_usage": "yes"}, "include_usage' must be true or false"),
])
def test_bad_stream_options_are_400(gateway, token, options, says):
    status, _, body = request(gateway, "POST", "/v1/chat/completions",
                              chat("stream", "x", stream=True, stream_options=options), token=token)
    assert status == 400
    assert says in json.loads(body)["error"]["message"]
    assert json.loads(body)["error"]["param"] == "stream_options"


def test_stream_options_without_stream_is_400(gateway, token):
    status, _, body = request(gateway, "POST", "/v1/chat/completions",
                              chat("echo", "x", stream_options={"include_usage": True}), token=token)
    assert status == 400
    assert "only allowed with \"stream\": true" in json.loads(body)["error"]["message"]


TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
TRACEPARENT = f"00-{TRACE_ID}-00f067aa0ba902b7-01"


def test_a_requests_traceparent_reaches_the_calls_span_the_log_and_the_answer(model_stack):
    model, server, gw = model_stack
    status, headers, body = request(gw, "POST", "/v1/chat/completions", chat("dialog", "trace this"),
                                    headers={"traceparent": TRACEPARENT})
    assert status == 200, body
    assert headers["X-Trace-Id"] == TRACE_ID
    call_id = json.loads(body)["id"][len("chatcmpl-"):]
    span = next(s for s in spans(server) if s["call_id"] == call_id)
    assert span["trace_id"] == TRACE_ID
    # The span counts the same model use the completion reported.
    usage = json.loads(body)["usage"]
    assert span["model_calls"] == 1
    assert span["prompt_tokens"] == usage["prompt_tokens"]
    assert span["completion_tokens"] == usage["completion_tokens"]
    # The table of agentctl trace shows it too.
    out = subprocess.run([AGENTCTL, "--host", server.host, "--port", str(server.port), "trace"],
                         check=True, capture_output=True, text=True, timeout=60).stdout
    assert "TRACE_ID" in out.splitlines()[0] and TRACE_ID in out

    # A stream too; its header carries the id before any chunk.
    status, headers, body = request(gw, "POST", "/v1/chat/completions", chat("dialog", "trace a stream", stream=True),
                                    headers={"traceparent": TRACEPARENT.replace(TRACE_ID, "a" * 32)})
    assert status == 200 and headers["X-Trace-Id"] == "a" * 32
    assert any(s["trace_id"] == "a" * 32 and s["agent_id"] == "dialog" for s in spans(server))

    lines = [json.loads(l) for l in gw.stderr().splitlines() if l.startswith("{")]
    assert any(l["path"] == "/v1/chat/completions" and l.get("trace_id") == TRACE_ID for l in lines)


@pytest.mark.parametrize("traceparent", [
    None,
    "garbage",
    "00-" + "0" * 32 + "-00f067aa0ba902b7-01",       # all-zero trace-id
    "00-" + TRACE_ID + "-" + "0" * 16 + "-01",       # all-zero parent-id
    "ff-" + TRACE_ID + "-00f067aa0ba902b7-01",       # version ff
    "00-" + TRACE_ID.upper() + "-00f067aa0ba902b7-01",  # upper-case hex
    TRACEPARENT + "-extra",                          # version 00 is exactly 55 characters
])
def test_without_a_valid_traceparent_each_request_gets_a_new_trace_id(gateway, token, traceparent):
    headers = {"traceparent": traceparent} if traceparent else {}
    ids = set()
    for _ in range(2):
        status, h, body = request(gateway, "POST", "/v1/chat/completions", chat("echo", "hi"), token=token,
                                  headers=headers)
        assert status == 200, body
        assert re.fullmatch(r"[0-9a-f]{32}", h["X-Trace-Id"]) and h["X-Trace-Id"] != "0" * 32
        assert h["X-Trace-Id"] != TRACE_ID
        ids.add(h["X-Trace-Id"])
    assert len(ids) == 2


def test_a_later_traceparent_version_with_more_fields_is_accepted(gateway, token):
    status, h, _ = request(gateway, "GET", "/v1/models", token=token,
                           headers={"traceparent": "01-" + TRACE_ID + "-00f067aa0ba902b7-01-future"})
    assert status == 200 and h["X-Trace-Id"] == TRACE_ID
    # Errors carry it too.
    status, h, _ = request(gateway, "POST", "/v1/chat/completions", chat("nobody", "x"), token=token,
                           headers={"traceparent": TRACEPARENT})
    assert status == 404 and h["X-Trace-Id"] == TRACE_ID


def test_an_a2a_messages_call_is_made_in_the_requests_trace(model_stack):
    _, server, gw = model_stack
    trace = "b" * 32
    body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
            "params": {"message": {"role": "ROLE_USER", "messageId": "m-trace", "parts": [{"text": "trace a2a"}]}}}
    status, headers, out = request(gw, "POST", "/a2a/dialog/", body,
                                   headers={"A2A-Version": "1.0", "traceparent": TRACEPARENT.replace(TRACE_ID, trace)})
    assert status == 200, out
    assert headers["X-Trace-Id"] == trace
    assert json.loads(out)["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert any(s["trace_id"] == trace and s["agent_id"] == "dialog" for s in spans(server))

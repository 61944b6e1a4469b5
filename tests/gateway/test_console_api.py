"""The web console's back end on agentd-gateway (/console, /console/api/*), against real as_server
and agentd-gateway processes: the page and its headers, the token, the cluster overview with a
server down, server-side paging of agents, one agent, sending, live ticks, calls, the Chrome
trace export and the model statistics."""
import http.client
import json
import os
import subprocess
import time

import pytest

from conftest import AGENTCTL, AS_SERVER, Gateway, Process, start_server
from http_helpers import chat, error_of, request

DIALOG_PLUGIN = os.environ["AGENTD_DIALOG_PLUGIN"]
ASYNC_PLUGIN = os.environ["AGENTD_ASYNC_PLUGIN"]
# The project's own MCP tool server (stdio; tools echo, fail, ...).
FAULT_SERVER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "mcp", "fault_server.py")
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
       "form-action 'self'; base-uri 'none'; frame-ancestors 'none'")


def api(gw, path, token=None, method="GET", body=None):
    status, headers, out = request(gw, method, "/console/api/" + path, body, token=token)
    return status, headers, out


def ok_json(gw, path, token=None):
    status, _, out = api(gw, path, token)
    assert status == 200, out
    return json.loads(out)


def assert_console_headers(headers):
    assert headers["Content-Security-Policy"] == CSP
    assert headers["X-Content-Type-Options"] == "nosniff"
    assert headers["Referrer-Policy"] == "no-referrer"


def agentctl(server, *args):
    return subprocess.run([AGENTCTL, "--host", server.host, "--port", str(server.port)] + list(args),
                          check=True, capture_output=True, text=True, timeout=60).stdout


def wait_for(fn, what, timeout=20):
    deadline = time.monotonic() + timeout
    while True:
        got = fn()
        if got:
            return got
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


# --- the page, its assets, its headers, the token -------------------------------------------------

def test_the_console_page_is_public_with_security_headers(gateway):
    for path in ("/console", "/console/"):
        status, headers, body = request(gateway, "GET", path)
        assert status == 200, body
        assert headers["Content-Type"].startswith("text/html")
        assert headers["Cache-Control"] == "no-cache" and headers["ETag"]
        assert_console_headers(headers)
        assert b"<html" in body.lower()


def test_an_asset_has_its_content_type_and_a_matching_etag_answers_304(gateway):
    status, headers, _ = request(gateway, "GET", "/console/assets/app.js")
    assert status == 200
    assert headers["Content-Type"].startswith("text/javascript")
    assert_console_headers(headers)
    status, headers2, body = request(gateway, "GET", "/console/assets/app.js",
                                     headers={"If-None-Match": headers["ETag"]})
    assert status == 304 and body == b""
    assert headers2["ETag"] == headers["ETag"]


@pytest.mark.parametrize("path", ["/console/assets/nope.js", "/console/assets/../../etc/passwd", "/console/other"])
def test_an_unknown_console_path_is_404_with_the_headers(gateway, path):
    status, headers, body = request(gateway, "GET", path)
    assert status == 404, body
    assert_console_headers(headers)
    assert error_of(body)["code"] == "not_found"


def test_the_console_api_needs_the_token(gateway, token):
    status, headers, body = api(gateway, "overview")
    assert status == 401
    assert error_of(body)["code"] == "invalid_api_key"
    assert_console_headers(headers)
    assert api(gateway, "overview", token="wrong")[0] == 401
    status, headers, body = api(gateway, "overview", token)
    assert status == 200, body
    assert_console_headers(headers)
    overview = json.loads(body)
    assert overview["gateway"]["auth"] is True and overview["gateway"]["send_enabled"] is False
    assert overview["servers"][0]["up"] is True


def test_no_console_means_no_console_routes(server):
    g = Gateway(server, ["--no-console"])
    try:
        assert request(g, "GET", "/console")[0] == 404
        assert request(g, "GET", "/console/api/overview")[0] == 404
        assert request(g, "GET", "/v1/models")[0] == 200
    finally:
        g.close()


def test_unknown_api_paths_and_wrong_methods_are_refused(gateway, token):
    assert api(gateway, "nope", token)[0] == 404
    assert api(gateway, "overview", token, method="POST", body={})[0] == 405
    assert api(gateway, "agents/echo/send", token, method="GET")[0] == 405


def test_another_sites_page_can_neither_read_the_api_nor_send(gateway, token, open_gateway):
    own = f"http://{gateway.host}:{gateway.port}"
    # The console's own page (same origin, or no Origin at all: a script, curl) is answered.
    assert request(gateway, "GET", "/console/api/overview", token=token, headers={"Origin": own})[0] == 200
    assert request(gateway, "GET", "/console/api/overview", token=token,
                   headers={"Sec-Fetch-Site": "same-origin"})[0] == 200
    # Another site's page, even with the token (a leaked one, or a tokenless gateway), is not.
    for headers in ({"Origin": "https://evil.example"}, {"Sec-Fetch-Site": "cross-site"},
                    {"Origin": "null"}):
        status, hdrs, body = request(gateway, "GET", "/console/api/overview", token=token, headers=headers)
        assert status == 403 and error_of(body)["code"] == "cross_site_request", (headers, body)
        assert_console_headers(hdrs)
    # A tokenless gateway answers only for its own addresses, not for a name rebound to it.
    assert request(open_gateway, "GET", "/console/api/overview",
                   headers={"Host": f"localhost:{open_gateway.port}"})[0] == 200
    status, _, body = request(open_gateway, "GET", "/console/api/overview",
                              headers={"Host": f"rebound.example:{open_gateway.port}"})
    assert status == 403 and "DNS rebinding" in error_of(body)["message"]
    # The page itself stays public everywhere.
    assert request(open_gateway, "GET", "/console", headers={"Host": "rebound.example"})[0] == 200


# --- the overview of a cluster with a server down ------------------------------------------------

def test_the_overview_reports_a_server_that_is_down_with_its_reason():
    a, b = start_server(), start_server()
    g = Gateway(cluster=f"{a.host}:{a.port},{b.host}:{b.port}")
    try:
        first = ok_json(g, "overview")
        assert [s["up"] for s in first["servers"]] == [True, True]
        assert first["totals"]["servers_up"] == 2
        assert first["totals"]["agents"] == sum(s["agents"] for s in first["servers"]) >= 8
        b.close()
        down_address = f"{b.host}:{b.port}"

        def b_down():
            o = ok_json(g, "overview")
            s = [x for x in o["servers"] if x["address"] == down_address]
            return o if s and not s[0]["up"] else None
        o = wait_for(b_down, "the stopped server to be reported down")
        down = [x for x in o["servers"] if x["address"] == down_address][0]
        assert down["down_reason"], down
        assert down["agents"] == 0 and down["server_id"] == ""
        up = [x for x in o["servers"] if x["address"] != down_address][0]
        assert up["up"] and up["server_id"] and up["version"]
        assert o["totals"]["servers"] == 2 and o["totals"]["servers_up"] == 1
        assert o["totals"]["agents"] == up["agents"]
        # The agents view still answers with the members up, and says which one it left out.
        page = ok_json(g, "agents?limit=1000")
        assert page["total"] == up["agents"]
        assert page["servers_down"] == [down_address] and page["max_depth"] == 10000
        assert {r["server"] for r in page["agents"]} == {up["address"]}
    finally:
        g.close()
        a.close()
        b.close()


def test_a_single_server_that_stops_is_reported_down_within_seconds_and_up_again():
    s = start_server()
    address = f"{s.host}:{s.port}"
    g = Gateway(s)
    try:
        assert ok_json(g, "overview")["servers"][0]["up"]
        s.close()
        started = time.monotonic()

        def down():
            o = ok_json(g, "overview")
            return o if not o["servers"][0]["up"] else None
        o = wait_for(down, "the stopped server to be reported down")
        # Not after the requests' connection gives up on it (--reply-timeout): at a reading.
        assert time.monotonic() - started < 10
        assert o["servers"][0]["address"] == address and o["servers"][0]["down_reason"]
        assert o["totals"]["servers_up"] == 0
        # Started again on its port: up at a later reading.
        s = start_server(port=int(address.rsplit(":", 1)[1]))
        wait_for(lambda: ok_json(g, "overview")["servers"][0]["up"] or None, "the server to be up again")
    finally:
        g.close()
        s.close()


def test_a_clusters_pages_in_descending_order_have_every_agent_once():
    a, b = start_server(), start_server()
    g = Gateway(cluster=f"{a.host}:{a.port},{b.host}:{b.port}")
    try:
        for s in (a, b):
            agentctl(s, "create", "EchoAgent", "tie", "--count", "20")
        total = ok_json(g, "agents?limit=1")["total"]
        # Most agents tie at 0 calls: the merge must order ties as each member did (by id). The
        # fixture's agents have the same ids on both servers: an agent is its server and id.
        for sort in ("calls", "errors", "tokens", "id"):
            seen = []
            for offset in range(0, total, 7):
                page = ok_json(g, f"agents?sort={sort}&order=desc&offset={offset}&limit=7")
                seen += [(r["server"], r["id"]) for r in page["agents"]]
            assert len(seen) == total and len(set(seen)) == total, sort
    finally:
        g.close()
        a.close()
        b.close()


# --- agents: paging, filters, sorting, bad parameters --------------------------------------------

@pytest.fixture(scope="module")
def crowd():
    """A server of its own with 250 EchoAgents named bulk0..bulk249 and 50 StreamEchoAgents."""
    s = Process([AS_SERVER, "--host", "127.0.0.1", "--port", "0", "--log-level", "warn",
                 "--plugin", os.environ["AGENTD_ECHO_PLUGIN"]], "as_server ready: listening on ")
    g = None
    try:
        agentctl(s, "create", "EchoAgent", "bulk", "--count", "250")
        agentctl(s, "create", "StreamEchoAgent", "other", "--count", "50")
        g = Gateway(s)
        yield s, g
    finally:
        if g:
            g.close()
        s.close()


def test_agents_are_paged_by_the_server_and_every_agent_is_on_exactly_one_page(crowd):
    _, g = crowd
    seen = []
    for offset in (0, 100, 200):
        page = ok_json(g, f"agents?offset={offset}&limit=100")
        assert page["total"] == 300 and page["matched"] == 300
        assert page["offset"] == offset and page["limit"] == 100
        seen += [r["id"] for r in page["agents"]]
    assert len(seen) == 300 and len(set(seen)) == 300
    assert seen == sorted(seen)  # sort=id by default
    assert ok_json(g, "agents?offset=300")["agents"] == []
    row = ok_json(g, "agents?limit=1")["agents"][0]
    assert set(row) == {"id", "name", "class", "server", "calls", "errors", "queued", "last_call_unix_ms",
                        "model_calls", "prompt_tokens", "completion_tokens"}


def test_agents_are_filtered_by_text_and_class(crowd):
    _, g = crowd
    page = ok_json(g, "agents?q=BULK1&limit=1000")  # case-insensitive: bulk1, bulk10..19, bulk100..199
    assert page["matched"] == 1 + 10 + 100 and page["total"] == 300
    assert all("bulk1" in r["name"] for r in page["agents"])
    page = ok_json(g, "agents?class=StreamEchoAgent&limit=1000")
    assert page["matched"] == 50 and {r["class"] for r in page["agents"]} == {"StreamEchoAgent"}
    assert ok_json(g, "agents?class=NoSuchClass")["matched"] == 0
    assert ok_json(g, "agents?q=%20nothing%20like%20this")["agents"] == []


def test_agents_are_sorted_by_name_and_by_calls(crowd):
    s, g = crowd
    names = [r["name"] for r in ok_json(g, "agents?sort=name&order=desc&limit=1000")["agents"]]
    assert names == sorted(names, reverse=True) and len(names) == 300
    names = [r["name"] for r in ok_json(g, "agents?sort=name&q=other&limit=5")["agents"]]
    assert names == ["other0", "other1", "other10", "other11", "other12"]
    # Two agents called, one of them twice: first when sorted by calls, descending.
    ids = {r["name"]: r["id"] for r in ok_json(g, "agents?q=bulk7&limit=1000")["agents"]}
    for agent_id in (ids["bulk7"], ids["bulk7"], ids["bulk77"]):
        agentctl(s, "call", agent_id, "hello")
    top = ok_json(g, "agents?sort=calls&order=desc&limit=3")["agents"]
    assert [r["id"] for r in top[:2]] == [ids["bulk7"], ids["bulk77"]]
    assert [r["calls"] for r in top] == [2, 1, 0]


@pytest.mark.parametrize("query,param,says", [
    ("limit=0", "limit", "1 to 1000"),
    ("limit=1001", "limit", "1 to 1000"),
    ("limit=ten", "limit", "whole number"),
    ("offset=-1", "offset", "whole number"),
    ("sort=size", "sort", "id, name, class, calls, errors, queued, last_call, tokens"),
    ("order=up", "order", "asc, desc"),
    ("server=10.9.9.9:1", "server", "names no server"),
    ("q=%zz", None, "%-escape"),
])
def test_bad_agents_parameters_are_400_naming_the_parameter(crowd, query, param, says):
    _, g = crowd
    status, headers, body = api(g, "agents?" + query)
    assert status == 400, body
    e = error_of(body)
    assert says in e["message"], e
    if param:
        assert e["param"] == param and param in e["message"]
    assert_console_headers(headers)


# --- one agent: memory pages and its calls -------------------------------------------------------

def test_one_agent_shows_its_info_memory_pages_and_calls(server, gateway, token):
    agentctl(server, "create", "EchoAgent", "memtest", "--id", "memtest")
    for i in range(3):
        status, _, out = request(gateway, "POST", "/v1/chat/completions", chat("memtest", f"message {i}"),
                                 token=token)
        assert status == 200, out
    d = ok_json(gateway, "agents/memtest", token)
    assert d["agent"]["id"] == "memtest" and d["agent"]["class"] == "EchoAgent"
    assert d["agent"]["calls"] == 3 and d["agent"]["server"]
    mem = d["memory"]
    total = mem["total"]
    assert total >= 3 and mem["offset"] == 0 and len(mem["messages"]) == total
    assert all(isinstance(m["content"], str) for m in mem["messages"])
    assert any(m["content"] == "message 2" for m in mem["messages"])
    # A page: the first two messages.
    page = ok_json(gateway, "agents/memtest?mem_offset=0&mem_limit=2", token)["memory"]
    assert page["limit"] == 2 and len(page["messages"]) == 2
    assert page["messages"] == mem["messages"][:2]
    # The default is the last 50; mem_limit=1 alone: the last message.
    last = ok_json(gateway, "agents/memtest?mem_limit=1", token)["memory"]
    assert last["offset"] == total - 1 and last["messages"] == mem["messages"][-1:]
    # Its calls, newest first, with what went in and came out. The console's own reads of its
    # memory (four views above) are neither among them nor counted as its calls.
    again = ok_json(gateway, "agents/memtest", token)
    assert again["agent"]["calls"] == 3
    calls = again["calls"]
    assert [c["kind"] for c in calls] == ["reply"] * 3
    assert all(c["agent_id"] == "memtest" for c in calls)
    timeline = ok_json(gateway, "calls?agent=memtest", token)["spans"]
    assert [c["kind"] for c in timeline] == ["reply"] * 3
    assert [c["input"] for c in calls] == ["message 2", "message 1", "message 0"]
    assert calls[0]["output"] == "message 2" and calls[0]["outcome"] == "ok"
    assert calls[0]["enqueued_unix_us"] >= calls[1]["enqueued_unix_us"]


def test_an_unknown_agent_is_404_unknown_agent(gateway, token):
    status, _, body = api(gateway, "agents/no-such-agent", token)
    assert status == 404 and error_of(body)["code"] == "unknown_agent"
    status, _, body = api(gateway, "agents/echo?mem_limit=0", token)
    assert status == 400 and error_of(body)["param"] == "mem_limit"


# --- sending ---------------------------------------------------------------------------------------

def sse(body):
    """(event, data) pairs of a text/event-stream body (comments skipped)."""
    out = []
    for block in body.decode().split("\n\n"):
        lines = [l for l in block.split("\n") if l and not l.startswith(":")]
        if lines:
            event = [l[len("event: "):] for l in lines if l.startswith("event: ")][0]
            data = json.loads("".join(l[len("data: "):] for l in lines if l.startswith("data: ")))
            out.append((event, data))
    return out


def test_a_message_sent_as_anything_but_json_is_refused(tmpdir_session, server, token):
    from conftest import write_secret
    g = Gateway(server, ["--token-file", write_secret(tmpdir_session, "tokens-send", token), "--console-send"])
    try:
        status, _, body = request(g, "POST", "/console/api/agents/echo/send", token=token,
                                  raw=b'{"content": "hi", "x": "="}', headers={"Content-Type": "text/plain"})
        assert status == 415 and "application/json" in error_of(body)["message"]
    finally:
        g.close()


def test_sending_is_refused_on_a_read_only_console(gateway, token):
    status, headers, body = api(gateway, "agents/echo/send", token, "POST", {"content": "hi"})
    assert status == 403 and error_of(body)["code"] == "console_read_only"
    assert "--console-send" in error_of(body)["message"]
    assert_console_headers(headers)


def test_sending_with_console_send_streams_the_reply(server, tmpdir_session, token):
    from conftest import write_secret
    g = Gateway(server, ["--console-send", "--token-file", write_secret(tmpdir_session, "send-tokens", token)])
    try:
        assert api(g, "agents/stream/send", None, "POST", {"content": "x"})[0] == 401
        status, headers, body = api(g, "agents/stream/send", token, "POST", {"content": "one two three"})
        assert status == 200, body
        assert headers["Content-Type"] == "text/event-stream"
        events = sse(body)
        assert events[-1][0] == "done", events
        chunks = [d["text"] for e, d in events if e == "chunk"]
        assert len(chunks) >= 2 and "".join(chunks).split() == ["one", "two", "three"]
        done = events[-1][1]
        assert done["message"]["content"] == "one two three"
        assert set(done["usage"]) == {"model_calls", "prompt_tokens", "completion_tokens"}
        # The call is in the trace the answer names.
        assert headers["X-Trace-Id"] == done["trace_id"]
        spans = ok_json(g, f"calls?trace={done['trace_id']}", token)["spans"]
        assert [s["agent_id"] for s in spans] == ["stream"]
        # An agent's failure is an error event; bad bodies are 400; an unknown agent 404.
        events = sse(api(g, "agents/flaky/send", token, "POST", {"content": "fail"})[2])
        assert events[-1][0] in ("done", "error")
        status, _, body = api(g, "agents/echo/send", token, "POST", {"text": "hi"})
        assert status == 400 and error_of(body)["param"] == "content"
        status, _, body = request(g, "POST", "/console/api/agents/echo/send", raw=b"{nope", token=token)
        assert status == 400
        status, _, body = api(g, "agents/ghost/send", token, "POST", {"content": "hi"})
        assert status == 404 and error_of(body)["code"] == "unknown_agent"
        assert ok_json(g, "overview", token)["gateway"]["send_enabled"] is True
    finally:
        g.close()


# --- live ticks, history ---------------------------------------------------------------------------

def read_events(gw, token, count, between=None):
    """The first `count` tick events of /console/api/events; between(i) runs after the i-th."""
    conn = http.client.HTTPConnection(gw.host, gw.port, timeout=30)
    try:
        conn.request("GET", "/console/api/events", headers={"Authorization": "Bearer " + token})
        r = conn.getresponse()
        assert r.status == 200 and r.getheader("Content-Type") == "text/event-stream"
        ticks, event, data = [], None, ""
        while len(ticks) < count:
            line = r.fp.readline().decode()
            assert line, "the event stream ended"
            line = line.rstrip("\r\n")
            if line.startswith("event: "):
                event = line[len("event: "):]
            elif line.startswith("data: "):
                data += line[len("data: "):]
            elif line == "" and event:
                if event == "tick":
                    ticks.append(json.loads(data))
                    if between:
                        between(len(ticks))
                event, data = None, ""
        return ticks
    finally:
        conn.close()


def test_events_tick_every_second_and_the_samples_count_the_calls_made(gateway, token):
    def make_calls(i):
        if i == 2:
            for n in range(20):
                assert request(gateway, "POST", "/v1/chat/completions", chat("echo", f"tick {n}"),
                               token=token)[0] == 200
    started = time.monotonic()
    ticks = read_events(gateway, token, 6, make_calls)
    assert time.monotonic() - started < 30
    for t in ticks:
        assert set(t) == {"overview", "sample"}
        assert t["overview"]["servers"][0]["up"] is True
        s = t["sample"]
        assert {"t", "calls_per_s", "failed_per_s", "latency_p50", "latency_p95", "prompt_tokens_per_s",
                "completion_tokens_per_s", "agents", "calls_running", "calls_queued", "models"} <= set(s)
    times = [t["sample"]["t"] for t in ticks]
    assert times == sorted(times)
    # The 20 calls made after the second tick show up as calls per second, summed over the intervals.
    total = sum(t["sample"]["calls_per_s"] for t in ticks[2:])
    assert 20 * 0.5 <= total <= 20 * 1.5 + 2, [t["sample"]["calls_per_s"] for t in ticks]
    assert any(t["sample"]["latency_p50"] is not None for t in ticks[2:])
    history = ok_json(gateway, "history", token)
    assert history["interval_ms"] == 1000
    assert 5 <= len(history["samples"]) <= 300
    assert history["samples"][-1]["t"] >= times[0]


# --- calls, trace.json -----------------------------------------------------------------------------

def test_calls_are_filtered_by_agent_and_trace_and_export_to_chrome_trace(gateway, token):
    trace = "4bf92f3577b34da6a3ce929d0e0e4736"
    traceparent = f"00-{trace}-00f067aa0ba902b7-01"
    for text in ("first", "second"):
        status, _, out = request(gateway, "POST", "/v1/chat/completions", chat("echo", text), token=token,
                                 headers={"traceparent": traceparent})
        assert status == 200, out
    assert request(gateway, "POST", "/v1/chat/completions", chat("stream", "other"), token=token)[0] == 200
    spans = ok_json(gateway, f"calls?trace={trace}", token)["spans"]
    assert [s["input"] for s in spans] == ["first", "second"]  # oldest first, newest last
    assert {s["trace_id"] for s in spans} == {trace} and {s["agent_id"] for s in spans} == {"echo"}
    s = spans[0]
    assert {"server", "seq", "call_id", "agent_id", "agent_class", "kind", "method", "consumed", "enqueued_unix_us",
            "queue_wait_us", "run_us", "outcome", "error_message", "model_calls", "prompt_tokens",
            "completion_tokens", "trace_id", "input", "output", "tool_calls"} == set(s)
    assert s["tool_calls"] == []
    by_agent = ok_json(gateway, "calls?agent=stream", token)["spans"]
    assert by_agent and {x["agent_id"] for x in by_agent} == {"stream"}
    assert len(ok_json(gateway, "calls?limit=1", token)["spans"]) == 1
    assert api(gateway, "calls?limit=0", token)[0] == 400

    status, headers, body = api(gateway, f"trace.json?trace={trace}", token)
    assert status == 200
    assert headers["Content-Disposition"] == 'attachment; filename="agentd-trace.json"'
    events = json.loads(body)["traceEvents"]
    assert len([e for e in events if e.get("ph") == "X"]) >= 2


def test_a_calls_mcp_tool_calls_are_in_its_span(tmp_path):
    tools = tmp_path / "tools.yaml"
    tools.write_text(f"mcpServers:\n  faults:\n    command: python3\n    args: [{json.dumps(FAULT_SERVER)}]\n")
    s = Process([AS_SERVER, "--host", "127.0.0.1", "--port", "0", "--log-level", "warn", "--plugin", ASYNC_PLUGIN,
                 "--tool-config-path", str(tools)], "as_server ready: listening on ")
    g = None
    try:
        g = Gateway(s)
        agentctl(s, "create", "AsyncToolAgent", "tooler", "--id", "tooler")
        agentctl(s, "method", "tooler", "repeat", json.dumps({"tool": "faults/echo", "arguments": {"text": "hi"}, "n": 2}))
        with pytest.raises(subprocess.CalledProcessError):  # the tool reports a failure: the call fails
            agentctl(s, "method", "tooler", "repeat", json.dumps({"tool": "faults/fail", "n": 1}))
        spans = ok_json(g, "calls?agent=tooler")["spans"]
        ok_span, failed_span = [x for x in spans if x["kind"] == "method"]
        assert [t["tool"] for t in ok_span["tool_calls"]] == ["faults/echo", "faults/echo"]
        assert {t["outcome"] for t in ok_span["tool_calls"]} == {"ok"}
        first, second = ok_span["tool_calls"]
        assert first["start_unix_us"] <= second["start_unix_us"] and first["duration_us"] >= 0
        assert first["start_unix_us"] >= ok_span["enqueued_unix_us"]
        assert [(t["tool"], t["outcome"]) for t in failed_span["tool_calls"]] == [("faults/fail", "is_error")]
        assert failed_span["outcome"] != "ok"
    finally:
        if g:
            g.close()
        s.close()


# --- models ------------------------------------------------------------------------------------------

def test_models_report_each_configs_calls_and_latency(tmp_path):
    config = tmp_path / "models.yaml"
    config.write_text("- config_name: echo-model\n  model_type: echo\n  model_name: echo-1\n")
    s = Process([AS_SERVER, "--host", "127.0.0.1", "--port", "0", "--log-level", "warn", "--plugin", DIALOG_PLUGIN,
                 "--model-config-path", str(config)], "as_server ready: listening on ")
    g = None
    try:
        agentctl(s, "create", "DialogAgent", "talker", "--id", "talker", "--args",
                 '{"model_config_name": "echo-model"}')
        g = Gateway(s)
        def mine():
            return [m for m in ok_json(g, "models")["models"] if m["config_name"] == "echo-model"]
        before = mine()
        assert [(m["model_type"], m["model_name"], m["calls"]) for m in before] == [("echo", "echo-1", 0)]
        assert before[0]["latency"] == {"p50": None, "p95": None, "p99": None, "mean": None}
        for text in ("hello", "again"):
            assert request(g, "POST", "/v1/chat/completions", chat("talker", text))[0] == 200

        def counted():
            m = mine()
            return m if m and m[0]["calls"] >= 2 else None
        m = wait_for(counted, "the model calls to be sampled")[0]
        assert m["server"] and m["model_name"] == "echo-1" and m["errors"] == 0
        assert m["latency"]["p50"] is not None and m["latency"]["mean"] >= 0
    finally:
        if g:
            g.close()
        s.close()


@pytest.mark.parametrize("path,expect", [
    ("agents/%zz", 404),                      # a broken escape in the id
    ("agents/a/b", 404),                      # no such endpoint
    ("agents/%00", 404),                      # no agent with that id
    ("agents/echo?mem_offset=99999999999999999999", 400),
    ("agents?q=" + "x" * 600, 400),           # too long
    ("calls?limit=10001", 400),
    ("agents?offset=&limit=", 400),
])
def test_odd_requests_get_a_clear_4xx_and_the_gateway_keeps_serving(gateway, token, path, expect):
    status, _, body = api(gateway, path, token)
    assert status == expect, body
    assert error_of(body)["message"]
    assert api(gateway, "overview", token)[0] == 200

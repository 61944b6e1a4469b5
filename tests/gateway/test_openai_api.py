"""The OpenAI-compatible API of agentd-gateway, over real HTTP, against a real as_server:
models list, completions (plain and streamed), keep-alive, and the error cases."""
import http.client
import json
import socket
import subprocess
import time
import urllib.error
import urllib.request

import pytest

from conftest import GATEWAY


def request(gw, method, path, body=None, token=None, headers=None, raw=None):
    """(status, headers, body bytes) of one request; token None means no Authorization."""
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    req = urllib.request.Request(gw.base + path, data=data, method=method)
    req.add_header("Content-Type", "application/json")
    if token is not None:
        req.add_header("Authorization", "Bearer " + token)
    for k, v in (headers or {}).items():
        req.add_header(k, v)
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()


def chat(model, text, stream=False, **extra):
    body = {"model": model, "messages": [{"role": "system", "content": "be brief"},
                                         {"role": "user", "content": text}]}
    if stream:
        body["stream"] = True
    body.update(extra)
    return body


def sse_events(body):
    """The data: payloads of a server-sent event stream, in order."""
    events = []
    for block in body.decode().split("\n\n"):
        if block.strip():
            assert block.startswith("data: "), block
            events.append(block[len("data: "):])
    return events


def error_of(body):
    e = json.loads(body)["error"]
    assert set(e) >= {"message", "type", "code"}
    return e


def test_models_lists_every_agent_by_id(gateway, token):
    status, headers, body = request(gateway, "GET", "/v1/models", token=token)
    assert status == 200
    assert headers["Content-Type"] == "application/json"
    models = json.loads(body)
    assert models["object"] == "list"
    ids = {m["id"] for m in models["data"]}
    assert {"echo", "stream", "flaky"} <= ids
    echo = next(m for m in models["data"] if m["id"] == "echo")
    assert echo["object"] == "model" and echo["owned_by"] == "agentd"
    assert echo["agentd"]["class"] == "EchoAgent"


def test_completion_is_the_agents_reply_to_the_last_user_message(gateway, token):
    status, _, body = request(gateway, "POST", "/v1/chat/completions", chat("echo", "hello agent"), token=token)
    assert status == 200, body
    c = json.loads(body)
    assert c["object"] == "chat.completion"
    assert c["id"].startswith("chatcmpl-")
    assert c["model"] == "echo"
    assert c["choices"][0]["message"] == {"role": "assistant", "content": "hello agent"}
    assert c["choices"][0]["finish_reason"] == "stop"
    assert "usage" in c


def test_content_parts_are_joined(gateway, token):
    body = {"model": "echo", "messages": [{"role": "user", "content": [{"type": "text", "text": "a"},
                                                                       {"type": "text", "text": "b"}]}]}
    status, _, out = request(gateway, "POST", "/v1/chat/completions", body, token=token)
    assert status == 200, out
    assert json.loads(out)["choices"][0]["message"]["content"] == "a\nb"


def test_keep_alive_serves_many_requests_on_one_connection(gateway, token):
    conn = http.client.HTTPConnection(gateway.host, gateway.port, timeout=30)
    headers = {"Authorization": "Bearer " + token, "Content-Type": "application/json"}
    for i in range(5):
        conn.request("POST", "/v1/chat/completions", json.dumps(chat("echo", f"n{i}")), headers)
        r = conn.getresponse()
        assert r.status == 200
        assert json.loads(r.read())["choices"][0]["message"]["content"] == f"n{i}"
    sock = conn.sock
    conn.request("GET", "/v1/models", headers=headers)
    r = conn.getresponse()
    r.read()
    assert r.status == 200 and conn.sock is sock  # the same connection throughout
    conn.close()


def test_streamed_completion_sends_the_agents_chunks_then_done(gateway, token):
    status, headers, body = request(gateway, "POST", "/v1/chat/completions",
                                    chat("stream", "one two three", stream=True), token=token)
    assert status == 200
    assert headers["Content-Type"] == "text/event-stream"
    events = sse_events(body)
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert len({c["id"] for c in chunks}) == 1
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant"}
    pieces = [c["choices"][0]["delta"].get("content") for c in chunks[1:-1]]
    assert pieces == ["one ", "two ", "three"]
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    assert chunks[-1]["choices"][0]["delta"] == {}


def test_many_streams_on_one_connection(gateway, token):
    conn = http.client.HTTPConnection(gateway.host, gateway.port, timeout=30)
    headers = {"Authorization": "Bearer " + token, "Content-Type": "application/json"}
    for i in range(3):
        conn.request("POST", "/v1/chat/completions", json.dumps(chat("stream", f"x{i} y", stream=True)), headers)
        r = conn.getresponse()
        events = sse_events(r.read())
        assert events[-1] == "[DONE]"
        text = "".join(json.loads(e)["choices"][0]["delta"].get("content", "") for e in events[:-1])
        assert text == f"x{i} y"
    conn.close()


def test_agent_failure_is_502_with_the_typed_error(gateway, token):
    status, _, body = request(gateway, "POST", "/v1/chat/completions", chat("flaky", "fail"), token=token)
    assert status == 502
    e = error_of(body)
    assert e["code"] == "agent_failed"
    assert "asked to fail" in e["message"]


def test_agent_failure_in_a_stream_is_an_error_event(gateway, token):
    status, _, body = request(gateway, "POST", "/v1/chat/completions", chat("flaky", "fail", stream=True),
                              token=token)
    assert status == 200  # the stream had started
    events = sse_events(body)
    assert events[-1] == "[DONE]"
    e = json.loads(events[-2])["error"]
    assert e["code"] == "agent_failed" and "asked to fail" in e["message"]


def test_unknown_model_is_404(gateway, token):
    status, _, body = request(gateway, "POST", "/v1/chat/completions", chat("nobody", "hi"), token=token)
    assert status == 404
    e = error_of(body)
    assert e["code"] == "model_not_found"
    assert "nobody" in e["message"]


@pytest.mark.parametrize("raw, says", [
    (b"{not json", "not valid JSON"),
    (b"[1, 2]", "JSON object"),
    (b'{"model": 49E494444444444444444444}', "number overflow"),  # found by gateway_request_fuzz
    (b'{"messages": [{"role": "user", "content": "x"}]}', "'model' is required"),
    (b'{"model": "echo"}', "'messages' is required"),
    (b'{"model": "echo", "messages": [{"role": "system", "content": "x"}]}', 'no message with role "user"'),
    (b'{"model": "echo", "messages": [{"role": "user", "content": 5}]}', "content must be"),
    (b'{"model": "echo", "stream": "yes", "messages": [{"role": "user", "content": "x"}]}', "'stream'"),
])
def test_bad_requests_are_400_saying_what_is_wrong(gateway, token, raw, says):
    status, _, body = request(gateway, "POST", "/v1/chat/completions", raw=raw, token=token)
    assert status == 400
    e = error_of(body)
    assert e["type"] == "invalid_request_error"
    assert says in e["message"]


@pytest.mark.parametrize("auth", [None, "wrong-token"])
def test_missing_or_wrong_token_is_401(gateway, auth):
    status, _, body = request(gateway, "GET", "/v1/models", token=auth)
    assert status == 401
    assert error_of(body)["code"] == "invalid_api_key"


def test_unknown_path_and_method(gateway, token):
    assert request(gateway, "GET", "/v1/nothing", token=token)[0] == 404
    assert request(gateway, "GET", "/v1/chat/completions", token=token)[0] == 405


def test_no_token_needed_without_token_file(open_gateway):
    status, _, body = request(open_gateway, "POST", "/v1/chat/completions", chat("echo", "open"))
    assert status == 200
    assert json.loads(body)["choices"][0]["message"]["content"] == "open"


def test_body_over_the_limit_is_413(open_gateway):
    big = json.dumps(chat("echo", "x" * 100000)).encode()
    status, _, body = request(open_gateway, "POST", "/v1/chat/completions", raw=big)
    assert status == 413
    assert "--max-body-bytes" in error_of(body)["message"]


def test_header_over_the_limit_is_431(open_gateway):
    status, _, _ = request(open_gateway, "GET", "/v1/models", headers={"X-Big": "y" * 8000})
    assert status == 431


def raw_exchange(gw, data, timeout=10):
    with socket.create_connection((gw.host, gw.port), timeout=timeout) as s:
        s.sendall(data)
        out = b""
        while True:
            got = s.recv(65536)
            if not got:
                return out
            out += got


def test_malformed_http_is_400(open_gateway):
    out = raw_exchange(open_gateway, b"NOT HTTP AT ALL\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 400"), out
    assert b"malformed HTTP request" in out


def test_a_slow_client_is_closed_at_the_request_timeout(open_gateway):
    with socket.create_connection((open_gateway.host, open_gateway.port), timeout=10) as s:
        s.sendall(b"GET /v1/models HTTP/1.1\r\nHost: x\r\n")  # never finishes the header
        start = time.monotonic()
        assert s.recv(100) == b""  # closed by the gateway
        assert time.monotonic() - start < 5


def test_the_gateway_still_serves_after_bad_input(open_gateway):
    raw_exchange(open_gateway, b"\x00\xff garbage \r\n\r\n")
    status, _, _ = request(open_gateway, "GET", "/v1/models")
    assert status == 200


def test_help_and_refusals():
    out = subprocess.run([GATEWAY, "--help"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0 and "/v1/chat/completions" in out.stdout
    out = subprocess.run([GATEWAY, "--listen", "0.0.0.0:0", "--server", "127.0.0.1:1"],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 2 and "--token-file" in out.stderr
    out = subprocess.run([GATEWAY, "--listen", "127.0.0.1:0"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 2 and "--server" in out.stderr


def test_a_client_gone_mid_stream_harms_nothing_and_sigterm_exits_0(server):
    from conftest import Gateway
    g = Gateway(server)
    try:
        # A stream whose client hangs up after the header.
        with socket.create_connection((g.host, g.port), timeout=10) as s:
            body = json.dumps(chat("stream", "a b c d e f", stream=True)).encode()
            s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
            assert s.recv(12).startswith(b"HTTP/1.1 200")
        status, _, out = request(g, "POST", "/v1/chat/completions", chat("echo", "after"))
        assert status == 200 and json.loads(out)["choices"][0]["message"]["content"] == "after"
        g.proc.terminate()
        assert g.proc.wait(timeout=20) == 0, g.stderr()[-3000:]
        assert "Sanitizer" not in g.stderr()
    finally:
        g.close()


def test_an_agent_slower_than_reply_timeout_is_504(open_gateway):
    start = time.monotonic()
    status, _, body = request(open_gateway, "POST", "/v1/chat/completions", chat("slow", "zzz"))
    assert status == 504
    e = error_of(body)
    assert e["code"] == "timeout" and "--reply-timeout" in e["message"]
    assert time.monotonic() - start < 2.5
    status, _, body = request(open_gateway, "POST", "/v1/chat/completions", chat("slow", "zzz", stream=True))
    assert status == 200
    events = sse_events(body)
    assert events[-1] == "[DONE]"
    assert json.loads(events[-2])["error"]["code"] == "timeout"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_gateway_survives_its_server_restarting():
    from conftest import Gateway, start_server
    port = free_port()
    server = start_server(port)
    g = Gateway(server)
    try:
        assert request(g, "POST", "/v1/chat/completions", chat("echo", "before"))[0] == 200
        server.proc.kill()
        server.close()
        deadline = time.monotonic() + 20
        while True:  # the port may take a moment to be free again
            try:
                server = start_server(port)
                break
            except RuntimeError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        # The client reconnects by itself; the agent was created again under the same id.
        status, _, body = request(g, "POST", "/v1/chat/completions", chat("echo", "after"))
        assert status == 200, body
        assert json.loads(body)["choices"][0]["message"]["content"] == "after"
    finally:
        g.close()
        server.close()


def test_each_request_is_one_json_log_line_without_the_token(gateway, token):
    request(gateway, "GET", "/v1/models?secret=1", token=token)
    request(gateway, "GET", "/v1/models", token="wrong")
    deadline = time.monotonic() + 10
    while True:
        lines = [json.loads(l) for l in gateway.stderr().splitlines() if l.startswith("{")]
        if any(l["status"] == 401 for l in lines) or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    models = [l for l in lines if l["path"] == "/v1/models"]
    assert {200, 401} <= {l["status"] for l in models}
    assert all(l["method"] == "GET" and l["ms"] >= 0 and l["peer"].startswith("127.0.0.1:") for l in models)
    streams = [l for l in lines if l["stream"]]
    assert streams and all(l["path"] == "/v1/chat/completions" for l in streams)
    text = gateway.stderr()
    assert token not in text and "wrong" not in text and "secret" not in text


def test_many_concurrent_requests_each_get_their_own_answer(gateway, token):
    """Plain and streamed completions at once from many threads: no answer crosses over."""
    import concurrent.futures

    def one(i):
        if i % 2:
            status, _, body = request(gateway, "POST", "/v1/chat/completions", chat("echo", f"plain {i}"),
                                      token=token)
            assert status == 200
            return json.loads(body)["choices"][0]["message"]["content"] == f"plain {i}"
        status, _, body = request(gateway, "POST", "/v1/chat/completions",
                                  chat("stream", f"streamed {i} a b c", stream=True), token=token)
        events = sse_events(body)
        text = "".join(json.loads(e)["choices"][0]["delta"].get("content", "") for e in events[:-1])
        return status == 200 and events[-1] == "[DONE]" and text == f"streamed {i} a b c"

    with concurrent.futures.ThreadPoolExecutor(32) as pool:
        assert all(pool.map(one, range(200)))


def test_connections_over_max_connections_are_closed(server):
    from conftest import Gateway
    g = Gateway(server, ["--max-connections", "2"])
    try:
        held = [socket.create_connection((g.host, g.port), timeout=10) for _ in range(2)]
        time.sleep(0.2)  # both accepted
        with socket.create_connection((g.host, g.port), timeout=10) as s:
            try:
                s.sendall(b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n")
                assert s.recv(100) == b""  # closed at once, unanswered
            except ConnectionResetError:
                pass  # closed at once, before our request arrived
        for s in held:
            s.close()
        deadline = time.monotonic() + 10
        while True:  # served again once the gateway has seen them go
            try:
                if request(g, "GET", "/v1/models")[0] == 200:
                    break
            except (ConnectionError, urllib.error.URLError, http.client.HTTPException):
                pass  # still closed at once: the two have not been noticed as gone yet
            assert time.monotonic() < deadline
            time.sleep(0.05)
    finally:
        g.close()


def test_a_connection_goes_on_after_a_stream_ended_by_the_reply_timeout(open_gateway):
    conn = http.client.HTTPConnection(open_gateway.host, open_gateway.port, timeout=30)
    headers = {"Content-Type": "application/json"}
    conn.request("POST", "/v1/chat/completions", json.dumps(chat("slow", "late", stream=True)), headers)
    events = sse_events(conn.getresponse().read())
    assert json.loads(events[-2])["error"]["code"] == "timeout" and events[-1] == "[DONE]"
    conn.request("POST", "/v1/chat/completions", json.dumps(chat("echo", "next")), headers)
    r = conn.getresponse()
    assert r.status == 200 and json.loads(r.read())["choices"][0]["message"]["content"] == "next"
    conn.close()


def test_readiness_is_notified_to_systemd(server, tmp_path):
    from conftest import Gateway
    path = str(tmp_path / "notify")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(path)
        sock.settimeout(20)
        import os
        os.environ["NOTIFY_SOCKET"] = path
        try:
            g = Gateway(server)
        finally:
            del os.environ["NOTIFY_SOCKET"]
        try:
            ready = sock.recv(4096).decode()
            assert "READY=1" in ready and f"MAINPID={g.proc.pid}" in ready
            assert f"serving HTTP on 127.0.0.1:{g.port}" in ready
        finally:
            g.close()
        assert "STOPPING=1" in sock.recv(4096).decode()


def test_the_gateway_may_start_before_its_server():
    from conftest import Gateway, start_server

    class NotYet:
        host = "127.0.0.1"
        port = free_port()

    g = Gateway(NotYet)
    server = None
    try:
        assert "trying again in the background" in g.stderr()
        status, _, body = request(g, "POST", "/v1/chat/completions", chat("echo", "early"))
        assert status == 503 and error_of(body)["code"] == "disconnected"
        server = start_server(NotYet.port)
        deadline = time.monotonic() + 20
        while True:
            status, _, body = request(g, "POST", "/v1/chat/completions", chat("echo", "later"))
            if status == 200:
                break
            # 503 until connected; 404 for a moment between the server's start and its agents'.
            assert status in (503, 404) and time.monotonic() < deadline, body
            time.sleep(0.1)
        assert json.loads(body)["choices"][0]["message"]["content"] == "later"
    finally:
        g.close()
        if server:
            server.close()


def test_a_cluster_serves_the_agents_of_every_member(server):
    from conftest import AGENTCTL, Gateway, start_server
    second = start_server()
    subprocess.run([AGENTCTL, "--host", second.host, "--port", str(second.port), "create", "EchoAgent", "two",
                    "--id", "only-on-second", "--args", '{"prefix": "second: "}'],
                   check=True, capture_output=True, timeout=60)
    g = Gateway(cluster=f"{server.host}:{server.port},{second.host}:{second.port}")
    try:
        status, _, body = request(g, "GET", "/v1/models")
        assert status == 200
        ids = [m["id"] for m in json.loads(body)["data"]]
        assert "only-on-second" in ids and "echo" in ids
        status, _, body = request(g, "POST", "/v1/chat/completions", chat("only-on-second", "hi"))
        assert status == 200 and json.loads(body)["choices"][0]["message"]["content"] == "second: hi"
        status, _, body = request(g, "POST", "/v1/chat/completions", chat("stream", "x y", stream=True))
        assert status == 200 and sse_events(body)[-1] == "[DONE]"
        second.close()  # a member down: the others' agents are still served
        status, _, body = request(g, "GET", "/v1/models")
        assert status == 200 and "echo" in [m["id"] for m in json.loads(body)["data"]]
        assert request(g, "POST", "/v1/chat/completions", chat("echo", "still"))[0] == 200
    finally:
        g.close()
        second.close()


def make_pki(directory):
    """A CA and a server certificate for 127.0.0.1 (openssl CLI), as tests/support/test_pki.h."""
    key = "-newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes"
    cmd = (f"cd {directory} && openssl req -x509 {key} -keyout ca.key -out ca.pem -days 2 -subj /CN=ca && "
           "printf 'subjectAltName=DNS:127.0.0.1,IP:127.0.0.1,DNS:localhost\\n' > server.ext && "
           f"openssl req {key} -keyout server.key -out server.csr -subj /CN=127.0.0.1 && "
           "openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out server.pem "
           "-days 2 -extfile server.ext")
    subprocess.run(cmd, shell=True, check=True, capture_output=True, timeout=60)
    return {n: f"{directory}/{n}" for n in ("ca.pem", "server.pem", "server.key")}


def test_tls_to_the_server(tmp_path):
    from conftest import AGENTCTL, AS_SERVER, ECHO_PLUGIN, Gateway, Process
    pki = make_pki(tmp_path)
    server = Process([AS_SERVER, "--host", "127.0.0.1", "--port", "0", "--log-level", "warn",
                      "--plugin", ECHO_PLUGIN, "--tls-cert", pki["server.pem"], "--tls-key", pki["server.key"]],
                     "as_server ready: listening on ")
    g = None
    try:
        subprocess.run([AGENTCTL, "--host", server.host, "--port", str(server.port), "--tls-ca", pki["ca.pem"],
                        "create", "EchoAgent", "tls", "--id", "tls"], check=True, capture_output=True, timeout=60)
        g = Gateway(server, ["--upstream-tls-ca", pki["ca.pem"]])
        status, _, body = request(g, "POST", "/v1/chat/completions", chat("tls", "over tls"))
        assert status == 200 and json.loads(body)["choices"][0]["message"]["content"] == "over tls"
    finally:
        if g:
            g.close()
        server.close()


def test_metrics(open_gateway):
    request(open_gateway, "POST", "/v1/chat/completions", chat("echo", "m"))
    request(open_gateway, "POST", "/v1/chat/completions", chat("stream", "m n", stream=True))
    request(open_gateway, "GET", "/v1/nothing")
    deadline = time.monotonic() + 10
    while True:
        status, headers, body = request(open_gateway, "GET", "/metrics")
        text = body.decode()
        if 'route="other",status="404"' in text or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert status == 200 and headers["Content-Type"].startswith("text/plain")
    assert 'agentd_gateway_requests_total{route="/v1/chat/completions",status="200"} 2' in text
    assert 'agentd_gateway_requests_total{route="other",status="404"} 1' in text
    assert 'agentd_gateway_request_duration_seconds_count{route="/v1/chat/completions"} 2' in text
    import re
    assert int(re.search(r"^agentd_gateway_connections (\d+)$", text, re.M).group(1)) >= 1  # this one
    assert "agentd_gateway_streams 0" in text

"""agentd-gateway as an HTTP server: tokens, keep-alive, limits, malformed input, slow clients,
the connection cap, the request log, metrics and the command line."""
import http.client
import json
import socket
import subprocess
import time
import urllib.error

import pytest

from conftest import GATEWAY
from http_helpers import chat, error_of, raw_exchange, request


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
    assert out.returncode == 0 and "/v1/chat/completions" in out.stdout and "/a2a/ID/" in out.stdout
    assert "/console" in out.stdout and "--console-send" in out.stdout
    out = subprocess.run([GATEWAY, "--listen", "0.0.0.0:0", "--server", "127.0.0.1:1"],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 2 and "--token-file" in out.stderr
    out = subprocess.run([GATEWAY, "--listen", "127.0.0.1:0"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 2 and "--server" in out.stderr


def test_each_request_is_one_json_log_line_without_the_token(gateway, token):
    request(gateway, "GET", "/v1/models?secret=1", token=token)
    request(gateway, "GET", "/v1/models", token="wrong")
    request(gateway, "POST", "/v1/chat/completions", chat("stream", "s", stream=True), token=token)
    deadline = time.monotonic() + 10
    while True:
        lines = [json.loads(l) for l in gateway.stderr().splitlines() if l.startswith("{")]
        # A line is written once its answer is, which may be a moment after the client has it.
        done = any(l["status"] == 401 for l in lines) and any(
            l["stream"] and l["path"] == "/v1/chat/completions" for l in lines)
        if done or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    models = [l for l in lines if l["path"] == "/v1/models"]
    assert {200, 401} <= {l["status"] for l in models}
    assert all(l["method"] == "GET" and l["ms"] >= 0 and l["peer"].startswith("127.0.0.1:") for l in models)
    # The session's gateway also logs the other tests' requests (A2A streams among them).
    assert any(l["stream"] and l["path"] == "/v1/chat/completions" for l in lines)
    assert all(l["path"] == "/v1/chat/completions" or l["path"].startswith("/a2a/") for l in lines if l["stream"])
    text = gateway.stderr()
    assert token not in text and "wrong" not in text and "secret" not in text


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


def test_metrics(open_gateway):
    request(open_gateway, "POST", "/v1/chat/completions", chat("echo", "m"))
    request(open_gateway, "POST", "/v1/chat/completions", chat("stream", "m n", stream=True))
    request(open_gateway, "POST", "/a2a/echo/", {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {
        "message": {"role": "ROLE_USER", "messageId": "m", "parts": [{"text": "m"}]}}}, headers={"A2A-Version": "1.0"})
    request(open_gateway, "GET", "/v1/nothing")
    # A request is counted once its answer is written, which may be after the client has read it:
    # wait until every count asserted below is there.
    expected = [
        'agentd_gateway_requests_total{route="/v1/chat/completions",status="200"} 2',
        'agentd_gateway_requests_total{route="other",status="404"} 1',
        'agentd_gateway_requests_total{route="/a2a/{agent}/",status="200"} 1',
        'agentd_gateway_request_duration_seconds_count{route="/v1/chat/completions"} 2',
        "agentd_gateway_streams 0",
    ]
    deadline = time.monotonic() + 10
    while True:
        status, headers, body = request(open_gateway, "GET", "/metrics")
        text = body.decode()
        if all(line in text for line in expected) or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert status == 200 and headers["Content-Type"].startswith("text/plain")
    for line in expected:
        assert line in text
    import re
    assert int(re.search(r"^agentd_gateway_connections (\d+)$", text, re.M).group(1)) >= 1  # this one
    assert "agentd_gateway_streams 0" in text

"""agentd-gateway in operation: stopping, its server restarting or starting late, clusters, TLS
to the server, systemd readiness."""
import json
import socket
import subprocess
import time

from http_helpers import chat, error_of, free_port, make_pki, request, sse_events


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


def test_listening_beyond_loopback_needs_a_token_file_or_allow_unauthenticated(server, tmp_path):
    from conftest import GATEWAY, Process, write_secret
    upstream = ["--server", f"{server.host}:{server.port}"]

    def refused(listen):
        out = subprocess.run([GATEWAY, "--listen", listen] + upstream, capture_output=True, text=True, timeout=30)
        assert out.returncode == 2, (listen, out.stderr)
        assert f"--listen {listen} is beyond loopback" in out.stderr
        assert "--token-file" in out.stderr and "--allow-unauthenticated" in out.stderr
        assert "ready" not in out.stdout

    def started(listen, *extra):
        g = Process([GATEWAY, "--listen", listen] + upstream + list(extra), "agentd-gateway ready: listening on ")
        g.base = f"http://127.0.0.1:{g.port}"
        return g

    def stop(g):
        g.proc.terminate()
        assert g.proc.wait(timeout=20) == 0, g.stderr()[-3000:]
        g.close()

    refused("0.0.0.0:0")
    refused("[::]:0")
    # A name is not loopback because it looks like an address: it may resolve to anything.
    refused("127.0.0.1.example.invalid:0")
    # Loopback addresses need nothing.
    g = started("127.0.0.2:0")
    assert g.host == "127.0.0.2"
    stop(g)
    # Beyond loopback with a token file: tokens are required there.
    token = "t" * 32
    g = started("0.0.0.0:0", "--token-file", write_secret(str(tmp_path), "tokens", token))
    try:
        assert g.host == "0.0.0.0"
        assert request(g, "GET", "/v1/models")[0] == 401
        assert request(g, "GET", "/v1/models", token=token)[0] == 200
    finally:
        stop(g)
    # Or explicitly without: served to anyone.
    g = started("0.0.0.0:0", "--allow-unauthenticated")
    try:
        assert request(g, "GET", "/v1/models")[0] == 200
    finally:
        stop(g)

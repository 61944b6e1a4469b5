"""agentd-gateway over HTTPS (--tls-cert/--tls-key): requests checked against the test CA with
Python's ssl, server-sent events over TLS, plaintext and stalled clients on the TLS port, TLS
versions, and certificate or key files that cannot serve (exit 2, naming the file and why)."""
import http.client
import json
import os
import re
import socket
import ssl
import subprocess
import time
import urllib.request
import warnings

import pytest

from http_helpers import chat, error_of, make_pki, sse_events

OPENSSL_KEY = "-newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes"


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


def start_tls_gateway(server, pki, extra=()):
    from conftest import Gateway
    g = Gateway(server, ["--tls-cert", pki["server.pem"], "--tls-key", pki["server.key"]] + list(extra))
    g.base = f"https://{g.host}:{g.port}"
    return g


@pytest.fixture(scope="module")
def tls_gateway(server, pki):
    g = start_tls_gateway(server, pki, ["--request-timeout", "2"])
    yield g
    g.close()


def client_context(pki):
    """Trusts the test CA only, and checks the certificate names the host connected to."""
    ctx = ssl.create_default_context(cafile=pki["ca.pem"])
    assert ctx.check_hostname and ctx.verify_mode == ssl.CERT_REQUIRED
    return ctx


def https(g, pki, method, path, body=None):
    req = urllib.request.Request(g.base + path, data=json.dumps(body).encode() if body is not None else None,
                                 method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30, context=client_context(pki)) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()


def metric(g, pki, name):
    status, _, body = https(g, pki, "GET", "/metrics")
    assert status == 200
    m = re.search(rf"^{name} (\d+)$", body.decode(), re.M)
    assert m, body.decode()
    return int(m.group(1))


def test_https_requests_are_served_with_a_certificate_the_client_verifies(tls_gateway, pki):
    assert f"url=https://127.0.0.1:{tls_gateway.port}" in tls_gateway.ready_line
    status, _, body = https(tls_gateway, pki, "GET", "/v1/models")
    assert status == 200 and "echo" in [m["id"] for m in json.loads(body)["data"]]
    status, _, body = https(tls_gateway, pki, "POST", "/v1/chat/completions", chat("echo", "over https"))
    assert status == 200, body
    assert json.loads(body)["choices"][0]["message"]["content"] == "over https"
    # The A2A cards name the https:// URL the client used.
    status, _, body = https(tls_gateway, pki, "GET", "/a2a/echo/.well-known/agent-card.json")
    assert status == 200
    card = json.loads(body)
    urls = [i["url"] for i in card["supportedInterfaces"]]
    assert urls and all(u.startswith(f"https://127.0.0.1:{tls_gateway.port}/a2a/echo") for u in urls), urls


def test_a_client_that_does_not_trust_the_certificate_is_refused(tls_gateway):
    ctx = ssl.create_default_context()  # the system's CAs: not the test CA
    with pytest.raises(ssl.SSLCertVerificationError):
        with socket.create_connection((tls_gateway.host, tls_gateway.port), timeout=10) as raw:
            with ctx.wrap_socket(raw, server_hostname="127.0.0.1"):
                pass


def test_keep_alive_and_server_sent_events_over_tls(tls_gateway, pki):
    conn = http.client.HTTPSConnection(tls_gateway.host, tls_gateway.port, timeout=30,
                                       context=client_context(pki))
    try:
        for i in range(3):
            conn.request("POST", "/v1/chat/completions", json.dumps(chat("stream", f"a b c {i}", stream=True)),
                         {"Content-Type": "application/json"})
            r = conn.getresponse()
            assert r.status == 200 and r.getheader("Content-Type").startswith("text/event-stream")
            events = sse_events(r.read())
            assert events[-1] == "[DONE]"
            text = "".join(json.loads(e)["choices"][0]["delta"].get("content", "") for e in events[:-1])
            assert text.split() == ["a", "b", "c", str(i)], text
        # The same TLS connection still serves a plain request after the streams.
        conn.request("GET", "/v1/models")
        r = conn.getresponse()
        assert r.status == 200 and json.loads(r.read())["data"]
    finally:
        conn.close()


def test_tls_1_2_and_1_3_are_served_older_versions_are_not(tls_gateway, pki):
    for version in (ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3):
        ctx = client_context(pki)
        ctx.minimum_version = ctx.maximum_version = version
        with socket.create_connection((tls_gateway.host, tls_gateway.port), timeout=10) as raw:
            with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as s:
                assert s.version() == {ssl.TLSVersion.TLSv1_2: "TLSv1.2", ssl.TLSVersion.TLSv1_3: "TLSv1.3"}[version]
                s.sendall(b"GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                assert s.recv(12) == b"HTTP/1.1 200"
    # A client that offers TLS 1.1 at most (its own security level lowered so that it may).
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.set_ciphers("DEFAULT:@SECLEVEL=0")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # as they should be
        ctx.minimum_version = ssl.TLSVersion.TLSv1
        ctx.maximum_version = ssl.TLSVersion.TLSv1_1
    before = metric(tls_gateway, pki, "agentd_gateway_tls_handshake_failures_total")
    with socket.create_connection((tls_gateway.host, tls_gateway.port), timeout=10) as raw:
        with pytest.raises(ssl.SSLError) as e:
            ctx.wrap_socket(raw, server_hostname="127.0.0.1")
    assert "PROTOCOL_VERSION" in str(e.value).upper() or "VERSION" in str(e.value).upper(), e.value
    assert metric(tls_gateway, pki, "agentd_gateway_tls_handshake_failures_total") == before + 1


def test_a_plaintext_request_on_the_tls_port_is_answered_400_saying_https(tls_gateway, pki):
    with socket.create_connection((tls_gateway.host, tls_gateway.port), timeout=10) as s:
        body = json.dumps(chat("echo", "plain")).encode()
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                  b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        out = b""
        while True:  # the gateway closes the connection after its answer
            got = s.recv(65536)
            if not got:
                break
            out += got
    head, _, payload = out.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400"), out
    e = error_of(payload)
    assert e["code"] == "https_required" and "https://127.0.0.1/" in e["message"], e
    # Still serving TLS.
    assert https(tls_gateway, pki, "GET", "/v1/models")[0] == 200


def test_a_client_that_never_handshakes_is_closed_at_the_request_timeout(tls_gateway, pki):
    # Silent after connecting.
    with socket.create_connection((tls_gateway.host, tls_gateway.port), timeout=15) as s:
        start = time.monotonic()
        assert s.recv(100) == b""
        assert 1 <= time.monotonic() - start < 8
    # A handshake begun (a TLS record header announcing a ClientHello) and then stalled.
    before = metric(tls_gateway, pki, "agentd_gateway_tls_handshake_failures_total")
    with socket.create_connection((tls_gateway.host, tls_gateway.port), timeout=15) as s:
        s.sendall(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03")
        start = time.monotonic()
        try:
            assert s.recv(100) == b""
        except ConnectionResetError:
            pass
        assert 1 <= time.monotonic() - start < 8
    assert metric(tls_gateway, pki, "agentd_gateway_tls_handshake_failures_total") == before + 1
    assert https(tls_gateway, pki, "GET", "/v1/models")[0] == 200


def test_many_tls_clients_at_once_and_clients_gone_mid_stream(tls_gateway, pki):
    from concurrent.futures import ThreadPoolExecutor

    def one(i):
        conn = http.client.HTTPSConnection(tls_gateway.host, tls_gateway.port, timeout=60,
                                           context=client_context(pki))
        try:
            for j in range(3):
                conn.request("POST", "/v1/chat/completions", json.dumps(chat("stream", f"x {i} {j}", stream=True)),
                             {"Content-Type": "application/json"})
                events = sse_events(conn.getresponse().read())
                assert events[-1] == "[DONE]"
            return True
        finally:
            conn.close()

    def gone(i):
        # Hangs up (without TLS's close_notify) once the stream has started.
        raw = socket.create_connection((tls_gateway.host, tls_gateway.port), timeout=30)
        s = client_context(pki).wrap_socket(raw, server_hostname="127.0.0.1")
        body = json.dumps(chat("stream", "a b c d e f g h", stream=True)).encode()
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        assert s.recv(12).startswith(b"HTTP/1.1 200")
        raw.close()
        return True

    with ThreadPoolExecutor(32) as pool:
        results = list(pool.map(lambda i: one(i) if i % 4 else gone(i), range(64)))
    assert all(results)
    assert https(tls_gateway, pki, "POST", "/v1/chat/completions", chat("echo", "after all"))[0] == 200
    # The streams of the clients that went are closed.
    deadline = time.monotonic() + 20
    while metric(tls_gateway, pki, "agentd_gateway_streams") != 0:
        assert time.monotonic() < deadline, "streams left open"
        time.sleep(0.1)


def test_sigterm_with_tls_connections_open_exits_0(server, pki):
    g = start_tls_gateway(server, pki)
    try:
        conn = http.client.HTTPSConnection(g.host, g.port, timeout=30, context=client_context(pki))
        conn.request("GET", "/v1/models")
        assert conn.getresponse().status == 200  # left open, idle
    finally:
        g.close()  # asserts exit code 0 and no sanitizer report


# ---- files that cannot serve: exit 2 naming the file and the reason ----


def run_gateway(*args):
    from conftest import GATEWAY
    return subprocess.run([GATEWAY, "--listen", "127.0.0.1:0", "--server", "127.0.0.1:1"] + list(args),
                          capture_output=True, text=True, timeout=60)


def openssl(directory, cmd):
    subprocess.run(f"cd {directory} && {cmd}", shell=True, check=True, capture_output=True, timeout=60)


def expired_certificate(d):
    """A certificate valid only in 2020 for server.key, from a small `openssl ca`."""
    d = str(d)
    with open(os.path.join(d, "ca.cnf"), "w") as f:
        f.write("[ca]\ndefault_ca = c\n[c]\ndatabase = index.txt\nnew_certs_dir = .\nserial = serial\n"
                "default_md = sha256\npolicy = p\n[p]\ncommonName = supplied\n")
    openssl(d, "touch index.txt && echo 01 > serial && "
               "openssl req -new -key server.key -out old.csr -subj /CN=127.0.0.1 && "
               "openssl ca -batch -config ca.cnf -cert ca.pem -keyfile ca.key -in old.csr -out old.pem "
               "-startdate 20200101000000Z -enddate 20200102000000Z")
    return os.path.join(d, "old.pem")


def test_certificate_and_key_files_that_cannot_serve_exit_2(tmp_path):
    pki = make_pki(tmp_path)
    cert, key = pki["server.pem"], pki["server.key"]
    d = str(tmp_path)
    not_pem = os.path.join(d, "not.pem")
    with open(not_pem, "w") as f:
        f.write("hello\n")
    openssl(d, f"openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out other.key && "
               f"openssl pkey -in {key} -aes256 -passout pass:secret -out encrypted.key && "
               f"cp {key} open.key && chmod 644 open.key")
    cases = [
        (["--tls-cert", cert], "give both"),
        (["--tls-key", key], "give both"),
        (["--tls-cert", d + "/missing.pem", "--tls-key", key],
         f"--tls-cert {d}/missing.pem: cannot read the file: No such file or directory"),
        (["--tls-cert", d, "--tls-key", key], f"--tls-cert {d}: not a regular file"),
        (["--tls-cert", not_pem, "--tls-key", key], f"--tls-cert {not_pem}: not a PEM file"),
        (["--tls-cert", key, "--tls-key", key], f"--tls-cert {key}: no certificate in the file"),
        (["--tls-cert", cert, "--tls-key", cert], f"--tls-key {cert}: no private key in the file"),
        (["--tls-cert", cert, "--tls-key", d + "/other.key"],
         f"--tls-cert {cert} and --tls-key {d}/other.key: the key does not belong to the certificate"),
        (["--tls-cert", cert, "--tls-key", d + "/encrypted.key"],
         f"--tls-key {d}/encrypted.key: the key is protected by a passphrase"),
        (["--tls-cert", cert, "--tls-key", d + "/open.key"],
         f"--tls-key {d}/open.key: other users may read or write this private key (mode 0644): chmod 600"),
        (["--tls-cert", expired_certificate(tmp_path), "--tls-key", key],
         f"--tls-cert {d}/old.pem: the certificate expired on Jan  2 00:00:00 2020 GMT"),
    ]
    for args, message in cases:
        out = run_gateway(*args)
        assert out.returncode == 2, (args, out.stdout, out.stderr)
        assert message in out.stderr, (args, out.stderr)
        assert "ready" not in out.stdout
    # The good pair starts (and is served over TLS).
    from conftest import Gateway
    g = Gateway(type("S", (), {"host": "127.0.0.1", "port": 1})(), ["--tls-cert", cert, "--tls-key", key])
    try:
        assert "url=https://" in g.ready_line
    finally:
        g.close()

"""Helpers for the gateway tests: plain HTTP with the standard library (urllib, sockets)."""
import json
import socket
import subprocess
import urllib.error
import urllib.request


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


def a2a_rpc(gw, token, agent, method, params=None, rid=1, headers=None, raw=None):
    """One JSON-RPC request to /a2a/AGENT/ (raw: these bytes instead): (status, headers, body)."""
    body = {"jsonrpc": "2.0", "id": rid, "method": method}
    if params is not None:
        body["params"] = params
    return request(gw, "POST", f"/a2a/{agent}/", body if raw is None else None, token=token,
                   headers=headers or {}, raw=raw)


def rpc_result(status, out):
    """The result of a JSON-RPC answer that must be a success."""
    assert status == 200, out
    r = json.loads(out)
    assert r["jsonrpc"] == "2.0" and "error" not in r, r
    return r["result"]


def rpc_error(status, out, code):
    """The error object of a JSON-RPC answer that must be an error with this code."""
    r = json.loads(out)
    assert r["jsonrpc"] == "2.0" and "result" not in r, r
    assert r["error"]["code"] == code, r
    return r["error"]


def raw_exchange(gw, data, timeout=10):
    with socket.create_connection((gw.host, gw.port), timeout=timeout) as s:
        s.sendall(data)
        out = b""
        while True:
            got = s.recv(65536)
            if not got:
                return out
            out += got


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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

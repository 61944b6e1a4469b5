"""The OpenAI-compatible API of agentd-gateway, over real HTTP, against a real as_server:
models list, completions (plain and streamed), concurrency, and the errors of the API."""
import http.client
import json
import time

import pytest

from http_helpers import chat, error_of, request, sse_events


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

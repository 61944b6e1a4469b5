#!/usr/bin/env python3
"""A local stand-in for model endpoints, for the model client tests (stdlib only).

Binds 127.0.0.1 on a free port, prints "PORT <n>" on stdout, serves until stdin closes (the test
process went away) or SIGTERM.

Paths are /s/<key>/<scenario>/<api path>, where <key> keeps each test's counters and request log
apart, <scenario> says how to misbehave, and <api path> is one of
    v1/chat/completions                              OpenAI Chat Completions (JSON or SSE)
    api/chat                                         Ollama native (JSON or NDJSON)
    api/v1/services/aigc/text-generation/generation  DashScope native (JSON or SSE)
    post                                             AgentScope's generic POST API
    v1/messages                                      Anthropic Messages (JSON or SSE)
    v1beta/models/<m>:generateContent                Gemini (and :streamGenerateContent?alt=sse)
    api/generate                                     Ollama completion (JSON or NDJSON)
    v1/embeddings                                    OpenAI embeddings
    api/embed                                        Ollama embeddings
    api/v1/services/embeddings/text-embedding/text-embedding   DashScope embeddings
    v1beta/models/<m>:batchEmbedContents             Gemini embeddings
Embeddings of a text t are [len(t), words(t), position of t in the request].
GET /requests/<key> returns what was received under <key>: [{"path","headers","body","t","peer"}]
(peer: the client's port, telling its connections apart).
GET /stats/<key> returns {"in_flight", "max_in_flight"}: requests under <key> being answered now,
and the most that ever were at once.

Scenarios (tokens separated by "-"):
    ok                      a normal answer: "echo: <last message content>" (streamed if asked)
    tools                   a tool call get_weather({"city": "Paris"})
    react                   (OpenAI, not streamed) a tool call calculator({"a": 6, "b": 7, "op": "*"})
                            until the last message is a tool result; then "final: <that result>"
    usetool                 (OpenAI, not streamed) a scripted tool user: the first user message is JSON
                            {"tool": <function name>, "arguments": {...}}; it asks for that tool
                            until the last message is a tool result, then answers
                            "final: <that result>" (the MCP tests' model)
    fail-<status>-<n>       the first n requests get <status> with an error body (n=0: all)
    ratelimit-<n>-<s>       the first n requests get 429 with Retry-After: <s> seconds
    ratelimitms-<n>-<ms>    the first n requests get 429 with retry-after-ms: <ms>
    garbage                 200 with a body that is not JSON
    deeptools-<d>           (OpenAI, not streamed) tool_calls nested <d> lists deep ([[...]])
    garbagestream           a stream whose second event is not JSON
    truncated               a stream that ends (connection closed) before [DONE] / done
    cut-<n>                 a chunked stream whose connection drops mid-chunk after n events
                            (the first request only; later ones are answered normally)
    slow-<ms>               waits <ms> before answering
    slowstream-<ms>         sends one event, then waits <ms> before the rest
    errorinstream           a stream that carries an error event
    keyecho                 401 whose message repeats the Authorization header's key
    custom                  (post) answers {"result": {"text": ...}}
    openai                  (post) answers in OpenAI's form
    wrongcount              (embeddings) one embedding fewer than texts
    notnumbers              (embeddings) an embedding holding strings
"""
import json
import os
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LOCK = threading.Lock()
COUNTS = {}    # key -> number of requests so far
REQUESTS = {}  # key -> list of received requests
IN_FLIGHT = {}  # key -> requests being answered now
MAX_IN_FLIGHT = {}  # key -> the most answered at once


def last_content(messages):
    if not messages:
        return ""
    content = messages[-1].get("content")
    return content if isinstance(content, str) else json.dumps(content)


def words(text):
    return len(text.split())


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def setup(self):
        super().setup()
        # Headers and body go out in separate writes: without this, Nagle's algorithm and the
        # client's delayed ACK add 40 ms to every answer.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, *args):  # keep the test output clean
        pass

    # --- plumbing ---------------------------------------------------------------------------
    def send_json(self, status, obj, extra_headers=None):
        body = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for k, v in (extra_headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def send_raw(self, status, body, content_type="text/plain"):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def start_stream(self, content_type, chunked=True):
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Cache-Control", "no-cache")
        if chunked:
            self.send_header("Transfer-Encoding", "chunked")
        else:
            self.send_header("Connection", "close")  # body ends when the connection closes
            self.close_connection = True
        self.end_headers()
        self.chunked = chunked

    def write_piece(self, data):
        if self.chunked:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        else:
            self.wfile.write(data)
        self.wfile.flush()

    def end_stream(self):
        if self.chunked:
            self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def sse(self, obj):
        data = obj if isinstance(obj, str) else json.dumps(obj)
        self.write_piece(("data: %s\n\n" % data).encode())

    # --- routes -----------------------------------------------------------------------------
    def do_GET(self):
        parts = self.path.strip("/").split("/")
        if len(parts) == 2 and parts[0] == "requests":
            with LOCK:
                log = list(REQUESTS.get(parts[1], []))
            self.send_json(200, log)
        elif len(parts) == 2 and parts[0] == "stats":
            with LOCK:
                stats = {"in_flight": IN_FLIGHT.get(parts[1], 0), "max_in_flight": MAX_IN_FLIGHT.get(parts[1], 0)}
            self.send_json(200, stats)
        else:
            self.send_json(404, {"error": {"message": "no such path " + self.path}})

    def do_POST(self):
        key = self.path.strip("/").split("/")[1] if self.path.startswith("/s/") else ""
        with LOCK:
            IN_FLIGHT[key] = IN_FLIGHT.get(key, 0) + 1
            MAX_IN_FLIGHT[key] = max(MAX_IN_FLIGHT.get(key, 0), IN_FLIGHT[key])
        try:
            self.answer_post()
        finally:
            with LOCK:
                IN_FLIGHT[key] -= 1

    def answer_post(self):
        length = int(self.headers.get("Content-Length", "0"))
        raw = self.rfile.read(length)
        parts = self.path.strip("/").split("/")
        if len(parts) < 4 or parts[0] != "s":
            self.send_json(404, {"error": {"message": "no such path " + self.path}})
            return
        key, scenario, api = parts[1], parts[2], "/".join(parts[3:]).split("?")[0]
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        with LOCK:
            n = COUNTS.get(key, 0) + 1
            COUNTS[key] = n
            REQUESTS.setdefault(key, []).append(
                {"path": self.path, "headers": {k.lower(): v for k, v in self.headers.items()},
                 "body": body, "t": time.monotonic(),
                 "peer": self.client_address[1]})
        if body is None:
            self.send_json(400, {"error": {"message": "request body is not JSON"}})
            return
        tokens = scenario.split("-")
        name, args = tokens[0], [int(t) for t in tokens[1:]]

        # Failures common to every API.
        if name == "fail" and (args[1] == 0 or n <= args[1]):
            status = args[0]
            if api.startswith("api/") and not api.startswith("api/v1/"):
                self.send_json(status, {"error": "ollama says status %d" % status})
            elif api == "v1/messages":
                self.send_json(status, {"type": "error", "error": {"type": "overloaded_error",
                                                                   "message": "anthropic says status %d" % status}})
            elif api.startswith("api/v1/services"):
                self.send_json(status, {"code": "Throttling", "message": "dashscope says status %d" % status,
                                        "request_id": "r-1"})
            else:
                self.send_json(status, {"error": {"message": "server says status %d" % status,
                                                  "type": "test_error"}})
            return
        if name == "ratelimit" and n <= args[0]:
            self.send_json(429, {"error": {"message": "rate limited, slow down"}},
                           {"Retry-After": str(args[1])})
            return
        if name == "ratelimitms" and n <= args[0]:
            self.send_json(429, {"error": {"message": "rate limited, slow down"}},
                           {"retry-after-ms": str(args[1])})
            return
        if name == "keyecho":
            auth = self.headers.get("Authorization", "")
            key_text = auth[len("Bearer "):] if auth.startswith("Bearer ") else auth
            self.send_json(401, {"error": {"message": "Incorrect API key provided: %s" % key_text}})
            return
        if name == "garbage":
            self.send_raw(200, b"<html>this is not json {", "application/json")
            return
        if name == "slow":
            time.sleep(args[0] / 1000.0)

        if api == "v1/chat/completions":
            self.openai(body, name, args, n)
        elif api == "api/chat":
            self.ollama(body, name, args, n)
        elif api == "api/v1/services/aigc/text-generation/generation":
            self.dashscope(body, name, args, n)
        elif api == "post":
            self.post_api(body, name)
        elif api == "v1/messages":
            self.anthropic(body, name, args, n)
        elif api.startswith("v1beta/models/") and api.endswith(":batchEmbedContents"):
            texts = [r["content"]["parts"][0]["text"] for r in body.get("requests", [])]
            vectors = self.vectors(texts, name)
            self.send_json(200, {"embeddings": [{"values": v} for v in vectors]})
        elif api.startswith("v1beta/models/") and (":generateContent" in api or ":streamGenerateContent" in api):
            self.gemini(body, name, args, n, stream=":streamGenerateContent" in api)
        elif api == "api/generate":
            self.ollama_generate(body, name, args, n)
        elif api == "v1/embeddings":
            texts = body.get("input", [])
            vectors = self.vectors(texts, name)
            self.send_json(200, {"object": "list", "model": body.get("model"),
                                 "data": [{"object": "embedding", "index": i, "embedding": v}
                                          for i, v in reversed(list(enumerate(vectors)))],
                                 "usage": {"prompt_tokens": sum(words(t) for t in texts),
                                           "total_tokens": sum(words(t) for t in texts)}})
        elif api == "api/embed":
            texts = body.get("input", [])
            self.send_json(200, {"model": body.get("model"), "embeddings": self.vectors(texts, name),
                                 "prompt_eval_count": sum(words(t) for t in texts)})
        elif api == "api/v1/services/embeddings/text-embedding/text-embedding":
            texts = body.get("input", {}).get("texts", [])
            vectors = self.vectors(texts, name)
            self.send_json(200, {"request_id": "r-1",
                                 "output": {"embeddings": [{"text_index": i, "embedding": v}
                                                           for i, v in enumerate(vectors)]},
                                 "usage": {"total_tokens": sum(words(t) for t in texts)}})
        else:
            self.send_json(404, {"error": {"message": "no such api " + api}})

    # --- OpenAI -----------------------------------------------------------------------------
    def openai(self, body, name, args, n):
        messages = body.get("messages", [])
        reply = "echo: " + last_content(messages)
        prompt_tokens = sum(words(m.get("content") or "") for m in messages if isinstance(m.get("content"), str))
        usage = {"prompt_tokens": prompt_tokens, "completion_tokens": words(reply),
                 "total_tokens": prompt_tokens + words(reply)}
        tool_call = {"id": "call_1", "type": "function",
                     "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}
        last = messages[-1] if messages else {}
        if name == "deeptools":
            # Written by hand: json.dumps recurses, and 20,000 levels are past Python's limit.
            raw = ('{"id": "chatcmpl-1", "object": "chat.completion", "model": "m", "choices": [{"index": 0, '
                   '"message": {"role": "assistant", "content": null, "tool_calls": %s}, '
                   '"finish_reason": "tool_calls"}], "usage": {"prompt_tokens": 1, "completion_tokens": 1}}'
                   % ("[" * args[0] + "]" * args[0]))
            self.send_raw(200, raw.encode(), "application/json")
            return
        if name in ("react", "usetool") and last.get("role") == "tool":
            reply = "final: " + last_content(messages)
        if name == "usetool" and last.get("role") != "tool":
            script = json.loads(next(m["content"] for m in messages if m.get("role") == "user"))
            message = {"role": "assistant", "content": None, "tool_calls": [
                {"id": "call_tool_%d" % n, "type": "function",
                 "function": {"name": script["tool"], "arguments": json.dumps(script.get("arguments", {}))}}]}
            self.send_json(200, {"id": "chatcmpl-1", "object": "chat.completion", "model": body.get("model"),
                                 "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}],
                                 "usage": usage})
            return
        if not body.get("stream"):
            if name == "react" and last.get("role") != "tool":
                message = {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "call_calc_%d" % n, "type": "function",
                     "function": {"name": "calculator", "arguments": "{\"a\": 6, \"b\": 7, \"op\": \"*\"}"}}]}
                finish = "tool_calls"
            elif name == "tools":
                message = {"role": "assistant", "content": None, "tool_calls": [tool_call]}
                finish = "tool_calls"
            else:
                message = {"role": "assistant", "content": reply}
                finish = "stop"
            self.send_json(200, {"id": "chatcmpl-1", "object": "chat.completion", "model": body.get("model"),
                                 "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                                 "usage": usage})
            return

        def chunk(delta, finish=None):
            return {"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": body.get("model"),
                    "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

        cut = name == "cut" and n == 1
        self.start_stream("text/event-stream", chunked=(name != "truncated"))
        if name == "errorinstream":
            self.sse(chunk({"role": "assistant", "content": "partial "}))
            self.sse({"error": {"message": "the model is overloaded mid-stream", "type": "server_error"}})
            self.end_stream()
            return
        self.sse(chunk({"role": "assistant", "content": ""}))
        if name == "tools":
            self.sse(chunk({"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                                            "function": {"name": "get_weather", "arguments": ""}}]}))
            for piece in ["{\"city\"", ": \"Par", "is\"}"]:
                self.sse(chunk({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]}))
            self.sse(chunk({}, "tool_calls"))
        else:
            pieces = reply.split(" ")
            for i, w in enumerate(pieces):
                text = w if i == len(pieces) - 1 else w + " "
                self.sse(chunk({"content": text}))
                if i == 0 and name == "slowstream":
                    time.sleep(args[0] / 1000.0)
                if i == 0 and name == "garbagestream":
                    self.write_piece(b"data: {this is not json\n\n")
                if cut and i + 1 >= args[0]:
                    # Announce a chunk longer than what follows, then drop the connection.
                    self.wfile.write(b"400\r\ndata: {\"partial")
                    self.wfile.flush()
                    self.close_connection = True
                    return
                if name == "truncated" and i == 1:
                    self.close_connection = True
                    return
            self.sse(chunk({}, "stop"))
        if body.get("stream_options", {}).get("include_usage"):
            self.sse({"id": "chatcmpl-1", "object": "chat.completion.chunk", "choices": [], "usage": usage})
        self.sse("[DONE]")
        self.end_stream()

    # --- Ollama -----------------------------------------------------------------------------
    def ollama(self, body, name, args, n):
        messages = body.get("messages", [])
        reply = "echo: " + last_content(messages)
        if not body.get("stream", True):
            message = {"role": "assistant", "content": reply}
            if name == "tools":
                message = {"role": "assistant", "content": "",
                           "tool_calls": [{"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]}
            self.send_json(200, {"model": body.get("model"), "message": message, "done": True,
                                 "done_reason": "stop", "prompt_eval_count": 7, "eval_count": words(reply)})
            return
        self.start_stream("application/x-ndjson")
        pieces = reply.split(" ")
        for i, w in enumerate(pieces):
            text = w if i == len(pieces) - 1 else w + " "
            self.write_piece((json.dumps({"model": body.get("model"), "done": False,
                                          "message": {"role": "assistant", "content": text}}) + "\n").encode())
            if name == "truncated" and i == 1:
                self.end_stream()
                return
        self.write_piece((json.dumps({"model": body.get("model"), "done": True, "done_reason": "stop",
                                      "message": {"role": "assistant", "content": ""},
                                      "prompt_eval_count": 7, "eval_count": len(pieces)}) + "\n").encode())
        self.end_stream()

    # --- DashScope --------------------------------------------------------------------------
    def dashscope(self, body, name, args, n):
        messages = body.get("input", {}).get("messages", [])
        reply = "echo: " + last_content(messages)
        usage = {"input_tokens": 5, "output_tokens": words(reply), "total_tokens": 5 + words(reply)}
        if self.headers.get("X-DashScope-SSE") != "enable":
            self.send_json(200, {"request_id": "r-1", "usage": usage, "output": {"choices": [
                {"finish_reason": "stop", "message": {"role": "assistant", "content": reply}}]}})
            return
        self.start_stream("text/event-stream")
        pieces = reply.split(" ")
        for i, w in enumerate(pieces):
            text = w if i == len(pieces) - 1 else w + " "
            last = i == len(pieces) - 1
            event = {"request_id": "r-1", "usage": usage, "output": {"choices": [
                {"finish_reason": "stop" if last else "null", "message": {"role": "assistant", "content": text}}]}}
            self.write_piece(("id:%d\nevent:result\n:HTTP_STATUS/200\ndata:%s\n\n" % (i + 1, json.dumps(event))).encode())
            if name == "truncated" and i == 1:
                break
        self.end_stream()

    # --- AgentScope's generic POST ------------------------------------------------------------
    def post_api(self, body, name):
        messages = body.get("messages") or body.get("inputs") or []
        reply = "echo: " + last_content(messages)
        if name == "custom":
            self.send_json(200, {"result": {"text": reply}})
        elif name == "openai":
            self.send_json(200, {"choices": [{"message": {"role": "assistant", "content": reply}}],
                                 "usage": {"prompt_tokens": 3, "completion_tokens": 2}})
        else:
            self.send_json(200, {"data": {"response": {"choices": [{"message": {"content": reply}}]}}})


    # --- Embeddings (all APIs) ----------------------------------------------------------------
    def vectors(self, texts, name):
        out = [[float(len(t)), float(words(t)), float(i)] for i, t in enumerate(texts)]
        if name == "wrongcount":
            out = out[:-1]
        if name == "notnumbers" and out:
            out[0] = ["a", "b"]
        return out

    # --- Anthropic Messages -------------------------------------------------------------------
    def anthropic(self, body, name, args, n):
        messages = body.get("messages", [])
        last = messages[-1] if messages else {}
        content = last.get("content")
        if isinstance(content, list):  # tool results
            content = " ".join(b.get("content", "") if isinstance(b.get("content"), str) else ""
                               for b in content if b.get("type") == "tool_result")
        reply = "echo: " + (content or "")
        usage = {"input_tokens": 9, "output_tokens": words(reply)}
        tool = name == "tools"
        if not body.get("stream"):
            blocks = ([{"type": "text", "text": "Let me check."},
                       {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}]
                      if tool else [{"type": "text", "text": reply}])
            self.send_json(200, {"id": "msg_1", "type": "message", "role": "assistant", "model": body.get("model"),
                                 "content": blocks, "stop_reason": "tool_use" if tool else "end_turn",
                                 "usage": usage})
            return
        self.start_stream("text/event-stream", chunked=(name != "truncated"))

        def event(kind, obj):
            obj["type"] = kind
            self.write_piece(("event: %s\ndata: %s\n\n" % (kind, json.dumps(obj))).encode())

        event("message_start", {"message": {"id": "msg_1", "type": "message", "role": "assistant", "content": [],
                                            "usage": {"input_tokens": 9, "output_tokens": 1}}})
        event("ping", {})
        if name == "errorinstream":
            event("error", {"error": {"type": "overloaded_error", "message": "overloaded mid-stream"}})
            self.end_stream()
            return
        event("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}})
        pieces = (["Let ", "me ", "check."] if tool else
                  [w if i == len(reply.split(" ")) - 1 else w + " " for i, w in enumerate(reply.split(" "))])
        for i, p in enumerate(pieces):
            event("content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": p}})
            if name == "truncated" and i == 1:
                self.close_connection = True
                return
        event("content_block_stop", {"index": 0})
        if tool:
            event("content_block_start", {"index": 1, "content_block": {"type": "tool_use", "id": "toolu_1",
                                                                        "name": "get_weather", "input": {}}})
            for piece in ["{\"city\"", ": \"Par", "is\"}"]:
                event("content_block_delta", {"index": 1, "delta": {"type": "input_json_delta",
                                                                    "partial_json": piece}})
            event("content_block_stop", {"index": 1})
        event("message_delta", {"delta": {"stop_reason": "tool_use" if tool else "end_turn"},
                                "usage": {"output_tokens": len(pieces)}})
        event("message_stop", {})
        self.end_stream()

    # --- Gemini -------------------------------------------------------------------------------
    def gemini(self, body, name, args, n, stream):
        contents = body.get("contents", [])
        last_parts = contents[-1]["parts"] if contents else []
        text = "".join(p.get("text", "") for p in last_parts)
        text += "".join(p["functionResponse"]["response"].get("content", "") for p in last_parts
                        if "functionResponse" in p)
        reply = "echo: " + text
        usage = {"promptTokenCount": 6, "candidatesTokenCount": words(reply), "totalTokenCount": 6 + words(reply)}
        tool = name == "tools"

        def candidate(parts, finish=None):
            c = {"content": {"role": "model", "parts": parts}, "index": 0}
            if finish:
                c["finishReason"] = finish
            return c

        if not stream:
            if name == "blocked":
                self.send_json(200, {"promptFeedback": {"blockReason": "SAFETY"}})
                return
            parts = ([{"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}}] if tool
                     else [{"text": reply}])
            self.send_json(200, {"candidates": [candidate(parts, "STOP")], "usageMetadata": usage,
                                 "modelVersion": "fake"})
            return
        self.start_stream("text/event-stream", chunked=(name != "truncated"))
        if tool:
            self.sse({"candidates": [candidate([{"functionCall": {"name": "get_weather",
                                                                  "args": {"city": "Paris"}}}], "STOP")],
                      "usageMetadata": usage})
            self.end_stream()
            return
        pieces = reply.split(" ")
        for i, w in enumerate(pieces):
            last = i == len(pieces) - 1
            self.sse({"candidates": [candidate([{"text": w if last else w + " "}], "STOP" if last else None)],
                      "usageMetadata": usage if last else {"promptTokenCount": 6}})
            if i == 0 and name == "garbagestream":
                self.write_piece(b"data: {this is not json\n\n")
            if name == "truncated" and i == 1:
                self.close_connection = True
                return
        self.end_stream()

    # --- Ollama /api/generate -------------------------------------------------------------------
    def ollama_generate(self, body, name, args, n):
        reply = "echo: " + body.get("prompt", "")
        if not body.get("stream", True):
            self.send_json(200, {"model": body.get("model"), "response": reply, "done": True,
                                 "done_reason": "stop", "prompt_eval_count": 4, "eval_count": words(reply)})
            return
        self.start_stream("application/x-ndjson")
        pieces = reply.split(" ")
        for i, w in enumerate(pieces):
            text = w if i == len(pieces) - 1 else w + " "
            self.write_piece((json.dumps({"model": body.get("model"), "response": text, "done": False}) + "\n").encode())
            if name == "truncated" and i == 1:
                self.end_stream()
                return
        self.write_piece((json.dumps({"model": body.get("model"), "response": "", "done": True, "done_reason": "stop",
                                      "prompt_eval_count": 4, "eval_count": len(pieces)}) + "\n").encode())
        self.end_stream()


class Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024  # the listen backlog: bursts of concurrent connections

    def handle_error(self, request, client_address):
        # Clients that give up (timeouts, aborted streams) are part of the tests: stay quiet.
        if not isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            super().handle_error(request, client_address)


def main():
    server = Server(("127.0.0.1", 0), Handler)

    def watch_stdin():
        try:
            while sys.stdin.buffer.read(4096):
                pass
        finally:
            os._exit(0)

    threading.Thread(target=watch_stdin, daemon=True).start()
    print("PORT %d" % server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""agentd's own MCP server over stdio, for the fault cases the reference servers never show.

Newline-delimited JSON-RPC 2.0 on stdin/stdout (python3 stdlib only). Options:
  --version V        answer initialize with protocol version V (default: the client's)
  --page-size N      tools/list pages of N tools (nextCursor), default: all in one
  --extra-tools N    offer N more tools named extra_0 .. extra_{N-1} (to page through)
  --cancel-log FILE  append each notifications/cancelled received, as one JSON line
  --stderr-lines N   write N lines to stderr at start ("fault_server stderr line I")
  --exit-at-start S  write a line to stderr and exit with status S before reading anything
  --garbage-at-start write a line that is not JSON on stdout at start
  --more-tools       also list the stop_reading .. spawn_sleeper tools (the tests count on 12
                     tools otherwise; they are called in either case)

Tools (all servers offer them):
  echo {text}          text content "echo: TEXT"
  add {a, b}           text and structuredContent {"sum": a+b}
  slow {seconds, text} answers after `seconds` (other calls are answered meanwhile)
  never {}             never answers
  exit {status}        writes "exiting mid-call" to stderr and exits with status
  garbage {}           writes a line that is not JSON on stdout
  big {mib}            answers with a text block of MIB MiB
  env {}               text: its environment as a JSON object
  fail {}              a result with isError true
  media {}             image, audio, resource_link and resource content blocks
  change_tools {}      adds tool "added" and sends notifications/tools/list_changed
  stop_reading {}      answers, then never reads its stdin again (it stays alive)
  spam_stderr {lines}  writes LINES lines to stderr ("spam line I")
  spam_log {count}     sends COUNT notifications/message
  spam_changed {count} sends COUNT notifications/tools/list_changed
  stats {}             text: JSON {"tools_list": tools/list requests received so far}
  spawn_sleeper {}     starts `sleep 300` (in its process group); text: its pid
  ask_client {}        sends the client a ping and a sampling/createMessage request and
                       answers with what came back (text: JSON {"ping": ..., "sampling": ...})
"""

import json
import os
import sys
import threading
import time

out_lock = threading.Lock()


def send(message):
    message["jsonrpc"] = "2.0"
    data = json.dumps(message) + "\n"
    with out_lock:
        sys.stdout.write(data)
        sys.stdout.flush()


def text_result(text, **extra):
    result = {"content": [{"type": "text", "text": text}]}
    result.update(extra)
    return result


def main():
    args = sys.argv[1:]
    opts = {}
    flags = set()
    i = 0
    while i < len(args):
        a = args[i]
        if a in ("--garbage-at-start", "--more-tools"):
            flags.add(a)
            i += 1
        else:
            opts[a] = args[i + 1]
            i += 2

    if "--exit-at-start" in opts:
        sys.stderr.write("fault_server: told to exit at start\n")
        sys.stderr.flush()
        sys.exit(int(opts["--exit-at-start"]))
    for n in range(int(opts.get("--stderr-lines", "0"))):
        sys.stderr.write("fault_server stderr line %d\n" % n)
    sys.stderr.flush()
    if "--garbage-at-start" in flags:
        with out_lock:
            sys.stdout.write("this is not json\n")
            sys.stdout.flush()

    tools = [
        {"name": "echo", "description": "Echoes its text",
         "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}},
        {"name": "add", "title": "Add two numbers",
         "inputSchema": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}},
         "outputSchema": {"type": "object", "properties": {"sum": {"type": "number"}}},
         "annotations": {"readOnlyHint": True}},
        {"name": "slow", "inputSchema": {"type": "object"}},
        {"name": "never", "inputSchema": {"type": "object"}},
        {"name": "exit", "inputSchema": {"type": "object"}},
        {"name": "garbage", "inputSchema": {"type": "object"}},
        {"name": "big", "inputSchema": {"type": "object"}},
        {"name": "env", "inputSchema": {"type": "object"}},
        {"name": "fail", "inputSchema": {"type": "object"}},
        {"name": "media", "inputSchema": {"type": "object"}},
        {"name": "change_tools", "inputSchema": {"type": "object"}},
        {"name": "ask_client", "inputSchema": {"type": "object"}},
    ]
    # Tools the tests count on not being listed by default (the list has 12 tools).
    hidden = {"stop_reading", "spam_stderr", "spam_log", "spam_changed", "stats", "spawn_sleeper"}
    if "--more-tools" in flags:
        tools += [{"name": n, "inputSchema": {"type": "object"}} for n in sorted(hidden)]
    for n in range(int(opts.get("--extra-tools", "0"))):
        tools.append({"name": "extra_%d" % n, "inputSchema": {"type": "object"}})
    page_size = int(opts.get("--page-size", "0")) or len(tools) + 1000
    cancel_log = opts.get("--cancel-log")

    # Requests this server sent the client, by id: the ask_client call waiting for them.
    asked = {}
    state = {"stop_reading": False, "tools_list": 0}

    def call(req_id, name, arguments):
        if name == "echo":
            send({"id": req_id, "result": text_result("echo: " + str(arguments.get("text", "")))})
        elif name == "add":
            s = arguments.get("a", 0) + arguments.get("b", 0)
            send({"id": req_id, "result": text_result(str(s), structuredContent={"sum": s})})
        elif name == "slow":
            def later():
                time.sleep(float(arguments.get("seconds", 1)))
                send({"id": req_id, "result": text_result("slow: " + str(arguments.get("text", "")))})
            threading.Thread(target=later, daemon=True).start()
        elif name == "never":
            pass
        elif name == "exit":
            sys.stderr.write("exiting mid-call\n")
            sys.stderr.flush()
            os._exit(int(arguments.get("status", 3)))
        elif name == "garbage":
            with out_lock:
                sys.stdout.write("<html>not json</html>\n")
                sys.stdout.flush()
        elif name == "big":
            size = int(float(arguments.get("mib", 100)) * (1 << 20))
            with out_lock:
                sys.stdout.write('{"jsonrpc": "2.0", "id": %s, "result": {"content": [{"type": "text", "text": "'
                                 % json.dumps(req_id))
                chunk = "x" * (1 << 20)
                written = 0
                try:
                    while written < size:
                        sys.stdout.write(chunk[: min(len(chunk), size - written)])
                        written += len(chunk)
                    sys.stdout.write('"}]}}\n')
                    sys.stdout.flush()
                except BrokenPipeError:
                    os._exit(0)
        elif name == "env":
            send({"id": req_id, "result": text_result(json.dumps(dict(os.environ)))})
        elif name == "fail":
            send({"id": req_id, "result": {"content": [{"type": "text", "text": "it went wrong"}], "isError": True}})
        elif name == "media":
            send({"id": req_id, "result": {"content": [
                {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"},
                {"type": "audio", "data": "UklGRg==", "mimeType": "audio/wav"},
                {"type": "resource_link", "uri": "file:///tmp/x.txt", "name": "x.txt"},
                {"type": "resource", "resource": {"uri": "file:///tmp/y.txt", "mimeType": "text/plain",
                                                  "text": "embedded"}},
            ]}})
        elif name == "change_tools":
            if not any(t["name"] == "added" for t in tools):
                tools.append({"name": "added", "inputSchema": {"type": "object"}})
            send({"id": req_id, "result": text_result("changed")})
            send({"method": "notifications/tools/list_changed"})
        elif name == "stop_reading":
            state["stop_reading"] = True
            send({"id": req_id, "result": text_result("not reading any more")})
        elif name == "spam_stderr":
            for n in range(int(arguments.get("lines", 100))):
                sys.stderr.write("spam line %d\n" % n)
            sys.stderr.flush()
            send({"id": req_id, "result": text_result("spammed")})
        elif name == "spam_log":
            for n in range(int(arguments.get("count", 100))):
                send({"method": "notifications/message", "params": {"level": "info", "data": "log %d" % n}})
            send({"id": req_id, "result": text_result("logged")})
        elif name == "spam_changed":
            for n in range(int(arguments.get("count", 100))):
                send({"method": "notifications/tools/list_changed"})
            send({"id": req_id, "result": text_result("changed")})
        elif name == "stats":
            send({"id": req_id, "result": text_result(json.dumps({"tools_list": state["tools_list"]}))})
        elif name == "spawn_sleeper":
            import subprocess
            child = subprocess.Popen(["sleep", "300"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
            send({"id": req_id, "result": text_result(str(child.pid))})
        elif name == "ask_client":
            asked["ping-1"] = None
            asked["sample-1"] = None
            asked["caller"] = req_id
            send({"id": "ping-1", "method": "ping"})
            send({"id": "sample-1", "method": "sampling/createMessage",
                  "params": {"messages": [], "maxTokens": 1}})
        else:
            send({"id": req_id, "error": {"code": -32602, "message": "Unknown tool: " + str(name)}})

    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        msg = json.loads(line)
        method = msg.get("method")
        req_id = msg.get("id")
        if method is None:
            # An answer to one of our requests.
            if req_id in asked:
                asked[req_id] = msg
                if asked.get("ping-1") is not None and asked.get("sample-1") is not None:
                    caller = asked.pop("caller")
                    text = json.dumps({"ping": asked.pop("ping-1"), "sampling": asked.pop("sample-1")})
                    send({"id": caller, "result": text_result(text)})
            continue
        if method == "initialize":
            version = opts.get("--version", msg["params"].get("protocolVersion"))
            send({"id": req_id, "result": {
                "protocolVersion": version,
                "capabilities": {"tools": {"listChanged": True}},
                "serverInfo": {"name": "fault-server", "version": "1.2.3"},
                "client": msg["params"],  # what the client sent, for the tests
            }})
        elif method == "notifications/initialized":
            pass
        elif method == "notifications/cancelled":
            if cancel_log:
                with open(cancel_log, "a") as f:
                    f.write(json.dumps(msg.get("params", {})) + "\n")
        elif method == "ping":
            send({"id": req_id, "result": {}})
        elif method == "tools/list":
            state["tools_list"] += 1
            cursor = (msg.get("params") or {}).get("cursor")
            start = int(cursor) if cursor else 0
            page = tools[start:start + page_size]
            result = {"tools": page}
            if start + page_size < len(tools):
                result["nextCursor"] = str(start + page_size)
            send({"id": req_id, "result": result})
        elif method == "tools/call":
            params = msg.get("params") or {}
            call(req_id, params.get("name"), params.get("arguments") or {})
            if state["stop_reading"]:
                while True:
                    time.sleep(3600)
        elif req_id is not None:
            send({"id": req_id, "error": {"code": -32601, "message": "Method not found: " + method}})


if __name__ == "__main__":
    main()

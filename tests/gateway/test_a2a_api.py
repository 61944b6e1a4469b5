"""A2A 1.0 (JSON-RPC binding) of agentd-gateway, over real HTTP, against a real as_server: the
agent cards, SendMessage (completed and failed), SendStreamingMessage, GetTask, ListTasks,
CancelTask, the A2A-Version header, and bad JSON-RPC. A2A 0.3 is in test_a2a_v03.py."""
import json
import threading
import time
import uuid

import pytest

from http_helpers import a2a_rpc, request, rpc_error as error_of, rpc_result as result_of, sse_events

V1 = {"A2A-Version": "1.0"}


def rpc(gw, token, agent, method, params=None, rid=1, headers=V1, raw=None):
    return a2a_rpc(gw, token, agent, method, params, rid, headers, raw)


def message(text, **extra):
    m = {"role": "ROLE_USER", "parts": [{"text": text}], "messageId": str(uuid.uuid4())}
    m.update(extra)
    return {"message": m}


def test_agent_card_describes_the_agent_and_its_endpoint(gateway, token):
    status, headers, body = request(gateway, "GET", "/a2a/echo/.well-known/agent-card.json", token=token)
    assert status == 200, body
    card = json.loads(body)
    assert card["name"] == "echo"
    # The 1.0 interface (a 0.3 one at the same URL follows: test_a2a_v03.py).
    assert card["supportedInterfaces"][0] == {"url": f"{gateway.base}/a2a/echo/", "protocolBinding": "JSONRPC",
                                              "protocolVersion": "1.0"}
    assert card["capabilities"]["streaming"] is True
    assert card["capabilities"]["pushNotifications"] is False
    assert card["defaultInputModes"] == ["text/plain"] and card["skills"]
    assert card["securitySchemes"]["bearer"]["httpAuthSecurityScheme"]["scheme"] == "Bearer"
    for field in ("description", "version", "defaultOutputModes"):
        assert card[field]


def test_gateway_card_lists_every_agent(gateway, token):
    status, _, body = request(gateway, "GET", "/.well-known/agent-card.json", token=token)
    assert status == 200, body
    card = json.loads(body)
    assert {"echo", "stream", "flaky"} <= {s["id"] for s in card["skills"]}
    urls = {i["tenant"]: i["url"] for i in card["supportedInterfaces"]}
    assert urls["echo"] == f"{gateway.base}/a2a/echo/"


def test_card_of_an_unknown_agent_is_404(gateway, token):
    status, _, _ = request(gateway, "GET", "/a2a/nobody/.well-known/agent-card.json", token=token)
    assert status == 404


def test_a2a_needs_the_token_too(gateway):
    status, _, _ = rpc(gateway, None, "echo", "SendMessage", message("hi"))
    assert status == 401


def test_send_message_answers_a_completed_task_with_the_reply_as_artifact(gateway, token):
    status, headers, out = rpc(gateway, token, "echo", "SendMessage", message("hello a2a"), rid="r-1")
    assert headers["A2A-Version"] == "1.0"
    assert json.loads(out)["id"] == "r-1"
    task = result_of(status, out)["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert task["status"]["timestamp"].endswith("Z")
    assert task["artifacts"][0]["parts"] == [{"text": "hello a2a"}]
    assert task["contextId"] and task["id"]
    assert task["history"][0]["parts"] == [{"text": "hello a2a"}]
    assert task["history"][0]["taskId"] == task["id"]


def test_the_context_id_given_is_kept(gateway, token):
    task = result_of(*rpc(gateway, token, "echo", "SendMessage", message("hi", contextId="ctx-42"))[::2])["task"]
    assert task["contextId"] == "ctx-42"


def test_agent_failure_is_a_failed_task_with_the_typed_error(gateway, token):
    task = result_of(*rpc(gateway, token, "flaky", "SendMessage", message("fail"))[::2])["task"]
    assert task["status"]["state"] == "TASK_STATE_FAILED"
    m = task["status"]["message"]
    assert m["role"] == "ROLE_AGENT"
    assert "asked to fail" in m["parts"][0]["text"]
    info = m["metadata"]["agentd"]["error"]
    assert info["reason"] == "AGENT_FAILED" and info["metadata"]["code"] == "agent_failed"


def test_streaming_sends_the_task_the_chunks_and_the_final_status(gateway, token):
    status, headers, out = rpc(gateway, token, "stream", "SendStreamingMessage", message("one two three"), rid=7)
    assert status == 200
    assert headers["Content-Type"] == "text/event-stream"
    events = [json.loads(e) for e in sse_events(out)]
    assert all(e["jsonrpc"] == "2.0" and e["id"] == 7 for e in events)
    results = [e["result"] for e in events]
    assert results[0]["task"]["status"]["state"] == "TASK_STATE_WORKING"
    task_id = results[0]["task"]["id"]
    assert results[1]["statusUpdate"]["status"]["state"] == "TASK_STATE_WORKING"
    updates = [r["artifactUpdate"] for r in results if "artifactUpdate" in r]
    assert [u["artifact"]["parts"][0]["text"] for u in updates] == ["one ", "two ", "three", ""]
    assert [u["append"] for u in updates] == [False, True, True, True]
    assert updates[-1]["lastChunk"] is True
    assert all(u["taskId"] == task_id for u in updates)
    final = results[-1]["statusUpdate"]
    assert final["status"]["state"] == "TASK_STATE_COMPLETED" and final["taskId"] == task_id
    # The finished task holds the whole reply.
    task = result_of(*rpc(gateway, token, "stream", "GetTask", {"id": task_id})[::2])
    assert task["artifacts"][0]["parts"] == [{"text": "one two three"}]


def test_streaming_an_agent_that_does_not_stream_sends_the_whole_reply(gateway, token):
    status, _, out = rpc(gateway, token, "echo", "SendStreamingMessage", message("all at once"))
    results = [json.loads(e)["result"] for e in sse_events(out)]
    updates = [r["artifactUpdate"] for r in results if "artifactUpdate" in r]
    assert len(updates) == 1 and updates[0]["artifact"]["parts"] == [{"text": "all at once"}]
    assert updates[0]["lastChunk"] is True
    assert results[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"


def test_streaming_failure_ends_with_a_failed_status(gateway, token):
    status, _, out = rpc(gateway, token, "flaky", "SendStreamingMessage", message("fail"))
    assert status == 200
    final = json.loads(sse_events(out)[-1])["result"]["statusUpdate"]
    assert final["status"]["state"] == "TASK_STATE_FAILED"
    assert "asked to fail" in final["status"]["message"]["parts"][0]["text"]


def test_get_task_and_task_not_found(gateway, token):
    task = result_of(*rpc(gateway, token, "echo", "SendMessage", message("keep me"))[::2])["task"]
    got = result_of(*rpc(gateway, token, "echo", "GetTask", {"id": task["id"]})[::2])
    assert got["id"] == task["id"] and got["status"]["state"] == "TASK_STATE_COMPLETED"
    no_history = result_of(*rpc(gateway, token, "echo", "GetTask", {"id": task["id"], "historyLength": 0})[::2])
    assert "history" not in no_history
    e = error_of(*rpc(gateway, token, "echo", "GetTask", {"id": "no-such-task"})[::2], -32001)
    assert "no-such-task" in e["message"]
    # A task belongs to its agent.
    error_of(*rpc(gateway, token, "stream", "GetTask", {"id": task["id"]})[::2], -32001)


def test_list_tasks_newest_first_filtered_and_paged(gateway, token):
    ctx = str(uuid.uuid4())
    ids = [result_of(*rpc(gateway, token, "echo", "SendMessage", message(f"m{i}", contextId=ctx))[::2])["task"]["id"]
           for i in range(3)]
    page = result_of(*rpc(gateway, token, "echo", "ListTasks", {"contextId": ctx})[::2])
    assert [t["id"] for t in page["tasks"]] == ids[::-1]
    assert page["nextPageToken"] == "" and page["totalSize"] == 3
    assert all("artifacts" not in t for t in page["tasks"])
    first = result_of(*rpc(gateway, token, "echo", "ListTasks", {"contextId": ctx, "pageSize": 2,
                                                                 "includeArtifacts": True})[::2])
    assert [t["id"] for t in first["tasks"]] == [ids[2], ids[1]] and first["nextPageToken"]
    assert first["tasks"][0]["artifacts"][0]["parts"] == [{"text": "m2"}]
    rest = result_of(*rpc(gateway, token, "echo", "ListTasks", {"contextId": ctx, "pageSize": 2,
                                                                "pageToken": first["nextPageToken"]})[::2])
    assert [t["id"] for t in rest["tasks"]] == [ids[0]] and rest["nextPageToken"] == ""
    done = result_of(*rpc(gateway, token, "echo", "ListTasks", {"contextId": ctx,
                                                                "status": "TASK_STATE_FAILED"})[::2])
    assert done["tasks"] == []
    error_of(*rpc(gateway, token, "echo", "ListTasks", {"pageSize": 0})[::2], -32602)
    error_of(*rpc(gateway, token, "echo", "ListTasks", {"status": "DONE"})[::2], -32602)


def test_cancel_a_running_task(gateway, token):
    # returnImmediately: the working task at once; the slow agent answers 2.5 s later.
    params = message("slowly")
    params["configuration"] = {"returnImmediately": True}
    task = result_of(*rpc(gateway, token, "slow", "SendMessage", params)[::2])["task"]
    assert task["status"]["state"] == "TASK_STATE_WORKING"
    canceled = result_of(*rpc(gateway, token, "slow", "CancelTask", {"id": task["id"]})[::2])
    assert canceled["status"]["state"] == "TASK_STATE_CANCELED"
    error_of(*rpc(gateway, token, "slow", "CancelTask", {"id": task["id"]})[::2], -32002)
    time.sleep(3)  # the agent's answer came, and was dropped
    got = result_of(*rpc(gateway, token, "slow", "GetTask", {"id": task["id"]})[::2])
    assert got["status"]["state"] == "TASK_STATE_CANCELED"
    error_of(*rpc(gateway, token, "slow", "CancelTask", {"id": "nope"})[::2], -32001)


def test_a_finished_task_is_not_cancelable(gateway, token):
    task = result_of(*rpc(gateway, token, "echo", "SendMessage", message("done"))[::2])["task"]
    error_of(*rpc(gateway, token, "echo", "CancelTask", {"id": task["id"]})[::2], -32002)


def test_return_immediately_then_poll(gateway, token):
    params = message("poll me")
    params["configuration"] = {"returnImmediately": True}
    task = result_of(*rpc(gateway, token, "echo", "SendMessage", params)[::2])["task"]
    for _ in range(100):
        got = result_of(*rpc(gateway, token, "echo", "GetTask", {"id": task["id"]})[::2])
        if got["status"]["state"] != "TASK_STATE_WORKING":
            break
        time.sleep(0.05)
    assert got["status"]["state"] == "TASK_STATE_COMPLETED"
    assert got["artifacts"][0]["parts"] == [{"text": "poll me"}]


def test_version_header(gateway, token):
    # No header is A2A 0.3 (test_a2a_v03.py), which has no SendMessage: the error says what to send.
    e = error_of(*rpc(gateway, token, "echo", "SendMessage", message("hi"), headers={})[::2], -32601)
    assert "A2A-Version: 1.0" in e["message"]
    error_of(*rpc(gateway, token, "echo", "SendMessage", message("hi"), headers={"A2A-Version": "0.5"})[::2],
             -32009)
    status, _, out = request(gateway, "POST", "/a2a/echo/?A2A-Version=1.0",
                             {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": message("q")},
                             token=token)
    assert result_of(status, out)["task"]["status"]["state"] == "TASK_STATE_COMPLETED"


@pytest.mark.parametrize("raw, code, rid", [
    (b"{not json", -32700, None),
    (b"[]", -32600, None),
    (b'{"id": 3, "method": "SendMessage"}', -32600, 3),
    (b'{"jsonrpc": "2.0", "id": 4, "method": 5}', -32600, 4),
    (b'{"jsonrpc": "2.0", "id": 5, "method": "NoSuchMethod"}', -32601, 5),
    (b'{"jsonrpc": "2.0", "id": 6, "method": "SendMessage", "params": []}', -32602, 6),
    (b'{"jsonrpc": "2.0", "id": 7, "method": "SendMessage", "params": {}}', -32602, 7),
    (b'{"jsonrpc": "2.0", "id": 8, "method": "SendMessage", "params": {"message": '
     b'{"messageId": "m", "role": "ROLE_USER", "parts": []}}}', -32602, 8),
    (b'{"jsonrpc": "2.0", "id": 9, "method": "SendMessage", "params": {"message": '
     b'{"messageId": "m", "role": "ROLE_USER", "parts": [{"url": "http://x/y.png"}]}}}', -32005, 9),
    (b'{"jsonrpc": "2.0", "id": 10, "method": "GetTask", "params": {}}', -32602, 10),
    (b'{"jsonrpc": "2.0", "id": 11, "method": "SubscribeToTask", "params": {"id": "x"}}', -32001, 11),
    (b'{"jsonrpc": "2.0", "id": 12, "method": "GetExtendedAgentCard"}', -32004, 12),
    (b'{"jsonrpc": "2.0", "id": 13, "method": "CreateTaskPushNotificationConfig", "params": {}}', -32003, 13),
])
def test_bad_json_rpc(gateway, token, raw, code, rid):
    status, _, out = rpc(gateway, token, "echo", None, raw=raw)
    assert status == 200
    e = json.loads(out)
    assert e["id"] == rid
    assert e["error"]["code"] == code and e["error"]["message"]


def test_unknown_agent_and_paths(gateway, token):
    status, _, out = rpc(gateway, token, "nobody", "SendMessage", message("hi"))
    assert status == 404 and json.loads(out)["error"]["code"] == -32000
    status, _, _ = request(gateway, "POST", "/a2a/echo/elsewhere", {}, token=token)
    assert status == 404
    status, _, _ = request(gateway, "GET", "/a2a/echo/", token=token)
    assert status == 405


def test_concurrent_sends_each_get_their_own_task(gateway, token):
    out = {}

    def one(i):
        out[i] = result_of(*rpc(gateway, token, "echo", "SendMessage", message(f"n{i}"), rid=i)[::2])["task"]

    threads = [threading.Thread(target=one, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(out[i]["artifacts"][0]["parts"] == [{"text": f"n{i}"}] for i in range(16))
    assert len({t["id"] for t in out.values()}) == 16


def test_the_task_store_is_bounded_and_forgets_finished_tasks(server):
    from conftest import Gateway
    g = Gateway(server, ["--a2a-max-tasks", "2", "--a2a-task-ttl", "1"])
    try:
        ids = [result_of(*rpc(g, None, "echo", "SendMessage", message(f"t{i}"))[::2])["task"]["id"]
               for i in range(3)]
        # The third evicted the first (the finished task updated longest ago).
        error_of(*rpc(g, None, "echo", "GetTask", {"id": ids[0]})[::2], -32001)
        assert result_of(*rpc(g, None, "echo", "GetTask", {"id": ids[2]})[::2])["id"] == ids[2]
        time.sleep(1.5)
        error_of(*rpc(g, None, "echo", "GetTask", {"id": ids[2]})[::2], -32001)
        # All working: a new task is refused, not evicting one.
        params = message("slowly")
        params["configuration"] = {"returnImmediately": True}
        for _ in range(2):
            assert result_of(*rpc(g, None, "slow", "SendMessage", params)[::2])["task"]["status"]["state"] == \
                "TASK_STATE_WORKING"
        e = error_of(*rpc(g, None, "slow", "SendMessage", params)[::2], -32603)
        assert "working" in e["message"]
    finally:
        g.close()


def test_subscribe_to_a_running_task(gateway, token):
    params = message("watch me")
    params["configuration"] = {"returnImmediately": True}
    task = result_of(*rpc(gateway, token, "slow", "SendMessage", params)[::2])["task"]
    status, headers, out = rpc(gateway, token, "slow", "SubscribeToTask", {"id": task["id"]}, rid="sub")
    assert status == 200 and headers["Content-Type"] == "text/event-stream"
    results = [json.loads(e)["result"] for e in sse_events(out)]
    assert results[0]["task"]["id"] == task["id"]
    assert results[0]["task"]["status"]["state"] == "TASK_STATE_WORKING"
    updates = [r["artifactUpdate"] for r in results if "artifactUpdate" in r]
    assert len(updates) == 1 and updates[0]["artifact"]["parts"] == [{"text": "watch me"}]
    assert updates[0]["lastChunk"] is True and updates[0]["append"] is False
    assert results[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
    # Once finished, there is nothing to subscribe to.
    error_of(*rpc(gateway, token, "slow", "SubscribeToTask", {"id": task["id"]})[::2], -32004)


def test_cancel_ends_a_live_stream_at_once(gateway, token):
    ctx = str(uuid.uuid4())
    got = {}

    def stream():
        got["out"] = rpc(gateway, token, "slow", "SendStreamingMessage", message("cancel me", contextId=ctx))
        got["at"] = time.monotonic()

    t = threading.Thread(target=stream)
    t.start()
    for _ in range(200):
        tasks = result_of(*rpc(gateway, token, "slow", "ListTasks", {"contextId": ctx})[::2])["tasks"]
        if tasks:
            break
        time.sleep(0.01)
    canceled_at = time.monotonic()
    canceled = result_of(*rpc(gateway, token, "slow", "CancelTask", {"id": tasks[0]["id"]})[::2])
    assert canceled["status"]["state"] == "TASK_STATE_CANCELED"
    t.join(timeout=30)
    assert got["at"] - canceled_at < 1.5  # not when the agent's call returns (2.5 s)
    status, _, out = got["out"]
    results = [json.loads(e)["result"] for e in sse_events(out)]
    assert results[0]["task"]["id"] == tasks[0]["id"]
    assert results[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_CANCELED"
    assert not any("artifactUpdate" in r for r in results)

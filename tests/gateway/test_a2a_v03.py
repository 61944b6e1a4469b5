"""A2A 0.3 (JSON-RPC) of agentd-gateway over raw HTTP, against a real as_server: the wire chosen by
the A2A-Version header (none means 0.3), 0.3's objects, its errors, and the card both versions
read. The official 0.3 client drives the same paths in node/a2a_v03.test.js."""
import json
import uuid

import pytest

from http_helpers import a2a_rpc as rpc, request, rpc_error as error_of, rpc_result as result_of, sse_events


def message(text, **extra):
    m = {"kind": "message", "role": "user", "parts": [{"kind": "text", "text": text}],
         "messageId": str(uuid.uuid4())}
    m.update(extra)
    return {"message": m}


def test_no_version_header_is_0_3(gateway, token):
    status, headers, out = rpc(gateway, token, "echo", "message/send", message("plain 0.3"), rid="a")
    task = result_of(status, out)
    assert headers["A2A-Version"] == "0.3"
    assert json.loads(out)["id"] == "a"
    assert task["kind"] == "task" and task["status"]["state"] == "completed"
    assert task["artifacts"][0]["parts"] == [{"kind": "text", "text": "plain 0.3"}]
    assert task["history"][0]["kind"] == "message" and task["history"][0]["role"] == "user"
    assert task["history"][0]["parts"] == [{"kind": "text", "text": "plain 0.3"}]


@pytest.mark.parametrize("version", ["0.3", "0.3.0"])
def test_version_0_3_named(gateway, token, version):
    status, headers, out = rpc(gateway, token, "echo", "message/send", message("named"),
                               headers={"A2A-Version": version})
    assert result_of(status, out)["status"]["state"] == "completed"
    assert headers["A2A-Version"] == "0.3"


def test_other_versions_are_not_supported(gateway, token):
    e = error_of(*rpc(gateway, token, "echo", "message/send", message("x"), headers={"A2A-Version": "0.2"})[::2],
                 -32009)
    assert "0.3" in e["message"] and "1.0" in e["message"]
    assert e["data"][0]["metadata"]["supportedVersions"] == "0.3, 1.0"
    status, _, out = request(gateway, "POST", "/a2a/echo/?A2A-Version=2.0",
                             {"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": message("q")},
                             token=token)
    error_of(status, out, -32009)


def test_methods_of_the_other_version_say_which_header_to_send(gateway, token):
    e = error_of(*rpc(gateway, token, "echo", "SendMessage", {"message": {"messageId": "m", "parts": [{"text": "x"}]}})
                 [::2], -32601)
    assert "A2A-Version: 1.0" in e["message"]
    e = error_of(*rpc(gateway, token, "echo", "message/send", message("x"), headers={"A2A-Version": "1.0"})[::2],
                 -32601)
    assert "0.3" in e["message"]
    error_of(*rpc(gateway, token, "echo", "tasks/list")[::2], -32601)


def test_a_1_0_message_shape_or_bad_parts_are_invalid_params(gateway, token):
    bad = [
        {"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "x"}]}},  # a 1.0 role
        {"message": {"messageId": "m", "role": "user", "parts": []}},
        {"message": {"role": "user", "parts": [{"kind": "text", "text": "x"}]}},  # no messageId
        {"message": {"messageId": "m", "role": "user", "parts": [{"kind": "text", "text": 5}]}},
        {"message": {"messageId": "m", "role": "user", "parts": [{"kind": "image"}]}},
        {"message": {"messageId": "m", "kind": "task", "parts": [{"kind": "text", "text": "x"}]}},
        {"message": {"messageId": "m", "parts": [{"kind": "text", "text": "x"}]}, "configuration": {"blocking": 1}},
        {"message": {"messageId": "m", "parts": [{"kind": "text", "text": "x"}]},
         "configuration": {"historyLength": -1}},
    ]
    for params in bad:
        e = error_of(*rpc(gateway, token, "echo", "message/send", params)[::2], -32602)
        assert e["message"].startswith("Invalid parameters: "), e


def test_file_and_data_parts_are_content_type_not_supported(gateway, token):
    for p in ({"kind": "file", "file": {"uri": "http://x/a.png"}}, {"kind": "data", "data": {"a": 1}}):
        params = {"message": {"kind": "message", "messageId": "m", "role": "user", "parts": [p]}}
        e = error_of(*rpc(gateway, token, "echo", "message/send", params)[::2], -32005)
        assert "parts[0]" in e["message"]


def test_stream_events_have_kinds_and_a_final_flag(gateway, token):
    status, headers, out = rpc(gateway, token, "stream", "message/stream", message("a b"), rid=9)
    assert status == 200 and headers["Content-Type"] == "text/event-stream"
    events = [json.loads(e) for e in sse_events(out)]
    assert all(e["id"] == 9 for e in events)
    results = [e["result"] for e in events]
    assert [r["kind"] for r in results] == ["task", "status-update", "artifact-update", "artifact-update",
                                            "artifact-update", "status-update"]
    assert [r["final"] for r in results if r["kind"] == "status-update"] == [False, True]
    assert results[-1]["status"]["state"] == "completed"
    assert results[2]["artifact"]["parts"] == [{"kind": "text", "text": "a "}]


def test_failed_task_and_streamed_failure(gateway, token):
    task = result_of(*rpc(gateway, token, "flaky", "message/send", message("fail"))[::2])
    assert task["status"]["state"] == "failed"
    m = task["status"]["message"]
    assert m["kind"] == "message" and m["role"] == "agent"
    assert "asked to fail" in m["parts"][0]["text"] and m["parts"][0]["kind"] == "text"
    assert m["metadata"]["agentd"]["error"]["metadata"]["code"] == "agent_failed"
    status, _, out = rpc(gateway, token, "flaky", "message/stream", message("fail"))
    last = json.loads(sse_events(out)[-1])["result"]
    assert last["kind"] == "status-update" and last["final"] is True and last["status"]["state"] == "failed"


def test_get_cancel_and_their_errors(gateway, token):
    working = result_of(*rpc(gateway, token, "slow", "message/send",
                             {**message("wait"), "configuration": {"blocking": False}})[::2])
    assert working["status"]["state"] == "working"
    got = result_of(*rpc(gateway, token, "slow", "tasks/get", {"id": working["id"], "historyLength": 0})[::2])
    assert got["kind"] == "task" and "history" not in got
    canceled = result_of(*rpc(gateway, token, "slow", "tasks/cancel", {"id": working["id"]})[::2])
    assert canceled["status"]["state"] == "canceled"
    e = error_of(*rpc(gateway, token, "slow", "tasks/cancel", {"id": working["id"]})[::2], -32002)
    assert "canceled" in e["message"]
    e = error_of(*rpc(gateway, token, "slow", "tasks/resubscribe", {"id": working["id"]})[::2], -32004)
    assert "tasks/get" in e["message"]
    error_of(*rpc(gateway, token, "slow", "tasks/get", {"id": "nope"})[::2], -32001)
    error_of(*rpc(gateway, token, "slow", "tasks/get", {})[::2], -32602)


def test_push_notifications_and_extended_card_are_not_there(gateway, token):
    error_of(*rpc(gateway, token, "echo", "tasks/pushNotificationConfig/set", {"taskId": "t"})[::2], -32003)
    error_of(*rpc(gateway, token, "echo", "agent/getAuthenticatedExtendedCard")[::2], -32007)


def test_a_task_made_over_1_0_reads_over_0_3(gateway, token):
    m = {"message": {"role": "ROLE_USER", "parts": [{"text": "from 1.0"}], "messageId": str(uuid.uuid4())}}
    task = result_of(*rpc(gateway, token, "echo", "SendMessage", m, headers={"A2A-Version": "1.0"})[::2])["task"]
    got = result_of(*rpc(gateway, token, "echo", "tasks/get", {"id": task["id"]})[::2])
    assert got["status"]["state"] == "completed"
    assert got["history"][0]["parts"] == [{"kind": "text", "text": "from 1.0"}]


def test_one_card_serves_both_versions(gateway, token):
    status, _, body = request(gateway, "GET", "/a2a/echo/.well-known/agent-card.json", token=token)
    assert status == 200, body
    card = json.loads(body)
    url = f"{gateway.base}/a2a/echo/"
    # A2A 1.0: an interface per version, at the same URL.
    assert card["supportedInterfaces"] == [
        {"url": url, "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
        {"url": url, "protocolBinding": "JSONRPC", "protocolVersion": "0.3"}]
    # A2A 0.3's required fields.
    assert card["protocolVersion"] == "0.3.0" and card["url"] == url and card["preferredTransport"] == "JSONRPC"
    for field in ("name", "description", "version", "capabilities", "defaultInputModes", "defaultOutputModes",
                  "skills"):
        assert card[field], field
    # The bearer token in both versions' terms.
    bearer = card["securitySchemes"]["bearer"]
    assert bearer["httpAuthSecurityScheme"]["scheme"] == "Bearer"
    assert bearer["type"] == "http" and bearer["scheme"] == "Bearer"
    assert card["security"] == [{"bearer": []}]
    assert card["securityRequirements"] == [{"schemes": {"bearer": {"list": []}}}]


def test_open_gateway_card_has_no_security(open_gateway):
    status, _, body = request(open_gateway, "GET", "/a2a/echo/.well-known/agent-card.json")
    card = json.loads(body)
    assert status == 200 and card["url"].endswith("/a2a/echo/")
    assert "security" not in card and "securitySchemes" not in card

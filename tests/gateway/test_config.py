"""agentd-gateway --config: only the configured entries are exposed, under their names; fixed
entries reach their agent; per-conversation entries make an agent per A2A contextId / OpenAI
conversation key on first use, reuse it, and delete it after the idle timeout (and at a clean
stop); cards and /v1/models carry the entries' descriptions and skills; a bad config stops the
gateway at start (exit code 2, FILE:LINE:COLUMN). Real as_server and gateway processes."""
import json
import os
import subprocess
import threading
import time
import uuid

import pytest

from conftest import AGENTCTL, GATEWAY, Gateway, start_server
from http_helpers import error_of, request, sse_events

SOURCE_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
V1 = {"A2A-Version": "1.0"}

CONFIG = """
entries:
  desk:                      # a fixed agent, renamed
    agent: echo
    description: The front desk
    skills:
      - id: greet
        name: Greet
        description: Says hello back
        tags: [hello, desk]
        examples: ["hi there"]
  missing:
    agent: no-such-agent
  trail:                     # replies "TEXT>NAME": the name is the conversation agent's id
    class: TrailAgent
    description: A trail per conversation.
  brief:                     # the same, forgotten after 1 s
    class: TrailAgent
    idle-timeout: 1
  remember:                  # EchoAgent counts its replies (its "count" method)
    class: EchoAgent
    args: {prefix: "bot: "}
  capped:
    class: EchoAgent
    max-conversations: 2
  streamy:
    class: StreamEchoAgent
  broken:
    class: NoSuchClass
"""


def write(directory, name, text):
    path = os.path.join(directory, name)
    with open(path, "w") as f:
        f.write(text)
    return path


@pytest.fixture(scope="module")
def cfg_gateway(server, tmpdir_session):
    g = Gateway(server, ["--config", write(tmpdir_session, "gateway.yaml", CONFIG)])
    yield g
    g.close()


def agents(server, prefix=""):
    """{id: class} of the agents on the server whose id starts with prefix."""
    out = subprocess.run([AGENTCTL, "--host", server.host, "--port", str(server.port), "--json", "list"],
                         check=True, capture_output=True, text=True, timeout=60).stdout
    return {a["id"]: a["class"] for a in json.loads(out) if a["id"].startswith(prefix)}


def agent_call(server, agent_id, method):
    out = subprocess.run([AGENTCTL, "--host", server.host, "--port", str(server.port), "--json", "method", agent_id,
                          method], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def wait_for(predicate, timeout=15):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return predicate()


def rpc(gw, entry, method, params):
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    return request(gw, "POST", f"/a2a/{entry}/", body, headers=V1)


def send(gw, entry, text, context=None):
    """SendMessage; (the reply text, the task's contextId)."""
    m = {"role": "ROLE_USER", "parts": [{"text": text}], "messageId": str(uuid.uuid4())}
    if context is not None:
        m["contextId"] = context
    status, _, out = rpc(gw, entry, "SendMessage", {"message": m})
    assert status == 200, out
    task = json.loads(out)["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED", task
    return task["artifacts"][0]["parts"][0]["text"], task["contextId"]


def complete(gw, model, text, headers=None, **extra):
    body = {"model": model, "messages": [{"role": "user", "content": text}]}
    body.update(extra)
    return request(gw, "POST", "/v1/chat/completions", body, headers=headers)


def answer(gw, model, text, headers=None, **extra):
    status, _, out = complete(gw, model, text, headers, **extra)
    assert status == 200, out
    return json.loads(out)["choices"][0]["message"]["content"]


# --- what is exposed ------------------------------------------------------------------------------

def test_models_are_the_entries_only(cfg_gateway):
    status, _, out = request(cfg_gateway, "GET", "/v1/models")
    assert status == 200, out
    models = {m["id"]: m for m in json.loads(out)["data"]}
    assert set(models) == {"desk", "missing", "trail", "brief", "remember", "capped", "streamy", "broken"}
    assert models["desk"]["agentd"] == {"agent": "echo", "description": "The front desk"}
    assert models["trail"]["agentd"] == {"class": "TrailAgent", "description": "A trail per conversation."}


def test_a_fixed_entry_reaches_its_agent_and_agent_ids_are_not_exposed(cfg_gateway):
    assert answer(cfg_gateway, "desk", "hello desk") == "hello desk"
    assert send(cfg_gateway, "desk", "hello a2a")[0] == "hello a2a"
    status, _, out = complete(cfg_gateway, "echo", "hi")
    assert status == 404
    e = error_of(out)
    assert e["code"] == "model_not_found" and "no entry 'echo' in --config" in e["message"]
    assert "desk, missing, trail" in e["message"]
    status, _, out = rpc(cfg_gateway, "echo", "SendMessage", {"message": {"role": "ROLE_USER", "parts": [{"text": "x"}],
                                                                          "messageId": "m"}})
    assert status == 404 and json.loads(out)["error"]["code"] == -32000
    status, _, _ = request(cfg_gateway, "GET", "/a2a/echo/.well-known/agent-card.json")
    assert status == 404


def test_a_fixed_entry_whose_agent_is_not_on_the_server_is_a_clear_404(cfg_gateway):
    status, _, out = complete(cfg_gateway, "missing", "hi")
    assert status == 404, out
    e = error_of(out)
    assert e["code"] == "agent_not_found"
    assert "entry 'missing'" in e["message"] and "'no-such-agent'" in e["message"], e
    assert "gateway.yaml:" in e["message"]
    status, _, out = rpc(cfg_gateway, "missing", "SendMessage",
                         {"message": {"role": "ROLE_USER", "parts": [{"text": "x"}], "messageId": "m"}})
    assert status == 404 and "no-such-agent" in json.loads(out)["error"]["message"]


def test_cards_carry_the_entries_descriptions_and_skills(cfg_gateway):
    status, _, out = request(cfg_gateway, "GET", "/a2a/desk/.well-known/agent-card.json")
    assert status == 200, out
    card = json.loads(out)
    assert card["name"] == "desk" and card["description"] == "The front desk"
    assert card["skills"] == [{"id": "greet", "name": "Greet", "description": "Says hello back",
                               "tags": ["hello", "desk"], "examples": ["hi there"]}]
    assert card["supportedInterfaces"][0]["url"] == f"{cfg_gateway.base}/a2a/desk/"
    # The same card serves A2A 0.3 clients, as without --config.
    assert card["protocolVersion"] == "0.3.0" and card["url"] == f"{cfg_gateway.base}/a2a/desk/"
    status, _, out = request(cfg_gateway, "GET", "/a2a/trail/.well-known/agent-card.json")
    card = json.loads(out)
    assert card["description"] == "A trail per conversation."
    assert card["skills"][0]["id"] == "reply" and "TrailAgent" in card["skills"][0]["tags"]
    status, _, out = request(cfg_gateway, "GET", "/.well-known/agent-card.json")
    assert status == 200, out
    card = json.loads(out)
    skills = {s["id"]: s for s in card["skills"]}
    assert set(skills) == {"desk", "missing", "trail", "brief", "remember", "capped", "streamy", "broken"}
    assert skills["desk"]["description"].startswith("The front desk. A2A at ")
    assert skills["trail"]["description"].startswith("A trail per conversation. A2A at ")
    assert skills["remember"]["description"].startswith("A new agentd agent of class EchoAgent for each conversation")
    assert skills["desk"]["tags"] == ["agentd", "hello", "desk"]
    assert skills["desk"]["examples"] == ["hi there"]
    assert {i["tenant"] for i in card["supportedInterfaces"]} == set(skills)


# --- per-conversation agents ----------------------------------------------------------------------

def test_each_context_id_gets_its_own_agent_reused_by_its_next_messages(cfg_gateway, server):
    one, ctx = send(cfg_gateway, "trail", "a", "conv-1")
    assert ctx == "conv-1"
    text, name = one.split(">")
    assert text == "a" and name.startswith("trail-")
    assert send(cfg_gateway, "trail", "b", "conv-1")[0] == "b>" + name
    other = send(cfg_gateway, "trail", "c", "conv-2")[0].split(">")[1]
    assert other != name and other.startswith("trail-")
    live = agents(server, "trail-")
    assert live.get(name) == "TrailAgent" and live.get(other) == "TrailAgent"


def test_a_message_without_context_id_starts_a_conversation_its_context_id_continues(cfg_gateway):
    first, ctx = send(cfg_gateway, "trail", "x")
    assert ctx
    second, ctx2 = send(cfg_gateway, "trail", "y")
    assert ctx2 != ctx and second.split(">")[1] != first.split(">")[1]
    assert send(cfg_gateway, "trail", "z", ctx)[0] == "z>" + first.split(">")[1]


def test_a_conversation_agent_keeps_its_state_and_gets_the_entry_args(cfg_gateway, server):
    assert answer(cfg_gateway, "remember", "one", {"X-Conversation-Id": "state-1"}) == "bot: one"
    assert answer(cfg_gateway, "remember", "two", {"X-Conversation-Id": "state-1"}) == "bot: two"
    # A2A's contextId and the OpenAI key name the same conversations.
    assert send(cfg_gateway, "remember", "three", "state-1")[0] == "bot: three"
    made = [a for a in agents(server, "remember-")]
    counts = {a: agent_call(server, a, "count") for a in made}
    assert 3 in counts.values(), counts


def test_the_openai_user_field_is_a_conversation_key_too(cfg_gateway):
    a = answer(cfg_gateway, "trail", "u1", user="alice")
    b = answer(cfg_gateway, "trail", "u2", user="alice")
    c = answer(cfg_gateway, "trail", "u3", user="bob")
    assert a.split(">")[1] == b.split(">")[1] != c.split(">")[1]
    # The header wins over user.
    d = answer(cfg_gateway, "trail", "u4", {"X-Conversation-Id": "hdr"}, user="alice")
    assert d.split(">")[1] != a.split(">")[1]


def test_a_completion_without_key_gets_an_agent_deleted_after_its_answer(cfg_gateway, server):
    before = set(agents(server, "remember-"))
    assert answer(cfg_gateway, "remember", "once") == "bot: once"
    assert answer(cfg_gateway, "remember", "twice") == "bot: twice"
    assert wait_for(lambda: set(agents(server, "remember-")) == before), agents(server, "remember-")
    # Streamed too.
    before = set(agents(server, "streamy-"))
    status, _, out = complete(cfg_gateway, "streamy", "one two three", stream=True)
    assert status == 200, out
    events = sse_events(out)
    assert events[-1] == "[DONE]"
    text = "".join(json.loads(e)["choices"][0]["delta"].get("content", "") for e in events[:-1])
    assert text.split() == ["one", "two", "three"]
    assert wait_for(lambda: set(agents(server, "streamy-")) == before)


def test_streamed_a2a_messages_of_a_conversation_share_its_agent(cfg_gateway, server):
    before = set(agents(server, "streamy-"))
    for text in ("one two", "three four"):
        m = {"role": "ROLE_USER", "parts": [{"text": text}], "messageId": str(uuid.uuid4()), "contextId": "s-1"}
        status, _, out = rpc(cfg_gateway, "streamy", "SendStreamingMessage", {"message": m})
        assert status == 200, out
        results = [json.loads(e)["result"] for e in sse_events(out)]
        assert results[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED", results
        chunks = "".join(p["text"] for r in results if "artifactUpdate" in r for p in r["artifactUpdate"]["artifact"]["parts"])
        assert chunks.split() == text.split()
    assert len(set(agents(server, "streamy-")) - before) == 1


def test_idle_conversation_agents_are_deleted_and_the_key_then_gets_a_new_one(cfg_gateway, server):
    name = send(cfg_gateway, "brief", "p", "idle-1")[0].split(">")[1]
    assert name.startswith("brief-")
    # idle-timeout: 1 s (swept every 250 ms).
    assert wait_for(lambda: name not in agents(server, "brief-"), timeout=10)
    again = send(cfg_gateway, "brief", "q", "idle-1")[0].split(">")[1]
    assert again != name


def test_a_conversation_in_use_is_not_deleted_while_it_answers(server, tmpdir_session):
    config = "entries:\n  slowish:\n    class: EchoAgent\n    args: {sleep_ms: 4000}\n    idle-timeout: 0.5\n"
    g = Gateway(server, ["--config", write(tmpdir_session, "slowish.yaml", config)])
    try:
        got = []
        t = threading.Thread(target=lambda: got.append(answer(g, "slowish", "slow", {"X-Conversation-Id": "k"})))
        t.start()
        assert wait_for(lambda: len(agents(server, "slowish-")) == 1)
        # Three idle timeouts into a 4 s answer, the agent is still there: it is leased.
        time.sleep(1.5)
        assert len(agents(server, "slowish-")) == 1
        t.join(timeout=60)
        assert got == ["slow"]
        assert wait_for(lambda: not agents(server, "slowish-"), timeout=10)
    finally:
        g.close()


def test_max_conversations_refuses_new_ones_with_429(cfg_gateway):
    assert answer(cfg_gateway, "capped", "a", {"X-Conversation-Id": "cap-a"}) == "a"
    assert send(cfg_gateway, "capped", "b", "cap-b")[0] == "b"
    status, _, out = complete(cfg_gateway, "capped", "c", {"X-Conversation-Id": "cap-c"})
    assert status == 429, out
    e = error_of(out)
    assert e["code"] == "too_many_conversations" and "max-conversations" in e["message"], e
    status, _, out = rpc(cfg_gateway, "capped", "SendMessage",
                         {"message": {"role": "ROLE_USER", "parts": [{"text": "d"}], "messageId": "m",
                                      "contextId": "cap-d"}})
    assert status == 429, out
    assert "max-conversations" in json.loads(out)["error"]["message"]
    # A one-shot completion is a conversation too; the existing ones still answer.
    assert complete(cfg_gateway, "capped", "e")[0] == 429
    assert answer(cfg_gateway, "capped", "again", {"X-Conversation-Id": "cap-a"}) == "again"


def test_a_class_the_server_does_not_know_fails_each_request_cleanly(cfg_gateway):
    for _ in range(3):  # no conversation is kept (max-conversations is not used up)
        status, _, out = complete(cfg_gateway, "broken", "hi", {"X-Conversation-Id": "b"})
        assert status in (400, 502), out
        assert "NoSuchClass" in error_of(out)["message"]
    status, _, out = rpc(cfg_gateway, "broken", "SendMessage",
                         {"message": {"role": "ROLE_USER", "parts": [{"text": "d"}], "messageId": "m"}})
    assert "NoSuchClass" in json.loads(out)["error"]["message"], out


def test_a_conversation_agent_deleted_by_hand_is_replaced(cfg_gateway, server):
    name = answer(cfg_gateway, "trail", "h1", {"X-Conversation-Id": "by-hand"}).split(">")[1]
    subprocess.run([AGENTCTL, "--host", server.host, "--port", str(server.port), "delete", name], check=True,
                   capture_output=True, timeout=60)
    status, _, out = complete(cfg_gateway, "trail", "h2", headers={"X-Conversation-Id": "by-hand"})
    assert status == 404, out  # the call that finds it gone
    again = answer(cfg_gateway, "trail", "h3", {"X-Conversation-Id": "by-hand"}).split(">")[1]
    assert again != name


def test_a_clean_stop_deletes_the_conversation_agents(server, tmpdir_session):
    config = "entries:\n  bye:\n    class: EchoAgent\n"
    g = Gateway(server, ["--config", write(tmpdir_session, "bye.yaml", config)])
    answer(g, "bye", "1", {"X-Conversation-Id": "a"})
    answer(g, "bye", "2", {"X-Conversation-Id": "b"})
    assert len(agents(server, "bye-")) == 2
    g.proc.terminate()
    assert g.proc.wait(timeout=20) == 0
    assert "deleted 2 conversation agents" in g.stderr()
    g.close()
    assert agents(server, "bye-") == {}


def test_a_stop_with_the_server_gone_does_not_wait_for_it(tmpdir_session):
    s = start_server()
    config = "entries:\n  orphan:\n    class: EchoAgent\n"
    g = Gateway(s, ["--config", write(tmpdir_session, "orphan.yaml", config)])
    try:
        answer(g, "orphan", "1", {"X-Conversation-Id": "a"})
        s.proc.kill()
        s.proc.wait(timeout=20)
        started = time.monotonic()
        g.proc.terminate()
        assert g.proc.wait(timeout=30) == 0
        assert time.monotonic() - started < 15
        assert "left 1 of 1 conversation agents on the server" in g.stderr(), g.stderr()
    finally:
        g.close()
        s.close()


def test_conversation_agents_on_a_cluster_are_spread_and_deleted_where_they_are(server, tmpdir_session):
    second = start_server()
    config = "entries:\n  spread:\n    class: TrailAgent\n    idle-timeout: 4\n"
    g = Gateway(cluster=f"{server.host}:{server.port},{second.host}:{second.port}",
                extra=["--config", write(tmpdir_session, "spread.yaml", config)])
    try:
        names = {answer(g, "spread", "x", {"X-Conversation-Id": f"c{i}"}).split(">")[1] for i in range(4)}
        assert len(names) == 4
        assert names == set(agents(server, "spread-")) | set(agents(second, "spread-"))
        assert agents(server, "spread-") and agents(second, "spread-")  # round robin: both members
        assert wait_for(lambda: not agents(server, "spread-") and not agents(second, "spread-"), timeout=20)
    finally:
        g.close()
        second.close()


def test_the_example_config_serves(server):
    g = Gateway(server, ["--config", os.path.join(SOURCE_DIR, "config", "gateway.yaml")])
    try:
        status, _, out = request(g, "GET", "/v1/models")
        assert status == 200
        assert {"concierge", "assistant", "researcher"} <= {m["id"] for m in json.loads(out)["data"]}
    finally:
        g.close()


# --- bad configs ------------------------------------------------------------------------------------

@pytest.mark.parametrize("text,where,says", [
    ("entries:\n  a: {agent: x}\n  b:\n    agent: y\n    clas: Z\n", ":5:5:", "unknown key 'clas'"),
    ("entries:\n  a:\n    agent: x\n    class: Y\n", ":4:5:", "has both 'agent' and 'class'"),
    ("entries:\n  a:\n    description: d\n", ":2:3:", "has neither 'agent' nor 'class'"),
    ("entries:\n  a: {agent: x}\n  a: {agent: y}\n", ":3:3:", "entry 'a' is named twice"),
    ("entries:\n  a/b: {agent: x}\n", ":2:3:", "bad entry name 'a/b'"),
    ("entries:\n  a: {class: X, idle-timeout: soon}\n", ":2:31:", "'idle-timeout' (seconds) must be a number"),
    ("entries:\n  a: {agent: x, args: {k: 1}}\n", ":2:17:", "'args' goes with 'class'"),
    ("entries: {a: {agent: x}\n", ":2:1:", "not valid YAML"),
])
def test_a_bad_config_stops_the_gateway_with_exit_code_2_naming_file_and_line(server, tmpdir_session, text, where,
                                                                              says):
    path = write(tmpdir_session, "bad.yaml", text)
    p = subprocess.run([GATEWAY, "--listen", "127.0.0.1:0", "--server", f"{server.host}:{server.port}",
                        "--config", path], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2, p.stderr
    assert f"agentd-gateway: --config {path}{where}" in p.stderr, p.stderr
    assert says in p.stderr, p.stderr
    assert "ready" not in p.stdout


def test_a_config_file_that_cannot_be_read_stops_the_gateway(server, tmpdir_session):
    path = os.path.join(tmpdir_session, "absent.yaml")
    p = subprocess.run([GATEWAY, "--listen", "127.0.0.1:0", "--server", f"{server.host}:{server.port}",
                        "--config", path], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2
    assert f"--config {path}: cannot read the file" in p.stderr, p.stderr

"""Errors raise agentd.Error (a RuntimeError) with code, agent_id, agent_class and retryable."""
import socket

import pytest

import agentd
from agentd import Msg


def test_agent_failure_names_the_agent(client):
    a = client.create_agent("FlakyAgent", "F")
    p = a(Msg("user", "fail"))
    with pytest.raises(agentd.Error) as e:
        p.get()
    err = e.value
    assert isinstance(err, RuntimeError)
    assert err.code == "agent_failed"
    assert err.agent_id == a.id and err.agent_class == "FlakyAgent"
    assert err.retryable is False
    assert "asked to fail" in str(err) and "asked to fail" in err.message
    with pytest.raises(agentd.Error):
        p.content  # reading a field raises the same
    assert a(Msg("user", "fine")).content == "fine"  # the agent stays usable


def test_failure_reaches_consumers(client):
    a = client.create_agent("FlakyAgent", "F")
    b = client.create_agent("EchoAgent", "E")
    with pytest.raises(agentd.Error) as e:
        b(a(Msg("user", "fail"))).get()
    assert e.value.agent_class == "FlakyAgent"


def test_creation_errors(client):
    with pytest.raises(agentd.Error) as e:
        client.create_agent("NoSuchClass")
    assert e.value.code == "unknown_class"
    with pytest.raises(agentd.Error) as e:
        client.create_agent("EchoAgent", args={"sleep_ms": "soon"})
    assert e.value.code == "bad_args"
    with pytest.raises(agentd.Error) as e:
        client.agent("no-such-agent")
    assert e.value.code == "unknown_agent"


def test_unknown_method(client):
    a = client.create_agent("EchoAgent", "E")
    with pytest.raises(agentd.Error) as e:
        a.call("nope")
    assert e.value.code == "unknown_method" and e.value.agent_id == a.id
    with pytest.raises(agentd.Error) as e:
        a.call_async("nope").get()
    assert e.value.code == "unknown_method"


def test_wait_timeout_is_retryable(client):
    a = client.create_agent("WebAgent", "Slow", {"sleep_ms": 1500})
    p = a(Msg("user", "q"))
    with pytest.raises(agentd.Error) as e:
        p.get(timeout=0.2)
    assert e.value.code == "timeout" and e.value.retryable is True
    assert p.get(timeout=30).content == "Answer from Slow"  # still there afterwards


def test_client_timeout_is_the_default_for_get(shared_server):
    with shared_server.connect(timeout=0.3) as c:
        assert c.timeout == pytest.approx(0.3)
        p = c.create_agent("WebAgent", "Slow", {"sleep_ms": 2000})(Msg("user", "q"))
        with pytest.raises(agentd.Error) as e:
            p.content
        assert e.value.code == "timeout"


def test_connect_refused_is_retryable():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    with pytest.raises(agentd.Error) as e:
        agentd.Client.connect("127.0.0.1", port, connect_timeout=5)
    assert e.value.code == "disconnected" and e.value.retryable is True


def test_bad_plugin_and_bad_server_path():
    with pytest.raises(agentd.Error) as e:
        agentd.Client.local(plugins=["/nonexistent/libnothing.so"])
    assert e.value.code == "plugin_error"
    with pytest.raises(agentd.Error):
        agentd.Client.spawn_child(server_path="/nonexistent/as_server")


def test_wrong_argument_types(client):
    a = client.create_agent("EchoAgent", "E")
    with pytest.raises(TypeError):
        a("not a Msg")
    with pytest.raises(TypeError):
        a.observe(None)
    with pytest.raises(ValueError):
        a(Msg("user", "x")).get(timeout=-1)


def test_error_can_be_raised_from_python():
    e = agentd.Error("m", "timeout", "id1", "Cls", True)
    assert (e.code, e.agent_id, e.agent_class, e.retryable, str(e)) == ("timeout", "id1", "Cls", True, "m")

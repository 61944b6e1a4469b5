"""One-line migration (issue #25): `Cls(...)` is a local object, `Cls(...).to_dist()` the same agent
on a child server started for its module's folder, `to_dist(host=, port=, token=)` on a running
server, `to_dist(client=c)` / `to_dist(cluster=k)` through an existing client.

The classes come from tests/python/agents/good (the folder is on sys.path here, and is what the
child gets as --agent-dir).
"""
import os
import sys
import time

import pytest

import agentd
from agentd import Msg
from conftest import CHILD_TOKEN, CHILD_TOKEN_FILE, GOOD_AGENTS, Server, drain_stderr

sys.path.insert(0, GOOD_AGENTS)
from pyecho import PyChatty, PyEcho, PySleeper, PyStream, PyTrail  # noqa: E402
from pyrelay import PyRelay  # noqa: E402


def ref_address(ref):
    return ref.to_value()["agentd_agent_ref"]["address"]


def cmdline(pid):
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        return [a.decode() for a in f.read().split(b"\0") if a]


def program(agents, text):
    """An AgentScope-style orchestration: the same code for local objects and distributed refs."""
    first = [a(Msg("user", f"{text}{i}")) for i, a in enumerate(agents)]
    return [m.content for m in first]


def test_local_object_runs_in_this_process():
    a = PyEcho("L", prefix="> ")
    assert isinstance(a, agentd.Agent)
    assert a.name == "L"
    m = a(Msg("user", "hi"))
    assert isinstance(m, Msg)
    assert m.content == "> hi" and m.metadata["pid"] == os.getpid()
    assert a.reply(Msg("user", "again")).content == "> again"
    assert a.count == 2
    assert a.memory.size() == 4
    assert [x.content for x in a.memory.get()] == ["hi", "> hi", "again", "> again"]
    assert a.ping(n=2) == {"pong": 2}  # a plain method call in-process


def test_to_dist_child_mode():
    r = PyEcho("W0", prefix="> ").to_dist()
    assert isinstance(r, agentd.AgentRef)
    assert (r.name, r.class_name) == ("W0", "PyEcho")
    p = r(Msg("user", "hi"))
    assert isinstance(p, agentd.Placeholder)
    m = p.get()
    assert m.content == "> hi"
    child_pid = m.metadata["pid"]
    assert child_pid != os.getpid()
    # a child as_server started for the module's folder
    args = cmdline(child_pid)
    assert "as_server" in os.path.basename(args[0]), args
    assert "--agent-dir" in args and os.path.realpath(args[args.index("--agent-dir") + 1]) == \
        os.path.realpath(GOOD_AGENTS), args
    assert r.reply(Msg("user", "b")).content == "> b"
    ping = r.ping(n=2)
    assert isinstance(ping, agentd.Placeholder) and ping.content == {"pong": 2}
    assert r.call("ping", {"n": 3}) == {"pong": 3}
    assert r.call_async("ping").content == {"pong": 1}
    r.observe(Msg("user", "heard"))
    assert [x.content for x in r.memory()] == ["hi", "> hi", "b", "> b", "heard"]
    # one child per folder per process: another agent of the folder lands on the same server
    t = PyTrail("T").to_dist()
    assert ref_address(t) == ref_address(r)
    assert t(r(Msg("user", "x"))).content == "> x>T"
    s = PyStream("S").to_dist()
    assert ref_address(s) == ref_address(r)
    q = s.reply_stream(Msg("user", "a b c"))
    assert list(q.chunks()) == ["a ", "b ", "c"] and q.content == "a b c"
    again = PyEcho("W1").to_dist()
    assert again.call("whoami")["pid"] == child_pid


def test_a_child_servers_agents_may_print_freely():
    # What a child's agents print reaches this program's stdout; before that was copied, 64 KiB
    # of prints filled the pipe and blocked the agent (and every Python agent behind its GIL).
    a = PyChatty("talker").to_dist()
    assert a(Msg("user", 500)).get(timeout=60).content == "printed"  # about 500 KB printed
    assert a(Msg("user", 1)).get(timeout=60).content == "printed"


def test_the_same_program_runs_local_and_distributed():
    local = [PyEcho(f"A{i}", prefix=f"{i}:") for i in range(3)]
    dist = [PyEcho(f"A{i}", prefix=f"{i}:").to_dist() for i in range(3)]
    assert program(local, "m") == program(dist, "m") == ["0:m0", "1:m1", "2:m2"]


def test_to_dist_child_mode_runs_agents_in_parallel():
    agents = [PySleeper(f"Z{i}").to_dist() for i in range(5)]
    t0 = time.monotonic()
    ps = [a(Msg("user", {"seconds": 1.5})) for a in agents]
    spans = [p.content for p in ps]
    elapsed = time.monotonic() - t0
    assert 1.5 <= elapsed < 4.5, elapsed  # 7.5 s one after another
    assert max(s["started"] for s in spans) < min(s["ended"] for s in spans), spans


def test_to_dist_independent(py_server):
    r = PyEcho("I", prefix="i:").to_dist(host=py_server.host, port=py_server.port)
    assert isinstance(r, agentd.AgentRef)
    assert r(Msg("user", "x")).content == "i:x"
    assert r.ping(n=4).content == {"pong": 4}
    with py_server.connect() as c:
        assert r.id in {i.id for i in c.list_agents()}
        same = c.agent(r.id)
        assert (same.name, same.class_name) == ("I", "PyEcho")
        assert [m.content for m in same.memory()] == ["x", "i:x"]
    assert r.call("whoami")["pid"] == py_server.proc.pid


@pytest.fixture
def tokened_py_server(monkeypatch):
    """A server hosting agents/good that requires CHILD_TOKEN."""
    monkeypatch.delenv("AGENTD_TOKEN", raising=False)
    s = drain_stderr(Server(extra=["--agent-dir", GOOD_AGENTS, "--auth-token-file", CHILD_TOKEN_FILE]))
    yield s
    s.close()


def test_to_dist_independent_with_a_token(tokened_py_server):
    s = tokened_py_server
    with pytest.raises(agentd.Error) as e:
        PyEcho("NoToken").to_dist(host=s.host, port=s.port)
    assert e.value.code == "unauthenticated"
    with pytest.raises(agentd.Error) as e:
        PyEcho("WrongToken").to_dist(host=s.host, port=s.port, token="0" * 64)
    assert e.value.code == "unauthenticated"
    r = PyEcho("Tok", prefix="t:").to_dist(host=s.host, port=s.port, token=CHILD_TOKEN)
    assert r(Msg("user", "x")).content == "t:x"
    assert r.call("whoami")["pid"] == s.proc.pid
    with s.connect(token=CHILD_TOKEN) as c:
        assert [i.name for i in c.list_agents()] == ["Tok"]


def test_to_dist_without_the_token_is_refused_after_one_with_it(tokened_py_server):
    """to_dist(host=, port=) shares one connection per server in a process; a call without the
    token (or with a wrong one) must not ride on the connection another call logged in with."""
    s = tokened_py_server
    r = PyEcho("Tok", prefix="t:").to_dist(host=s.host, port=s.port, token=CHILD_TOKEN)
    assert r(Msg("user", "x")).content == "t:x"
    with pytest.raises(agentd.Error) as e:
        PyEcho("NoToken").to_dist(host=s.host, port=s.port)
    assert e.value.code == "unauthenticated"
    with pytest.raises(agentd.Error) as e:
        PyEcho("WrongToken").to_dist(host=s.host, port=s.port, token="0" * 64)
    assert e.value.code == "unauthenticated"
    with s.connect(token=CHILD_TOKEN) as c:
        assert [i.name for i in c.list_agents()] == ["Tok"]


def test_to_dist_client(py_server):
    with py_server.connect() as c:
        r = PyEcho("C", prefix="c:").to_dist(client=c)
        assert isinstance(r, agentd.AgentRef)
        assert r.id in {i.id for i in c.list_agents()}
        assert c.agent(r.id).name == "C"
        assert r(Msg("user", "x")).content == "c:x"
        t = c.create_agent("TrailAgent", "T")  # a C++ agent of the same client
        assert t(r(Msg("user", "x"))).content == "c:x>T"
        assert r(t(Msg("user", "y"))).content == "c:y>T"
    # the ref belongs to the client: closing it closes the ref's connection
    with pytest.raises(agentd.Error) as e:
        r(Msg("user", "after close")).get()
    assert e.value.code == "disconnected"


def test_to_dist_cluster(py_server):
    with agentd.Cluster.open(f"{py_server.host}:{py_server.port}") as k:
        r = PyEcho("K", prefix="k:").to_dist(cluster=k)
        assert r(Msg("user", "x")).content == "k:x"
        assert k.agent(r.id).class_name == "PyEcho"


def test_constructor_arguments_travel_as_plain_values(py_server):
    with py_server.connect() as c:
        # positional arguments are captured under their parameter names; name may be a keyword
        assert PyEcho("Pos", "pos:").to_dist(client=c)(Msg("user", "x")).content == "pos:x"
        kw = PyEcho(name="Kw", prefix="kw:").to_dist(client=c)
        assert kw.name == "Kw" and kw(Msg("user", "x")).content == "kw:x"
        target = c.create_agent("EchoAgent", "Target", {"prefix": "t:"})
        plain = dict(a=None, b=True, i=-7, f=1.5, s="text", l=[1, "two", [3.0]],
                     d={"k": {"n": [1, 2]}})
        r = PyEcho("Plain", m=Msg("user", "hi", role="user"), ref=target, **plain).to_dist(client=c)
        got = r.call("extra_args")
        assert {k: got[k] for k in plain} == plain
        assert got["m"]["content"] == "hi" and got["m"]["role"] == "user"
        assert got["ref"]["agentd_agent_ref"]["id"] == target.id
        # an AgentRef argument: the distributed agent calls it
        relay = PyRelay("R", target=target).to_dist(client=c)
        assert relay(Msg("user", "hi")).content == "relayed: t:hi"
        # and a to_dist ref as an argument of another to_dist
        inner = PyEcho("Inner", prefix="in:").to_dist(client=c)
        outer = PyRelay("Outer", target=inner).to_dist(client=c)
        assert outer(Msg("user", "x")).content == "relayed: in:x"


def test_non_plain_constructor_arguments_are_refused_naming_them(py_server, tmp_path):
    with py_server.connect() as c:
        before = {i.id for i in c.list_agents()}
        with open(tmp_path / "f.txt", "w") as f:
            cases = [
                (PyEcho("bad1", prefix=f), "prefix"),            # an open file
                (PyEcho("bad2", hook=lambda: 1), "hook"),         # a lambda
                (PyEcho("bad3", items=[1, {"k": object()}]), "items"),  # nested inside a list
                (PyEcho("bad4", f), "prefix"),                   # positional: its parameter name
            ]
            for obj, arg in cases:
                with pytest.raises(TypeError) as e:
                    obj.to_dist(client=c)
                assert arg in str(e.value), (arg, str(e.value))
            with pytest.raises(TypeError) as e:
                PyEcho("bad5", hook=print).to_dist()  # child mode refuses it too
            assert "hook" in str(e.value)
        # nothing was created for the refused ones
        assert {i.id for i in c.list_agents()} == before
        assert not {i.name for i in c.list_agents()} & {"bad1", "bad2", "bad3", "bad4", "bad5"}

"""Every call of the Python API against real servers in local, child and independent mode."""
import os
import socket
import time

import pytest

import agentd
from agentd import Msg


def test_module_surface():
    here = os.path.dirname(agentd.__file__)
    assert os.path.isfile(os.path.join(here, "py.typed"))
    assert os.path.isfile(os.path.join(here, "__init__.pyi"))
    for name in agentd.__all__:
        assert getattr(agentd, name).__module__ == "agentd"
    assert issubclass(agentd.Error, RuntimeError)


def test_stubs_name_every_public_class():
    import ast
    stub = os.path.join(os.path.dirname(agentd.__file__), "__init__.pyi")
    tree = ast.parse(open(stub).read())
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    functions = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}  # agentd.method
    assert set(agentd.__all__) <= set(classes) | functions
    for name in set(agentd.__all__) - functions:
        stubbed = {f.name for f in classes[name].body if isinstance(f, ast.FunctionDef)}
        stubbed |= {f.target.id for f in classes[name].body if isinstance(f, ast.AnnAssign)}
        cls = getattr(agentd, name)
        inherited = set(dir(RuntimeError)) if issubclass(cls, RuntimeError) else set()
        public = {a for a in dir(cls) if not a.startswith("_")} - inherited
        assert public <= stubbed, f"{name}: not in the stubs: {public - stubbed}"


def test_reply_and_placeholder_fields(client):
    a = client.create_agent("EchoAgent", "E", {"prefix": "> "})
    assert (a.name, a.class_name) == ("E", "EchoAgent")
    p = a(Msg("user", "hi", role="user"))
    assert isinstance(p, agentd.Placeholder) and len(p.call_id) == 32
    # Reading a field waits, as AgentScope's placeholders did.
    assert p.content == "> hi"
    assert p.name == "E"
    assert p.role == "assistant"
    assert p.metadata is None
    m = p.get()
    assert isinstance(m, Msg) and m.content == "> hi" and m.name == "E" and m.id == p.id
    assert p.get(timeout=5) == m
    q = a.reply(Msg("user", {"k": [1, 2]}))
    assert q.text() == '> {"k":[1,2]}'


def test_reply_without_input(client):
    a = client.create_agent("TrailAgent", "T")
    assert a.reply().content == ">T"
    assert a().content == ">T"


def test_create_agents_agent_list_info_delete(client):
    agents = client.create_agents("EchoAgent", 3, {"prefix": "p"}, name_prefix="w")
    assert [x.name for x in agents] == ["w0", "w1", "w2"]
    ids = {i.id for i in client.list_agents()}
    assert {x.id for x in agents} <= ids
    same = client.agent(agents[1].id)
    assert same == agents[1] and same.name == "w1" and same.class_name == "EchoAgent"
    assert same(Msg("user", "x")).content == "px"
    info = client.info()
    assert isinstance(info, agentd.ServerInfo)
    assert info.agent_count >= 3 and "EchoAgent" in info.classes
    client.delete_agent(agents[0].id)
    with pytest.raises(agentd.Error) as e:
        client.agent(agents[0].id)
    assert e.value.code == "unknown_agent"
    assert client.delete_all_agents() >= 2
    client.ping()


def test_clone_agent_copies_memory_and_state(client):
    a = client.create_agent("EchoAgent", "orig", {"prefix": "p:"})
    a(Msg("user", "one")).get()
    twin = client.clone_agent(a.id, "twin")
    assert twin.id != a.id and twin.name == "twin" and twin.class_name == "EchoAgent"
    assert [m.content for m in twin.memory()] == ["one", "p:one"]
    assert twin.call("count") == 1
    assert twin(Msg("user", "two")).content == "p:two"
    assert a.call("count") == 1
    assert client.info().state_dir == ""  # the test server keeps agents in memory only
    with pytest.raises(agentd.Error) as e:
        client.clone_agent("no-such-agent")
    assert e.value.code == "unknown_agent"


def test_named_ids_and_default_names(client):
    a = client.create_agent("EchoAgent", id="py-fixed-id-" + client.server_id[:8])
    assert a.id.startswith("py-fixed-id-") and a.name == a.id
    client.delete_agent(a.id)


def test_observe_call_call_async_memory_info(client):
    a = client.create_agent("EchoAgent", "M")
    a.observe(Msg("user", "heard"))
    assert a.call("ping") == "pong"
    assert a.call("add", {"a": 1, "b": 2.5}) == 3.5
    a(Msg("user", "said")).get()
    c = a.call_async("count")
    assert isinstance(c, agentd.Placeholder) and c.content == 1
    mem = a.memory()
    assert [m.content for m in mem] == ["heard", "said", "said"]
    assert all(isinstance(m, Msg) for m in mem)
    # observe takes a placeholder without waiting for it
    w = client.create_agent("WebAgent", "W", {"sleep_ms": 300})
    t0 = time.monotonic()
    a.observe(w(Msg("user", "q")))
    assert time.monotonic() - t0 < 0.25
    assert a.memory()[-1].content == "Answer from W"
    info = a.info()
    assert isinstance(info, agentd.AgentInfo)
    assert (info.id, info.name, info.class_name) == (a.id, "M", "EchoAgent")
    assert info.completed_calls >= 1


def test_passing_a_placeholder_never_blocks(client):
    slow = client.create_agent("WebAgent", "Slow", {"sleep_ms": 500})
    echo = client.create_agent("EchoAgent", "E")
    t0 = time.monotonic()
    p = slow(Msg("user", "q"))
    q = echo(p)
    r = echo.reply(q)
    assert time.monotonic() - t0 < 0.3
    assert r.content == "Answer from Slow"
    assert time.monotonic() - t0 >= 0.45


def test_placeholders_across_two_servers(shared_server):
    from conftest import CHILD_TOKEN
    with agentd.Client.spawn_child(plugins=conftest_plugins(), token=CHILD_TOKEN) as one, \
            shared_server.connect() as two:
        a = one.create_agent("TrailAgent", "A")
        b = two.create_agent("TrailAgent", "B")
        p = a(Msg("user", "x"))
        q = b(p)           # server two fetches p from server one
        r = a(q)           # and back
        assert r.content == "x>A>B>A"
        assert p.origin == one.address and q.origin == two.address


def test_nested_agent_reference_in_args(remote_client, shared_server):
    with shared_server.connect() as other:
        target = other.create_agent("EchoAgent", "Target", {"prefix": "t:"})
        relay = remote_client.create_agent("RelayAgent", "R", {"target": target})
        assert relay(Msg("user", "hi")).content == "relayed: t:hi"
        assert target.to_value()["agentd_agent_ref"]["id"] == target.id


def test_context_manager_stops_child_server():
    with agentd.Client.spawn_child(plugins=conftest_plugins()) as c:
        port = c.port
        pid = c.info().pid
        a = c.create_agent("EchoAgent", "E")
        assert a(Msg("user", "x")).content == "x"
    assert c.closed
    with pytest.raises(agentd.Error) as e:
        a(Msg("user", "y"))
    assert e.value.code == "disconnected"
    with pytest.raises(agentd.Error):
        c.list_agents()
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and pid_alive(pid):
        time.sleep(0.02)
    assert not pid_alive(pid)
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    c.close()  # twice is fine


def test_single_thread_client(shared_server):
    """single_thread=True: this thread runs the client's connection while it waits. The answers
    are the same; another thread may not wait on it."""
    import threading
    with shared_server.connect(single_thread=True) as c:
        a = c.create_agent("EchoAgent", "E", {"prefix": "> "})
        b = c.create_agent("EchoAgent", "F")
        p = b(a(Msg("user", "hi", role="user")))  # a placeholder passed on before it is ready
        assert p.get().content == "> hi"
        # q's agent sleeps, so its result cannot be there yet when the other thread asks: a result
        # that is there is returned on any thread, and only a wait is refused.
        s = c.create_agent("EchoAgent", "S", {"prefix": "> ", "sleep_ms": 1000})
        q = s(Msg("user", "there"))
        caught = []

        def other():
            try:
                q.get()
            except agentd.Error as e:
                caught.append(e)

        t = threading.Thread(target=other)
        t.start()
        t.join()
        assert len(caught) == 1
        assert caught[0].code == "bad_request"
        assert "single_thread" in str(caught[0])
        assert q.get().content == "> there"
    from conftest import CHILD_TOKEN
    with agentd.Client.spawn_child(plugins=conftest_plugins(), token=CHILD_TOKEN, single_thread=True) as c:
        assert c.create_agent("EchoAgent").reply(Msg("user", "child")).get().content == "child"


def test_closing_an_independent_client_leaves_the_server(server):
    with server.connect() as c:
        c.create_agent("EchoAgent", "kept", id="kept")
    with server.connect() as c:
        assert c.agent("kept").name == "kept"


def test_stop_independent_server(server):
    with server.connect() as c:
        c.stop()
    assert server.wait_exit(30) == 0


def test_local_mode_address():
    with agentd.Client.local(plugins=conftest_plugins()) as c:
        assert c.address == "local" and c.port == 0


def pid_alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def conftest_plugins():
    from conftest import PLUGINS
    return PLUGINS


def test_plugin_dirs_and_extra_args():
    from conftest import PLUGIN_DIR
    with agentd.Client.spawn_child(plugin_dirs=[PLUGIN_DIR], extra_args=["--max-pool-size", "100"]) as c:
        info = c.info()
        assert "WebAgent" in info.classes and "EchoAgent" in info.classes
        assert info.max_pool_size == 100
    with agentd.Client.local(plugin_dirs=[PLUGIN_DIR], max_workers=4) as c:
        assert "TrailAgent" in c.info().classes
        assert c.create_agent("TrailAgent", "T")(Msg("user", "x")).content == "x>T"


def test_lanes_client():
    """By default a reply whose get() follows at once travels on the calling thread's own lane
    (as_server --lane-threads); anything else goes on the connection, with the same answers."""
    from conftest import Server
    s = Server(extra=["--lane-threads", "2"])
    try:
        with s.connect() as c:
            a = c.create_agent("EchoAgent", "L", {"prefix": "> "})
            b = c.create_agent("EchoAgent", "M")
            for i in range(3):
                assert a(Msg("user", f"m{i}")).get().content == f"> m{i}"
            assert c.info().lane_calls == 3
            assert c.info().lane_threads == 2
            # Passed on before it is read: it goes on the connection, and b consumes it.
            assert b(a(Msg("user", "x"))).get().content == "> x"
            assert [m.content for m in a.memory()][-2:] == ["x", "> x"]
        # lane_spin (seconds): how long a lane polls for its answer before it sleeps; 0: never.
        with s.connect(lane_spin=0) as c:
            a = c.create_agent("EchoAgent", "P")
            assert a(Msg("user", "slept")).get().content == "slept"
            assert c.info().lane_calls == 4
        for bad in (-0.001, 0.5):
            with pytest.raises(agentd.Error) as e:
                s.connect(lane_spin=bad)
            assert e.value.code == "bad_args" and "lane_spin" in str(e.value)
        with s.connect(lanes=False) as c:
            a = c.create_agent("EchoAgent", "N")
            assert a(Msg("user", "off")).get().content == "off"
            assert c.info().lane_calls == 4
        with pytest.raises(agentd.Error) as e:
            s.connect(lanes=True, single_thread=True)
        assert e.value.code == "bad_args"
        with s.connect(single_thread=True) as c:  # lanes=None: none here, silently
            assert c.create_agent("EchoAgent", "O")(Msg("user", "st")).get().content == "st"
    finally:
        s.close()

"""Agents written in Python, hosted by as_server --agent-dir (issue #25), against real servers.

The agents are the modules in tests/python/agents/good (pyecho.py, pyasync.py, pyrelay.py).
`py_client` runs each test on a child started with agent_dirs=[...] and on the session's
py_server (independent mode); both also load the C++ test plugins (EchoAgent, TrailAgent, ...).
"""
import os
import subprocess
import threading
import time

import pytest

import agentd
from agentd import Msg
from conftest import (AS_SERVER, GOOD_AGENTS, PLUGINS, READY, Server, agent_dir, drain_stderr)

PY_CLASSES = ["PyEcho", "PyTrail", "PySeq", "PySleeper", "PyFail", "PyStrict", "PyStream",
              "PyModel", "PyModelStream", "PyRelay", "PyAsyncRelay", "PyAsyncSleeper",
              "PyAsyncSeq", "PyAsyncFail", "PyAsyncModel"]


def marker_line(path, marker):
    """The 1-based number of the line of path that contains marker (exactly one does)."""
    with open(path) as f:
        hits = [i for i, line in enumerate(f, 1) if marker in line]
    assert len(hits) == 1, f"{marker!r} in {path}: {hits}"
    return hits[0]


def contents(msgs):
    return [m.content for m in msgs]


def thread_count(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("Threads:"):
                return int(line.split()[1])
    raise AssertionError("no Threads: line")


def start_refused(extra, timeout=60):
    """Starts as_server (with the C++ test plugins) expecting it to refuse to start: returns
    (exit code, stdout, stderr). Fails the test if it prints its ready line."""
    args = [AS_SERVER, "--host", "127.0.0.1", "--port", "0", "--log-level", "warn"]
    for p in PLUGINS:
        args += ["--plugin", p]
    proc = subprocess.Popen(args + list(extra), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    timer = threading.Timer(timeout, proc.kill)
    timer.start()
    try:
        out = []
        for line in proc.stdout:
            out.append(line)
            if READY in line:
                proc.kill()
                proc.wait()
                pytest.fail(f"as_server started although it should refuse: {line!r}, "
                            f"stderr: {proc.stderr.read()!r}")
        err = proc.stderr.read()
        rc = proc.wait()
    finally:
        timer.cancel()
        proc.stdout.close()
        proc.stderr.close()
    return rc, "".join(out), err


# ---------------------------------------------------------------------------------------------
# Hosting: which classes a folder gives, repeated folders, the config key.

def test_agent_dir_registers_the_python_classes(py_server):
    with py_server.connect() as c:
        classes = set(c.info().classes)
    assert set(PY_CLASSES) <= classes
    assert {"EchoAgent", "TrailAgent", "WebAgent"} <= classes  # the C++ plugins beside them
    # Only classes deriving from agentd.Agent, defined in the folder's modules.
    assert "Agent" not in classes and "NotAnAgent" not in classes
    assert not any(c.startswith("agentd.") for c in classes)


def test_agent_dir_is_repeatable_and_a_config_key(tmp_path):
    s = drain_stderr(Server(extra=["--agent-dir", GOOD_AGENTS, "--agent-dir", agent_dir("extra")]))
    try:
        with s.connect() as c:
            assert {"PyEcho", "PyExtra"} <= set(c.info().classes)
            assert c.create_agent("PyExtra", "X")(Msg("user", "hi")).content == "extra:hi"
            assert c.create_agent("PyEcho", "E")(Msg("user", "hi")).content == "hi"
    finally:
        s.close()
    config = tmp_path / "server.yaml"
    config.write_text(f"agent-dir:\n  - {agent_dir('extra')}\n")
    s = drain_stderr(Server(extra=["--config", str(config)]))
    try:
        with s.connect() as c:
            classes = set(c.info().classes)
            assert "PyExtra" in classes and "PyEcho" not in classes
            assert c.create_agent("PyExtra", "X")(Msg("user", "yo")).content == "extra:yo"
    finally:
        s.close()


# ---------------------------------------------------------------------------------------------
# Lifecycle: create / create_agents / list / info / clone / delete.

def test_create_list_info_delete(py_client):
    a = py_client.create_agent("PyEcho", "E", {"prefix": "> "})
    assert (a.name, a.class_name) == ("E", "PyEcho")
    assert a.call("whoami")["name"] == "E" and a.call("whoami")["id"] == a.id
    listed = {i.id: i for i in py_client.list_agents()}
    assert a.id in listed
    assert (listed[a.id].name, listed[a.id].class_name) == ("E", "PyEcho")
    info = a.info()
    assert (info.id, info.name, info.class_name) == (a.id, "E", "PyEcho")
    assert py_client.agent(a.id).class_name == "PyEcho"
    assert a(Msg("user", "x")).content == "> x"
    assert a.info().completed_calls >= 1
    py_client.delete_agent(a.id)
    assert a.id not in {i.id for i in py_client.list_agents()}
    with pytest.raises(agentd.Error) as e:
        py_client.agent(a.id)
    assert e.value.code == "unknown_agent"
    with pytest.raises(agentd.Error) as e:
        a(Msg("user", "after delete")).get()
    assert e.value.code == "unknown_agent"


def test_agent_with_a_given_id(py_client):
    a = py_client.create_agent("PyEcho", id="py-given-id-" + py_client.server_id[:8])
    assert a.id.startswith("py-given-id-") and a.name == a.id
    assert a.call("whoami") == {"name": a.id, "id": a.id, "pid": py_client.info().pid}
    py_client.delete_agent(a.id)


def test_create_agents_in_bulk(py_client):
    agents = py_client.create_agents("PyEcho", 50, {"prefix": "p"}, name_prefix="w")
    assert [a.name for a in agents] == [f"w{i}" for i in range(50)]
    assert all(a.class_name == "PyEcho" for a in agents)
    assert len({a.id for a in agents}) == 50
    assert {a.id for a in agents} <= {i.id for i in py_client.list_agents()}
    replies = [a(Msg("user", str(i))) for i, a in enumerate(agents)]
    assert [r.content for r in replies] == [f"p{i}" for i in range(50)]
    assert [r.name for r in replies] == [f"w{i}" for i in range(50)]
    who = [a.call("whoami") for a in agents]
    assert [(w["name"], w["id"]) for w in who] == [(a.name, a.id) for a in agents]
    for a in agents:
        py_client.delete_agent(a.id)


def test_creation_args_arrive_as_keyword_arguments(py_client):
    s = py_client.create_agent("PyStrict", "S", {"level": 3})
    assert s(Msg("user", "?")).content == 3
    assert py_client.create_agent("PyStrict", "S0")(Msg("user", "?")).content == 0
    # A constructor that does not take an argument it is given: creation fails, naming it.
    with pytest.raises(agentd.Error) as e:
        py_client.create_agent("PyStrict", "strict-bogus", {"bogus": 1})
    assert e.value.code == "bad_args"  # as a C++ constructor's exception
    assert e.value.agent_class == "PyStrict"
    assert "bogus" in str(e.value) and "TypeError" in str(e.value)
    assert "strict-bogus" not in {i.name for i in py_client.list_agents()}
    with pytest.raises(agentd.Error) as e:
        py_client.create_agent("PyNoSuchClass")
    assert e.value.code == "unknown_class"
    py_client.ping()


def test_clone_agent_copies_memory_and_saved_state(py_client):
    a = py_client.create_agent("PyEcho", "orig", {"prefix": "p:"})
    a(Msg("user", "one")).get()
    a(Msg("user", "two")).get()
    twin = py_client.clone_agent(a.id, "twin")
    assert twin.id != a.id and (twin.name, twin.class_name) == ("twin", "PyEcho")
    assert contents(twin.memory()) == ["one", "p:one", "two", "p:two"]
    assert twin.call("count_replies") == 2  # load_state(save_state())
    assert twin.call("whoami")["name"] == "twin"
    r = twin(Msg("user", "three"))
    assert r.content == "p:three" and r.metadata["count"] == 3  # args copied, state its own
    assert a.call("count_replies") == 2
    assert contents(a.memory()) == ["one", "p:one", "two", "p:two"]


# ---------------------------------------------------------------------------------------------
# Calls: reply, __call__, observe, named methods, streaming, models.

def test_reply_and_call_run_on_the_server(py_client):
    a = py_client.create_agent("PyEcho", "E")
    p = a(Msg("user", {"k": [1, 2]}, role="user"))
    assert isinstance(p, agentd.Placeholder)
    m = p.get()
    assert isinstance(m, Msg)
    assert (m.content, m.name, m.role) == ({"k": [1, 2]}, "E", "assistant")
    assert m.metadata["pid"] == py_client.info().pid != os.getpid()
    q = a.reply(Msg("user", "via reply"))
    assert isinstance(q, agentd.Placeholder) and q.content == "via reply"
    assert a.reply().content == "<none>"  # x is None
    assert a().content == "<none>"
    assert a.call("count_replies") == 4


def test_observe_grows_memory(py_client):
    a = py_client.create_agent("PyEcho", "M")
    assert a.memory() == [] and a.call("memory_size") == 0
    a.observe(Msg("user", "heard"))
    assert contents(a.memory()) == ["heard"]
    a(Msg("user", "said")).get()
    a.observe(Msg("user", "heard again"))
    assert contents(a.memory()) == ["heard", "said", "said", "heard again"]
    assert a.call("memory_size") == 4
    assert a.call("memory_texts") == ["heard", "said", "said", "heard again"]
    assert all(isinstance(m, Msg) for m in a.memory())
    assert a.call("count_replies") == 1  # observe is not a reply
    # observe takes a C++ agent's placeholder without waiting for it
    w = py_client.create_agent("WebAgent", "W", {"sleep_ms": 2000})
    t0 = time.monotonic()
    a.observe(w(Msg("user", "q")))
    assert time.monotonic() - t0 < 1.5  # well before the 2 s answer (margin for loaded machines)
    assert a.memory()[-1].content == "Answer from W"
    assert a.call("forget") == 0
    assert a.memory() == []


def test_named_methods_by_call_and_by_attribute(py_client):
    a = py_client.create_agent("PyEcho", "N")
    assert a.call("ping", {"n": 2}) == {"pong": 2}
    assert a.call("ping") == {"pong": 1}
    p = a.ping(n=2)  # any other attribute name is a named method: a Placeholder
    assert isinstance(p, agentd.Placeholder)
    assert p.content == {"pong": 2}
    assert a.ping().content == {"pong": 1}
    assert a.call_async("ping", {"n": 5}).content == {"pong": 5}
    # only @agentd.method functions are reachable
    for name in ("nope", "not_exposed", "save_state", "reply"):
        with pytest.raises(agentd.Error) as e:
            a.call(name)
        assert e.value.code == "unknown_method", name
    with pytest.raises(agentd.Error) as e:
        a.not_exposed().get()
    assert e.value.code == "unknown_method"
    # async methods, called the same way
    f = py_client.create_agent("PyAsyncFail", "AF")
    assert f.call("twice", {"n": 4}) == 8
    assert f.twice(n=21).content == 42


def test_reply_stream_chunks_from_emit_chunk(py_client):
    a = py_client.create_agent("PyStream", "S")
    p = a.reply_stream(Msg("user", "streamed from python"))
    assert list(p.chunks()) == ["streamed ", "from ", "python"]
    assert p.content == "streamed from python"
    assert p.metadata["streaming"] is True
    assert p.next_chunk() is None
    words = " ".join(f"w{i}" for i in range(300))
    q = a.reply_stream(Msg("user", words))
    chunks = list(q.chunks())
    assert len(chunks) == 300 and "".join(chunks) == words
    assert chunks[:2] == ["w0 ", "w1 "] and chunks[-1] == "w299"
    plain = a(Msg("user", "not streamed"))
    assert plain.content == "not streamed" and plain.metadata["streaming"] is False
    # a streamed Python reply feeds a C++ agent
    t = py_client.create_agent("TrailAgent", "T")
    s = a.reply_stream(Msg("user", "x y"))
    assert t(s).content == "x y>T"
    assert list(s.chunks()) == ["x ", "y"]


def test_models_from_python_agents(py_client):
    m = py_client.create_agent("PyModel", "M")
    r = m(Msg("user", "say this back", role="user"))
    assert r.content == "say this back"
    usage = r.metadata["usage"]
    assert usage["completion_tokens"] == 3
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    assert r.metadata["latency"] >= 0
    assert m.call("streamed", {"text": "a b c"}) == "a b c"
    am = py_client.create_agent("PyAsyncModel", "AM")
    assert am(Msg("user", "async hello", role="user")).content == "model said: async hello"
    s = py_client.create_agent("PyModelStream", "MS")
    p = s.reply_stream(Msg("user", "one two three", role="user"))
    chunks = list(p.chunks())
    assert len(chunks) == 3 and "".join(chunks) == "one two three"
    assert p.content == "one two three"
    with pytest.raises(agentd.Error) as e:
        py_client.create_agent("PyModel", "M-bad", {"config": "no-such-config"})(Msg("user", "x")).get()
    assert e.value.agent_class == "PyModel" and "no-such-config" in str(e.value)


# ---------------------------------------------------------------------------------------------
# Placeholders in and out, and agents calling agents.

def test_placeholders_between_cpp_and_python_agents(py_client):
    t = py_client.create_agent("TrailAgent", "T")   # C++
    p = py_client.create_agent("PyTrail", "P")      # Python
    e = py_client.create_agent("EchoAgent", "E", {"prefix": "c:"})   # C++
    q = py_client.create_agent("PyEcho", "Q", {"prefix": "py:"})
    assert t(p(t(Msg("user", "x")))).content == "x>T>P>T"
    assert e(q(e(Msg("user", "x")))).content == "c:py:c:x"
    assert q(e(q(Msg("user", "x")))).content == "py:c:py:x"
    # handing a slow C++ placeholder to a Python agent does not wait
    w = py_client.create_agent("WebAgent", "W", {"sleep_ms": 2000})
    t0 = time.monotonic()
    r = p(w(Msg("user", "q")))
    s = t(r)
    assert time.monotonic() - t0 < 1.5  # well before the 2 s answer (margin for loaded machines)
    assert s.content == "Answer from W>P>T"
    assert time.monotonic() - t0 >= 1.9


def test_placeholders_across_two_servers(py_server, shared_server):
    with py_server.connect() as py, shared_server.connect() as cpp:
        a = cpp.create_agent("TrailAgent", "A")
        p = py.create_agent("PyTrail", "P")
        x = a(Msg("user", "x"))
        y = p(x)   # py_server fetches x from shared_server
        z = a(y)   # and back
        assert z.content == "x>A>P>A"
        assert x.origin == cpp.address and y.origin == py.address


def test_python_agent_calls_another_agent_blocking(py_client, shared_server):
    with shared_server.connect() as other:
        target = other.create_agent("EchoAgent", "Target", {"prefix": "t:"})
        relay = py_client.create_agent("PyRelay", "R", {"target": target})
        assert relay(Msg("user", "hi")).content == "relayed: t:hi"
        assert relay.call("ask_twice", {"text": "q"}) == ["t:q", "t:t:q"]
        assert relay.call("ping_target") == "pong"  # EchoAgent's ping ignores its args
    local = py_client.create_agent("PyEcho", "LocalTarget", {"prefix": "py:"})
    relay2 = py_client.create_agent("PyRelay", "R2", {"target": local})
    assert relay2(Msg("user", "hi")).content == "relayed: py:hi"
    assert relay2.call("ping_target") == {"pong": 7}
    # a relay's placeholder feeds another relay
    assert relay2(relay2(Msg("user", "x"))).content == "relayed: py:relayed: py:x"


def test_python_agent_awaits_another_agent(py_client, shared_server):
    local = py_client.create_agent("PyEcho", "LocalTarget", {"prefix": "py:"})
    relay = py_client.create_agent("PyAsyncRelay", "AR", {"target": local})
    assert relay(Msg("user", "hi")).content == "async relayed: py:hi"
    assert relay.call("fan_out", {"text": "m", "n": 3}) == ["py:m0", "py:m1", "py:m2"]
    with shared_server.connect() as other:
        t = other.create_agent("TrailAgent", "T")
        far = py_client.create_agent("PyAsyncRelay", "FAR", {"target": t})
        assert far(Msg("user", "x")).content == "async relayed: x>T"
        # a placeholder in, awaiting a placeholder inside
        assert far(t(Msg("user", "y"))).content == "async relayed: y>T>T"


def test_async_agents_awaiting_slow_agents_wait_together(py_client):
    n = 20
    slow = py_client.create_agents("WebAgent", n, {"sleep_ms": 1000}, name_prefix="slow")
    relays = [py_client.create_agent("PyAsyncRelay", f"AR{i}", {"target": s})
              for i, s in enumerate(slow)]
    t0 = time.monotonic()
    ps = [r(Msg("user", "q")) for r in relays]
    assert [p.content for p in ps] == [f"async relayed: Answer from slow{i}" for i in range(n)]
    elapsed = time.monotonic() - t0
    assert 0.95 <= elapsed < 6, elapsed  # 20 s if the awaits ran one after another


# ---------------------------------------------------------------------------------------------
# Ordering.

def test_calls_to_one_python_agent_keep_their_order(py_client):
    a = py_client.create_agent("PySeq", "S")
    n = 300
    ps = [a(Msg("user", i)) for i in range(n)]
    assert [p.content for p in ps] == list(range(1, n + 1))
    assert a.call("seen_so_far") == list(range(n))


def test_calls_to_one_async_python_agent_keep_their_order(py_client):
    a = py_client.create_agent("PyAsyncSeq", "AS")
    n = 200
    ps = [a(Msg("user", i)) for i in range(n)]
    assert [p.content for p in ps] == list(range(1, n + 1))
    assert a.call("seen_so_far") == list(range(n))


def test_observe_reply_and_methods_keep_their_order(py_client):
    a = py_client.create_agent("PyEcho", "O")
    for i in range(20):
        a.observe(Msg("user", f"o{i}"))
        a(Msg("user", f"r{i}"))
        a.call_async("memory_size")
    sizes = [a.call_async("memory_size") for _ in range(3)]
    assert [s.content for s in sizes] == [60, 60, 60]
    expected = []
    for i in range(20):
        expected += [f"o{i}", f"r{i}", f"r{i}"]
    assert contents(a.memory()) == expected


# ---------------------------------------------------------------------------------------------
# Errors.

def test_python_exception_fails_the_call_with_type_message_and_traceback(py_client):
    a = py_client.create_agent("PyFail", "F")
    p = a(Msg("user", "fail"))
    with pytest.raises(agentd.Error) as e:
        p.get()
    err = e.value
    assert err.code == "agent_failed" and err.retryable is False
    assert err.agent_id == a.id and err.agent_class == "PyFail"
    assert a.id in str(err) and "PyFail" in str(err)  # names the agent and class
    assert "ValueError: asked to fail on call 1" in err.message
    assert "Traceback" in err.message
    line = marker_line(os.path.join(GOOD_AGENTS, "pyecho.py"), "# PyFail.reply raise")
    assert f"line {line}, in reply" in err.message
    assert "pyecho.py" in err.message
    with pytest.raises(agentd.Error):
        p.content  # reading a field raises the same
    # the agent stays usable and keeps its state
    assert a(Msg("user", "fine")).content == "fine"
    assert a.call("calls_made") == 2
    assert a.info().failed_calls >= 1


def test_python_exception_in_a_method(py_client):
    a = py_client.create_agent("PyFail", "F")
    with pytest.raises(agentd.Error) as e:
        a.call("boom", {"key": "absent-key"})
    assert e.value.code == "agent_failed" and e.value.agent_class == "PyFail"
    assert "KeyError" in e.value.message and "absent-key" in e.value.message
    line = marker_line(os.path.join(GOOD_AGENTS, "pyecho.py"), "# PyFail.boom raise")
    assert f"line {line}, in boom" in e.value.message
    with pytest.raises(agentd.Error) as e:
        a.boom(key="k").get()
    assert e.value.code == "agent_failed" and "KeyError" in e.value.message
    assert a.call("calls_made") == 0
    assert a(Msg("user", "ok")).content == "ok"


def test_python_failure_reaches_consumers(py_client):
    f = py_client.create_agent("PyFail", "F")
    e_cpp = py_client.create_agent("EchoAgent", "E")
    e_py = py_client.create_agent("PyEcho", "P")
    for consumer in (e_cpp, e_py):
        with pytest.raises(agentd.Error) as e:
            consumer(f(Msg("user", "fail"))).get()
        assert e.value.code == "agent_failed" and e.value.agent_class == "PyFail"
        assert "ValueError" in e.value.message
    # a C++ failure reaches a Python consumer
    flaky = py_client.create_agent("FlakyAgent", "FL")
    with pytest.raises(agentd.Error) as e:
        e_py(flaky(Msg("user", "fail"))).get()
    assert e.value.agent_class == "FlakyAgent"
    assert e_py(Msg("user", "still here")).content == "still here"


def test_async_python_exception(py_client):
    a = py_client.create_agent("PyAsyncFail", "AF")
    with pytest.raises(agentd.Error) as e:
        a(Msg("user", "fail")).get()
    err = e.value
    assert err.code == "agent_failed" and err.agent_id == a.id and err.agent_class == "PyAsyncFail"
    assert "LookupError: async agent asked to fail" in err.message
    line = marker_line(os.path.join(GOOD_AGENTS, "pyasync.py"), "# PyAsyncFail.reply raise")
    assert f"line {line}, in reply" in err.message
    assert a(Msg("user", "fine")).content == "fine"


# ---------------------------------------------------------------------------------------------
# Start-up refusals: modules that fail to import, classes defined twice.

# as_server's exit code for a module that fails to import: 4, a plugin error (README "Running
# as_server": 2 bad option or config, 3 cannot listen, 4 plugin error); Python modules are loaded
# by the Python host plugin.
REFUSED_MODULE = 4

@pytest.mark.parametrize("folder,module,expected", [
    ("bad_syntax", "broken_syntax.py", ["SyntaxError"]),
    ("bad_raise", "raises_at_import.py", ["RuntimeError", "this agent module refuses to load"]),
    ("bad_import", "missing_module.py", ["ModuleNotFoundError", "agentd_tests_no_such_module_xyz"]),
])
def test_a_module_that_fails_to_import_refuses_start_up(folder, module, expected):
    path = os.path.join(agent_dir(folder), module)
    line = marker_line(path, "# ERROR LINE")
    rc, out, err = start_refused(["--agent-dir", agent_dir(folder)])
    assert rc == REFUSED_MODULE, (rc, err)
    assert READY not in out
    assert f"{module}:{line}" in err, err
    for text in expected:
        assert text in err, err


def test_a_failing_module_refuses_start_up_beside_good_folders():
    rc, out, err = start_refused(["--agent-dir", GOOD_AGENTS, "--agent-dir", agent_dir("bad_raise")])
    assert rc == REFUSED_MODULE, (rc, err)
    line = marker_line(os.path.join(agent_dir("bad_raise"), "raises_at_import.py"), "# ERROR LINE")
    assert f"raises_at_import.py:{line}" in err, err


def test_a_class_defined_twice_is_refused_naming_both_files():
    rc, out, err = start_refused(["--agent-dir", agent_dir("dup")])
    assert rc != 0 and rc > 0, (rc, err)
    assert READY not in out
    assert "PyTwice" in err and "dup_one.py" in err and "dup_two.py" in err, err


def test_a_python_class_named_like_a_cpp_class_is_refused_naming_both():
    rc, out, err = start_refused(["--agent-dir", agent_dir("dup_cpp")])
    assert rc != 0 and rc > 0, (rc, err)
    assert "EchoAgent" in err and "echo_clash.py" in err and "libecho_agent.so" in err, err


def test_a_missing_agent_dir_is_refused(tmp_path):
    missing = str(tmp_path / "no-such-folder")
    rc, out, err = start_refused(["--agent-dir", missing])
    assert rc != 0 and rc > 0, (rc, err)
    assert missing in err, err


# ---------------------------------------------------------------------------------------------
# Concurrency: blocking agents release the GIL; async agents hold no thread.

def test_blocking_python_agents_sleep_in_parallel(py_server):
    with py_server.connect() as c:
        agents = [c.create_agent("PySleeper", f"Z{i}") for i in range(5)]
        t0 = time.monotonic()
        ps = [a(Msg("user", {"seconds": 2})) for a in agents]
        spans = [p.content for p in ps]
        elapsed = time.monotonic() - t0
        assert 2 <= elapsed < 6, elapsed  # 10 s if one sleep held the GIL
        assert all(s["ended"] - s["started"] >= 1.9 for s in spans)
        # every sleep started before any ended: they ran at the same time
        assert max(s["started"] for s in spans) < min(s["ended"] for s in spans), spans
        for a in agents:
            c.delete_agent(a.id)


def test_500_async_python_agents_wait_at_once(py_server):
    n = 500
    with py_server.connect() as c:
        agents = c.create_agents("PyAsyncSleeper", n, name_prefix="as")
        pid = py_server.proc.pid
        baseline = thread_count(pid)
        peak = [baseline]
        done = threading.Event()

        def sample():
            while not done.is_set():
                peak[0] = max(peak[0], thread_count(pid))
                done.wait(0.02)

        sampler = threading.Thread(target=sample)
        sampler.start()
        try:
            t0 = time.monotonic()
            ps = [a(Msg("user", {"seconds": 1})) for a in agents]
            spans = [p.content for p in ps]
            elapsed = time.monotonic() - t0
        finally:
            done.set()
            sampler.join()
        assert 1 <= elapsed < 10, elapsed
        assert all(s["ended"] - s["started"] >= 0.95 for s in spans)
        assert max(s["started"] for s in spans) < min(s["ended"] for s in spans)
        # waiting in asyncio.sleep holds no thread: 500 blocked threads would show here
        assert peak[0] - baseline < 250, (baseline, peak[0])
        for a in agents:
            c.delete_agent(a.id)


# ---------------------------------------------------------------------------------------------
# Durability: --state-dir across kill -9.

def test_state_dir_keeps_python_agents_across_kill_9(tmp_path):
    state = str(tmp_path / "state")
    extra = ["--agent-dir", GOOD_AGENTS, "--state-dir", state]
    s = drain_stderr(Server(extra=extra))
    try:
        with s.connect() as c:
            a = c.create_agent("PyEcho", "D", {"prefix": "d:"}, id="durable-py")
            a.observe(Msg("user", "heard"))
            assert a(Msg("user", "one")).content == "d:one"
            assert a(Msg("user", "two")).content == "d:two"
            assert c.info().state_dir != ""
            seq = c.create_agent("PyAsyncSeq", "AS", id="durable-async")
            assert seq(Msg("user", 5)).content == 1
            s.proc.kill()  # SIGKILL: no clean stop
            assert s.proc.wait(timeout=30) == -9
    finally:
        s.close()
    s = drain_stderr(Server(extra=extra))
    try:
        with s.connect() as c:
            b = c.agent("durable-py")
            assert (b.name, b.class_name) == ("D", "PyEcho")
            assert contents(b.memory()) == ["heard", "one", "d:one", "two", "d:two"]
            assert b.call("count_replies") == 2           # save_state / load_state
            assert b.call("memory_size") == 5             # the agent's own self.memory
            r = b(Msg("user", "three"))
            assert r.content == "d:three" and r.metadata["count"] == 3   # args kept
            assert r.metadata["pid"] == s.proc.pid
            assert c.agent("durable-async").class_name == "PyAsyncSeq"
            assert c.agent("durable-async")(Msg("user", 6)).content == 1  # no save_state: fresh
    finally:
        s.close()
    # and once more, after the call made on the restarted server
    s = drain_stderr(Server(extra=extra))
    try:
        with s.connect() as c:
            b = c.agent("durable-py")
            assert b.call("count_replies") == 3
            assert contents(b.memory())[-2:] == ["three", "d:three"]
    finally:
        s.close()


def test_an_asyncio_main_program_awaits_placeholders(py_client):
    """`await placeholder` in a main program's own asyncio loop: the replies arrive through the
    loop (no thread blocked per wait), failures raise agentd.Error, a ready one returns at once."""
    import asyncio

    sleepers = [py_client.create_agent("PySleeper", f"AW{i}") for i in range(4)]
    failing = py_client.create_agent("PyFail", "AWF")

    async def main():
        t0 = time.monotonic()
        answers = await asyncio.gather(*[s(Msg("user", {"seconds": 1})) for s in sleepers])
        elapsed = time.monotonic() - t0
        with pytest.raises(agentd.Error) as err:
            await failing(Msg("user", "fail"))
        done = sleepers[0](Msg("user", {"seconds": 0}))
        done.get()
        again = await done  # ready already
        return answers, elapsed, err.value, again

    answers, elapsed, error, again = asyncio.run(main())
    assert len(answers) == 4 and all(isinstance(a, Msg) for a in answers)
    assert elapsed < 3.5, elapsed  # the four 1 s sleeps overlap (4 s one after another)
    assert error.code == "agent_failed"
    assert isinstance(again, Msg)


def test_an_async_agent_awaiting_a_failed_call_gets_its_error(py_client):
    """The failure of an awaited placeholder reaches the awaiting async agent as agentd.Error
    (and so its caller), instead of leaving it waiting."""
    target = py_client.create_agent("PyFail", "ARF_target")
    relay = py_client.create_agent("PyAsyncRelay", "ARF", {"target": target.to_value()})
    with pytest.raises(agentd.Error) as err:
        relay(Msg("user", "fail")).get(timeout=30)
    assert err.value.code == "agent_failed"
    assert "asked to fail" in str(err.value)
    assert relay(Msg("user", "fine")).get(timeout=30).content  # the relay goes on

"""agentd.Cluster: several servers as one, from Python (placement, members, child servers)."""
import pytest

import agentd
from agentd import Msg

from conftest import CHILD_TOKEN, PLUGINS, Server


def address_of(ref):
    return ref.to_value()["agentd_agent_ref"]["address"]


def test_cluster_over_running_servers_places_and_mixes_refs():
    a, b = Server(), Server()
    try:
        spec = f"{a.host}:{a.port},{b.host}:{b.port}"
        with agentd.Cluster.open(spec, placement="least_loaded") as cluster:
            assert len(cluster) == 2
            assert [m["up"] for m in cluster.members()] == [True, True]
            a.connect().create_agents("EchoAgent", 3)
            # least_loaded: the empty second server first.
            first = cluster.create_agent("EchoAgent", "x", {"prefix": "x:"})
            assert address_of(first) == f"{b.host}:{b.port}"
            other = cluster.create_agent_on(0, "EchoAgent", "y", {"prefix": "y:"})
            assert address_of(other) == f"{a.host}:{a.port}"
            # A placeholder made on one server is consumed on the other.
            assert other(first(Msg("user", "hi"))).content == "y:x:hi"
            refs = cluster.create_agents("EchoAgent", 4, name_prefix="p")
            assert [r.name for r in refs] == ["p0", "p1", "p2", "p3"]
            assert cluster.info(0).agent_count + cluster.info(1).agent_count == 9
            assert cluster.agent(first.id).name == "x"
            with pytest.raises(agentd.Error) as e:
                cluster.create_agent_on("127.0.0.1:1", "EchoAgent")
            assert e.value.code == "bad_args"
        assert cluster.closed
        with pytest.raises(agentd.Error, match="closed"):
            first.reply(Msg("user", "after close"))
    finally:
        a.close()
        b.close()


def test_cluster_members_down_and_bad_options():
    a = Server()
    try:
        with agentd.Cluster.open(f"{a.host}:{a.port},127.0.0.1:1") as cluster:
            members = cluster.members()
            assert members[0]["up"] and not members[1]["up"]
            assert members[1]["error"]
            assert cluster.info(1) is None
            assert address_of(cluster.create_agent("EchoAgent")) == f"{a.host}:{a.port}"
        with pytest.raises(agentd.Error) as e:
            agentd.Cluster.open(f"{a.host}:{a.port}", placement="random")
        assert e.value.code == "bad_args"
        with pytest.raises(agentd.Error) as e:
            agentd.Cluster.open("127.0.0.1:1")
        assert e.value.code == "disconnected" and e.value.retryable
    finally:
        a.close()


def test_spawn_children_spreads_agents_and_stops_them():
    with agentd.Cluster.spawn_children(2, plugins=PLUGINS, token=CHILD_TOKEN) as cluster:
        assert [m["source"] for m in cluster.members()] == ["child", "child"]
        refs = cluster.create_agents("EchoAgent", 10, {"prefix": "e:"})
        assert len({address_of(r) for r in refs}) == 2
        assert [cluster.info(i).agent_count for i in range(2)] == [5, 5]
        # A chain through agents on both children.
        p = refs[0](Msg("user", "go"))
        for r in refs[1:4]:
            p = r(p)
        assert p.content == "e:e:e:e:go"
        pids = [cluster.info(i).pid for i in range(2)]
    import os
    import time
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(_alive(pid) for pid in pids):
        time.sleep(0.05)
    assert not any(_alive(pid) for pid in pids)


def _alive(pid):
    import os
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False

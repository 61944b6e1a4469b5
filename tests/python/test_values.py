"""Python values <-> agentd values (nlohmann::json), both ways without loss, and large hand-offs."""
import pytest

import agentd
from agentd import Msg

MIB = 1 << 20

VALUES = [
    None, True, False, 0, -1, 2**63 - 1, -2**63, 2**64 - 1, 1.5, -0.0, 1e300,
    "", "plain", "héllo wörld — 世界 🎉", "nul\x00inside",
    b"", b"\x00\x01\xff" * 100, [], {}, [1, "two", 3.0, None, [b"x"], {"k": False}],
    {"nested": {"deeper": {"deepest": [1, {"x": b"\x80"}]}}, "unicode ключ": "значение"},
]


@pytest.mark.parametrize("value", VALUES, ids=range(len(VALUES)))
def test_round_trip_through_an_agent(client, value):
    a = client.create_agent("EchoAgent", "V")
    got = a(Msg("user", value)).content
    assert got == value and type(got) is type(value)


def test_round_trip_types_are_exact(client):
    a = client.create_agent("EchoAgent", "V")
    got = a(Msg("user", {"i": 1, "f": 1.0, "b": True, "s": "1", "y": b"1"})).content
    assert [type(got[k]) for k in "ifbsy"] == [int, float, bool, str, bytes]


def test_tuples_bytearrays_and_memoryviews_are_sent_as_lists_and_bytes(client):
    a = client.create_agent("EchoAgent", "V")
    got = a(Msg("user", (1, bytearray(b"ab"), memoryview(b"cd")))).content
    assert got == [1, b"ab", b"cd"]


def test_args_and_method_values(client):
    a = client.create_agent("EchoAgent", "V", {"prefix": "é:"})
    assert a(Msg("user", "ü")).content == "é:ü"
    assert a.call("add", {"a": 2**40, "b": 0.5}) == 2**40 + 0.5


def test_msg_fields_and_metadata():
    m = Msg("alice", {"x": [1, b"\x00"]}, role="user", metadata={"trace": "t1"}, url=["u1"])
    assert (m.name, m.role, m.content, m.metadata, m.url) == ("alice", "user", {"x": [1, b"\x00"]},
                                                             {"trace": "t1"}, ["u1"])
    assert len(m.id) == 32 and len(m.timestamp) == 19
    assert Msg.from_dict(m.to_dict()) == m
    m.content = "changed"
    assert m.text() == "changed"
    assert Msg("a", "b", id="fixed").id == "fixed"
    assert Msg("a").content is None and Msg("a").role == "assistant"


def test_metadata_reaches_the_agent(client):
    a = client.create_agent("EchoAgent", "V")
    a.observe(Msg("user", "m", metadata={"k": [1, 2], "b": b"\x01"}))
    assert a.memory()[-1].metadata == {"k": [1, 2], "b": b"\x01"}


@pytest.mark.parametrize("bad, error", [
    ({1, 2}, TypeError), (2**64, ValueError), (-2**63 - 1, ValueError), ({1: "int key"}, TypeError),
    (object(), TypeError),
])
def test_values_that_cannot_be_sent(bad, error):
    with pytest.raises(error):
        Msg("user", bad)


def test_large_values(client):
    a = client.create_agent("EchoAgent", "V")
    text = "ä" * MIB
    blob = bytes(range(256)) * (MIB // 256)
    many = list(range(100_000))
    assert a(Msg("user", text)).content == text
    assert a(Msg("user", blob)).content == blob
    assert a(Msg("user", many)).content == many


def test_one_mib_hand_off_between_servers(shared_server):
    from conftest import CHILD_TOKEN, PLUGINS
    with agentd.Client.spawn_child(plugins=PLUGINS, token=CHILD_TOKEN) as one, \
            shared_server.connect() as two:
        big = one.create_agent("BigTextAgent", "Big", {"bytes": MIB})
        size = two.create_agent("TextSizeAgent", "Size")
        assert size(big(Msg("user", "go"))).content == {"size": MIB, "head": "b" * 8}
        blob = one.create_agent("BlobAgent", "Blob")
        made = blob(Msg("user", {"make_bytes": MIB}))
        counted = two.create_agent("BlobAgent", "Count")(made)
        assert counted.content == {"size": MIB}
        data = made.content
        assert len(data) == MIB and data[:4] == bytes([0, 31, 62, 93])


def test_one_mib_from_python(remote_client):
    blob = remote_client.create_agent("BlobAgent", "Blob")
    assert blob(Msg("user", b"\x07" * MIB)).content == {"size": MIB}


def test_reprs(client):
    assert repr(Msg("a", {"k": b"\x00"})) == "Msg(name='a', role='assistant', content={'k': b'\\x00'})"
    a = client.create_agent("EchoAgent", "R")
    assert repr(a).startswith("AgentRef(id=") and "class_name='EchoAgent'" in repr(a)
    p = a(Msg("user", "x"))
    assert repr(p) == f"Placeholder(call_id='{p.call_id}')"
    assert repr(client).startswith("Client(address=")


def nested(depth):
    """A list nested depth levels deep, built without recursion."""
    v = "bottom"
    for _ in range(depth):
        v = [v]
    return v


def depth_of(v):
    depth = 0
    while isinstance(v, list):
        depth += 1
        v = v[0] if v else None
    return depth


def test_values_nest_up_to_64_levels_and_deeper_ones_are_refused(client):
    a = client.create_agent("EchoAgent", "Deep")
    assert depth_of(a(Msg("user", nested(64))).content) == 64
    for depth in (65, 20_000):
        with pytest.raises(ValueError, match="nested deeper than 64 levels"):
            Msg("user", nested(depth))
        with pytest.raises(ValueError, match="nested deeper than 64 levels"):
            a.call("add", nested(depth))
        with pytest.raises(ValueError, match="nested deeper than 64 levels"):
            client.create_agent("EchoAgent", "D", {"k": nested(depth)})
    looped = []
    looped.append(looped)
    with pytest.raises(ValueError, match="64"):
        Msg("user", {"loop": looped})
    assert a(Msg("user", "still here")).content == "still here"


def test_text_that_is_not_utf8_is_refused_and_listing_works(client):
    with pytest.raises(agentd.Error) as refused:
        client.create_agent("EchoAgent", b"bad \xff name")
    assert refused.value.code == "bad_request" and "not UTF-8" in refused.value.message
    client.create_agent("EchoAgent", "fine")
    assert "fine" in [i.name for i in client.list_agents()]

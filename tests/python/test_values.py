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

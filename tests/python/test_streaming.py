"""Streamed replies from Python: reply_stream, chunks() and next_chunk(), in every mode."""
import pytest

import agentd
from agentd import Msg


def test_chunks_arrive_in_order_and_get_is_whole(client):
    a = client.create_agent("StreamEchoAgent", "S")
    p = a.reply_stream(Msg("user", {"count": 500}))
    chunks = list(p.chunks())
    assert chunks == [f"{i} " for i in range(500)]
    assert p.content == "".join(chunks)
    assert p.next_chunk() is None

    words = a.reply_stream(Msg("user", "streamed from python"))
    assert [c for c in words.chunks()] == ["streamed ", "from ", "python"]


def test_failure_mid_stream_raises_after_the_chunks(client):
    a = client.create_agent("StreamEchoAgent", "S")
    p = a.reply_stream(Msg("user", {"count": 5, "fail_after": 2}))
    assert p.next_chunk() == "0 "
    assert p.next_chunk() == "1 "
    with pytest.raises(agentd.Error) as e:
        p.next_chunk()
    assert e.value.code == "agent_failed"
    assert e.value.agent_id == a.id


def test_a_streamed_placeholder_feeds_another_agent(client):
    a = client.create_agent("StreamEchoAgent", "S")
    t = client.create_agent("TrailAgent", "T")
    p = a.reply_stream(Msg("user", "x y"))
    q = t.reply(p)
    assert q.content == "x y>T"
    assert list(p.chunks()) == ["x ", "y"]

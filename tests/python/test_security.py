"""Tokens and Unix sockets from Python: Client.connect(token=...), $AGENTD_TOKEN, unix:PATH."""
import os

import pytest

import agentd
from agentd import Msg
from conftest import Server


@pytest.fixture
def tokened(tmp_path):
    token = "python-test-token-0123456789abcdef"
    path = tmp_path / "tokens"
    path.write_text(token + "\n")
    os.chmod(path, 0o600)
    sock = str(tmp_path / "agentd.sock")
    s = Server(extra=["--auth-token-file", str(path), "--unix-socket", sock])
    yield s, token, sock
    s.close()


def test_the_right_token_gets_in_a_wrong_one_is_refused(tokened, monkeypatch):
    s, token, sock = tokened
    monkeypatch.delenv("AGENTD_TOKEN", raising=False)
    with s.connect(token=token) as c:
        assert c.create_agent("EchoAgent", "E")(Msg("user", "hi")).content == "hi"
    with pytest.raises(agentd.Error) as e:
        s.connect(token="guess")
    assert e.value.code == "unauthenticated"
    with pytest.raises(agentd.Error) as e:
        s.connect()
    assert e.value.code == "unauthenticated"
    monkeypatch.setenv("AGENTD_TOKEN", token)
    with s.connect() as c:
        assert c.info().agent_count == 1


def test_unix_socket_address(tokened):
    s, token, sock = tokened
    with agentd.Client.connect("unix:" + sock, 0, token=token) as c:
        assert c.address == f"{s.host}:{s.port}"

"""Waits release the GIL and Ctrl-C interrupts them."""
import os
import signal
import threading
import time

import pytest

import agentd
from agentd import Msg

SLOW_MS = 1000


def test_two_threads_wait_in_parallel(client):
    agents = [client.create_agent("WebAgent", f"W{i}", {"sleep_ms": SLOW_MS}) for i in range(2)]
    t0 = time.monotonic()
    agents[0](Msg("user", "q")).get()
    one = time.monotonic() - t0

    answers = []
    def ask(a):  # noqa: E306 -- each thread makes its call and waits on it
        answers.append(a(Msg("user", "q")).content)
    threads = [threading.Thread(target=ask, args=(a,)) for a in agents]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    # Python keeps running while both wait.
    spins = 0
    while any(t.is_alive() for t in threads):
        spins += 1
        time.sleep(0.001)
    both = time.monotonic() - t0
    assert sorted(answers) == ["Answer from W0", "Answer from W1"]
    assert spins > 50
    # Holding the GIL while waiting would make it 2x; allow plenty of noise.
    assert both < 1.6 * one, f"two waits took {both:.2f} s, one took {one:.2f} s"


def test_sync_calls_release_the_gil(remote_client):
    a = remote_client.create_agent("WebAgent", "W", {"sleep_ms": 600})
    a(Msg("user", "q"))
    ticks = []
    stop = threading.Event()
    def tick():  # noqa: E306
        while not stop.is_set():
            ticks.append(1)
            time.sleep(0.005)
    t = threading.Thread(target=tick)
    t.start()
    a.memory()  # waits for the queued reply (about 600 ms) without the GIL
    stop.set()
    t.join()
    assert len(ticks) > 20


def test_ctrl_c_interrupts_a_waiting_get(client):
    a = client.create_agent("WebAgent", "W", {"sleep_ms": 2500})
    p = a(Msg("user", "q"))
    timer = threading.Timer(0.3, os.kill, args=(os.getpid(), signal.SIGINT))
    t0 = time.monotonic()
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            p.get()
    finally:
        timer.cancel()
    assert time.monotonic() - t0 < 2
    # The placeholder is still usable after the interrupt.
    assert p.get(timeout=30).content == "Answer from W"


def test_ctrl_c_interrupts_a_field_read(remote_client):
    a = remote_client.create_agent("WebAgent", "W", {"sleep_ms": 2500})
    p = a(Msg("user", "q"))
    timer = threading.Timer(0.3, os.kill, args=(os.getpid(), signal.SIGINT))
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            p.content
    finally:
        timer.cancel()

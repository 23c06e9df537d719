"""The UDP listener's sessions: no one user and no one source address pushes out the sessions of others."""

from __future__ import annotations

from kittiwake.broker.udp.sessions import Sessions, SessionsFull

import pytest


def key(producer: int, host: str = "10.0.0.1", port: int = 4000) -> tuple[int, tuple[str, int]]:
    return producer, (host, port)


def test_a_user_over_its_cap_pushes_out_its_own_oldest_session_only() -> None:
    sessions: Sessions[str] = Sessions(max_sessions=100, max_per_user=5, max_per_host=100)
    sessions.add(key(1, "10.0.0.9"), "alice", "alice", now=0.0)
    for producer in range(100, 120):  # mallory varies her producer id, from many addresses
        sessions.add(key(producer, f"10.1.0.{producer}"), "mallory", "mallory", now=1.0)
    assert sessions.users() == {"alice": 1, "mallory": 5}
    assert sessions.get(key(1, "10.0.0.9"), now=2.0) == "alice"
    assert sessions.get(key(119, "10.1.0.119"), now=2.0) == "mallory"  # her newest are kept
    assert sessions.get(key(100, "10.1.0.100"), now=2.0) is None


def test_an_address_over_its_cap_pushes_out_the_user_s_own_then_refuses() -> None:
    sessions: Sessions[str] = Sessions(max_sessions=100, max_per_user=100, max_per_host=4, idle_secs=600.0)
    sessions.add(key(1), "alice", "alice", now=0.0)
    for producer in range(2, 20):
        sessions.add(key(producer), "mallory", "mallory", now=1.0)
    assert sessions.users() == {"alice": 1, "mallory": 3}
    assert sessions.get(key(1), now=2.0) == "alice"
    with pytest.raises(SessionsFull):  # the address is full of sessions of others, none idle
        sessions.add(key(30, port=5000), "carol", "carol", now=3.0)
    assert sessions.users() == {"alice": 1, "mallory": 3}
    sessions.add(key(31), "carol", "carol", now=700.0)  # idle ones there make room
    assert len(sessions) == 4


def test_a_full_table_pushes_out_the_heaviest_user_s_oldest() -> None:
    sessions: Sessions[str] = Sessions(max_sessions=6, max_per_user=4, max_per_host=100)
    sessions.add(key(1), "alice", "alice", now=0.0)
    sessions.add(key(2), "bob", "bob", now=0.0)
    for producer in range(10, 20):
        sessions.add(key(producer), "mallory", "mallory", now=1.0)
    assert sessions.users() == {"alice": 1, "bob": 1, "mallory": 4}
    sessions.add(key(3), "carol", "carol", now=2.0)  # the table is full: mallory, holding the most, gives one
    assert sessions.users() == {"alice": 1, "bob": 1, "mallory": 3, "carol": 1}


def test_idle_sessions_are_gone() -> None:
    sessions: Sessions[str] = Sessions(idle_secs=10.0)
    sessions.add(key(1), "alice", "alice", now=0.0)
    assert sessions.has(key(1), now=5.0) and sessions.get(key(1), now=5.0) == "alice"
    assert not sessions.has(key(1), now=16.0)
    assert sessions.get(key(1), now=16.0) is None and len(sessions) == 0

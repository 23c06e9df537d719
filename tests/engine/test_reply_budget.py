"""A lease or peek reply stops at the data budget, so no reply is too large to read."""

from __future__ import annotations

from kittiwake.engine import Engine
from kittiwake.model import LeaseRequest, Limits, NewTask
from kittiwake.store.memory import MemoryStore

NOW = 1_000_000.0
MIB = 1 << 20


def test_lease_of_large_tasks_stops_at_the_reply_budget() -> None:
    engine = Engine(MemoryStore(), limits=Limits(max_reply_data_bytes=4 * MIB))
    engine.enqueue([NewTask("big", b"x" * MIB, pid=f"p{n:02d}") for n in range(10)], NOW)
    first = engine.lease(LeaseRequest(["big"], max_tasks=10), NOW)
    assert [t.pid for t in first] == ["p00", "p01", "p02", "p03"]
    second = engine.lease(LeaseRequest(["big"], max_tasks=10), NOW)
    assert [t.pid for t in second] == ["p04", "p05", "p06", "p07"]


def test_one_task_is_always_leased_even_over_the_budget() -> None:
    engine = Engine(MemoryStore(), limits=Limits(max_reply_data_bytes=10))
    engine.enqueue([NewTask("q", b"y" * 100, pid="a"), NewTask("q", b"y" * 100, pid="b")], NOW)
    assert [t.pid for t in engine.lease(LeaseRequest(["q"], max_tasks=5), NOW)] == ["a"]


def test_peek_stops_at_the_reply_budget() -> None:
    engine = Engine(MemoryStore(), limits=Limits(max_reply_data_bytes=2 * MIB))
    engine.enqueue([NewTask("big", b"x" * MIB, pid=f"p{n}") for n in range(5)], NOW)
    assert len(engine.peek("big", 5, None, NOW)) == 2

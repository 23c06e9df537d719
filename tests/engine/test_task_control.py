"""Conditional enqueue, progress, burying at once, and the broker-wide rate limit."""

from __future__ import annotations

from kittiwake.engine import Engine
from kittiwake.model import LeaseRef, LeaseRequest, NewTask
from kittiwake.store.memory import MemoryStore

NOW = 1_000_000.0


def test_unless_collapses_when_a_named_task_exists() -> None:
    engine = Engine(MemoryStore())
    engine.enqueue([NewTask("ticks", b"", pid="t1")], NOW)
    [outcome] = engine.enqueue([NewTask("work", b"", pid="t1", unless=[("ticks", "t1")])], NOW)
    assert outcome.collapsed
    [outcome] = engine.enqueue([NewTask("work", b"", pid="t2", unless=[("ticks", "t2")])], NOW)
    assert not outcome.collapsed


def test_renew_records_progress_and_note() -> None:
    engine = Engine(MemoryStore())
    engine.enqueue([NewTask("q", b"", pid="a")], NOW)
    [task] = engine.lease(LeaseRequest(["q"]), NOW)
    engine.renew([LeaseRef("q", "a", task.lease_id)], 30, NOW, progress=0.4, note="halfway")
    view = engine.get("q", "a", NOW)
    assert (view["progress"], view["note"]) == (0.4, "halfway")


def test_release_with_bury_dead_letters_at_once() -> None:
    engine = Engine(MemoryStore())
    engine.enqueue([NewTask("q", b"", pid="a")], NOW)
    [task] = engine.lease(LeaseRequest(["q"]), NOW)
    [outcome] = engine.release([LeaseRef("q", "a", task.lease_id)], "WORKER_LOST", NOW, bury=True)
    assert outcome.dead
    assert engine.get("q.dead", "a", NOW)["headers"]["kittiwake-dead-reason"] == "WORKER_LOST"


def test_the_rate_limit_holds_across_leases() -> None:
    engine = Engine(MemoryStore())
    engine.enqueue([NewTask("slow", b"", pid=f"{n:03d}") for n in range(100)], NOW)
    request = lambda: LeaseRequest(["slow"], max_tasks=100, rate_per_sec=10)  # noqa: E731
    assert len(engine.lease(request(), NOW)) == 10  # the burst: one second's worth
    assert engine.lease(request(), NOW) == []
    assert len(engine.lease(request(), NOW + 0.5)) == 5
    # two "workers" leasing over 3 seconds together get 30 more, not 60
    got = sum(len(engine.lease(request(), NOW + 0.5 + step / 10)) for step in range(1, 31))
    assert got == 30


def test_a_throttled_queue_becomes_ready_when_its_token_is_due() -> None:
    engine = Engine(MemoryStore())
    engine.enqueue([NewTask("slow", b"", pid=f"{n}") for n in range(3)], NOW)
    engine.lease(LeaseRequest(["slow"], max_tasks=10, rate_per_sec=1), NOW)
    engine.take_ready()
    assert engine.lease(LeaseRequest(["slow"], max_tasks=10, rate_per_sec=1), NOW) == []
    engine.sweep(NOW + 0.5)
    assert "slow" not in engine.take_ready()
    engine.sweep(NOW + 1.01)
    assert "slow" in engine.take_ready()

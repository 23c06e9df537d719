"""The broker-wide rate limit of leases (engine/rate_limit.py, applied by leases.lease)."""

from __future__ import annotations

from kittiwake.engine import Engine
from kittiwake.model import LeaseRequest, NewTask
from kittiwake.store.memory import MemoryStore

NOW = 1_000_000.0


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

"""Every way into a dead letter (engine/failures.py): failed attempts counted to max_attempts,
burial at once, and cancel. A failed parent's subtree is in test_dependencies.py; what becomes of
dead letters, in test_dead_letters.py."""

from __future__ import annotations

from kittiwake.engine import DEAD_REASON_HEADER, Engine
from kittiwake.model import DEAD_PID_HEADER, LeaseRef, LeaseRequest, NewTask
from kittiwake.store.memory import MemoryStore

from .harness import lease_all, put, ref, take

NOW = 1_000_000.0


# -------------------------------------------------------------- failed attempts


def test_after_max_attempts_a_released_task_moves_to_the_dead_letter_queue(engine, clock):
    put(engine, clock.now, "crawl#fetch", "p", max_attempts=2, headers={"trace": "t1"})
    [task] = take(engine, clock.now, "crawl#fetch")
    assert not engine.release([ref(task)], None, clock.now)[0].dead
    [task] = take(engine, clock.now, "crawl#fetch")
    assert engine.release([ref(task)], "parse error", clock.now)[0].dead
    assert [(q.queue, q.size) for q in engine.list_queues(None, 0, 10)] == [("crawl#fetch.dead", 1)]
    dead = engine.get("crawl#fetch.dead", "p", clock.now)
    assert dead["attempts"] == 2
    assert dead["headers"] == {"trace": "t1", DEAD_REASON_HEADER: "parse error", DEAD_PID_HEADER: "p"}


def test_expired_leases_dead_letter_too_with_their_reason(engine, clock):
    put(engine, clock.now, "q", "p", max_attempts=1)
    take(engine, clock.now, "q", lease_secs=5)
    clock.advance(5)
    assert take(engine, clock.now, "q") == []
    assert engine.get("q.dead", "p", clock.now)["headers"] == {DEAD_REASON_HEADER: "LEASE_EXPIRED", DEAD_PID_HEADER: "p"}


def test_the_default_is_ten_attempts(engine, clock):
    put(engine, clock.now, "q", "p")
    for attempt in range(10):
        [task] = take(engine, clock.now, "q")
        assert task.attempts == attempt
        dead = engine.release([ref(task)], None, clock.now)[0].dead
    assert dead
    assert engine.get("q.dead", "p", clock.now)["headers"][DEAD_REASON_HEADER] == "RELEASED"


def test_a_dead_letter_queue_does_not_dead_letter_further(engine, clock):
    put(engine, clock.now, "q", "p", max_attempts=1)
    [task] = take(engine, clock.now, "q")
    engine.release([ref(task)], None, clock.now)
    for _ in range(12):
        [task] = take(engine, clock.now, "q.dead")
        assert not engine.release([ref(task)], None, clock.now)[0].dead
    assert engine.get("q.dead", "p", clock.now)["attempts"] == 13


def test_release_with_bury_dead_letters_at_once() -> None:
    engine = Engine(MemoryStore())
    engine.enqueue([NewTask("q", b"", pid="a")], NOW)
    [task] = engine.lease(LeaseRequest(["q"]), NOW)
    [outcome] = engine.release([LeaseRef("q", "a", task.lease_id)], "WORKER_LOST", NOW, bury=True)
    assert outcome.dead
    assert engine.get("q.dead", "a", NOW)["headers"]["kittiwake-dead-reason"] == "WORKER_LOST"


# ----------------------------------------------------------------------- cancel


def test_cancel_withdraws_a_blocked_task_and_its_descendants(engine: Engine) -> None:
    engine.enqueue([NewTask("c", b"", pid="a")], NOW)
    engine.enqueue([NewTask("c", b"", pid="b", after=[("c", "a")])], NOW)
    engine.enqueue([NewTask("c", b"", pid="z", after=[("c", "b")])], NOW)
    [outcome] = engine.cancel([("c", "b")], None, NOW)
    assert outcome.ok
    assert engine.get("c.dead", "b", NOW)["headers"]["kittiwake-dead-reason"] == "CANCELLED"
    assert engine.get("c.dead", "z", NOW)["headers"]["kittiwake-dead-reason"].startswith("PARENT_FAILED")
    assert [t.pid for t in lease_all(engine, NOW, "c")] == ["a"]
    assert engine.cancel([("c", "missing")], None, NOW)[0].code == "TASK_NOT_FOUND"


def test_cancel_of_a_leased_task_takes_the_lease_away(engine: Engine) -> None:
    engine.enqueue([NewTask("c", b"", pid="a")], NOW)
    [task] = lease_all(engine, NOW, "c")
    engine.cancel([("c", "a")], "stop", NOW)
    [outcome] = engine.dequeue([LeaseRef("c", "a", task.lease_id)], NOW)
    assert outcome.code == "TASK_NOT_FOUND"

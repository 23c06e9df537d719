"""Update: dequeues, releases, renewals and enqueues in one atomic step within a group (TaskMaster §3.4, §3.6)."""

from __future__ import annotations

from dataclasses import FrozenInstanceError

import pytest

from kittiwake import errors
from kittiwake.engine import DEAD_REASON_HEADER, Engine
from kittiwake.engine.update import UpdateOutcome
from kittiwake.model import DEAD_PID_HEADER
from kittiwake.model import LeaseRef, Limits, NewTask
from kittiwake.store.memory import MemoryStore

from .harness import pids, put, ref, take


def sizes(engine: Engine) -> dict[str, int]:
    return {info.queue: info.size for info in engine.list_queues(None, 0, 100)}


def test_a_worker_moves_a_unit_of_work_to_the_next_stage(engine, clock):
    """TaskMaster §3.6: lease from one stage, then dequeue it and enqueue its successor atomically."""
    put(engine, clock.now, "crawl#fetch", "http://example.com/", data=b"fetch")
    [task] = take(engine, clock.now, "crawl#fetch", lease_secs=300)
    result = engine.update(
        dequeue=[ref(task)],
        enqueue=[NewTask("crawl#parse", b"<html>", pid=task.pid)],
        now=clock.now,
    )
    assert [o.ok for o in result.dequeued] == [True]
    assert [(o.queue, o.pid, o.collapsed) for o in result.enqueued] == [("crawl#parse", "http://example.com/", False)]
    assert sizes(engine) == {"crawl#parse": 1}


def test_one_stale_lease_refuses_the_whole_update(engine, clock):
    put(engine, clock.now, "g#in", "a", "b")
    a, b = take(engine, clock.now, "g#in", max_tasks=2, lease_secs=10)
    clock.advance(20)
    [b_again] = take(engine, clock.now, "g#in")  # "a" and "b" expired; "a" is leased anew
    with pytest.raises(errors.TaskNotLeased):
        engine.update(dequeue=[ref(b), ref(a)], enqueue=[NewTask("g#out", b"x")], now=clock.now)
    assert sizes(engine) == {"g#in": 2}
    assert engine.get("g#in", "b", clock.now)["state"] == "available"


def test_a_refused_update_writes_nothing():
    store = MemoryStore()
    engine = Engine(store)
    put(engine, 1_000.0, "g#in", "a")
    [task] = take(engine, 1_000.0, "g#in")
    writes = len(store.writes)
    with pytest.raises(errors.TaskNotFound):
        engine.update(
            dequeue=[ref(task)],
            release=[LeaseRef("g#in", "missing", 1)],
            enqueue=[NewTask("g#out", b"x")],
            now=1_000.0,
        )
    assert len(store.writes) == writes
    assert engine.dequeue([ref(task)], 1_000.0)[0].ok


def test_an_update_stays_within_one_consistency_group(engine, clock):
    put(engine, clock.now, "crawl#fetch", "p")
    [task] = take(engine, clock.now, "crawl#fetch")
    with pytest.raises(errors.CrossGroupUpdate):
        engine.update(dequeue=[ref(task)], enqueue=[NewTask("index#docs", b"x")], now=clock.now)
    with pytest.raises(errors.CrossGroupUpdate):
        engine.update(enqueue=[NewTask("plain", b"x"), NewTask("g#q", b"y")], now=clock.now)
    assert sizes(engine) == {"crawl#fetch": 1}


def test_the_default_group_is_a_group_too(engine, clock):
    result = engine.update(enqueue=[NewTask("a", b"x"), NewTask("b", b"y")], now=clock.now)
    assert len(result.enqueued) == 2


def test_a_task_named_twice_is_refused(engine, clock):
    put(engine, clock.now, "q", "p")
    [task] = take(engine, clock.now, "q")
    with pytest.raises(errors.BadRequest):
        engine.update(dequeue=[ref(task)], renew=[ref(task)], now=clock.now)
    with pytest.raises(errors.BadRequest):
        engine.update(dequeue=[ref(task), ref(task)], now=clock.now)


def test_an_empty_or_oversized_update_is_a_bad_request(clock):
    engine = Engine(MemoryStore(), limits=Limits(max_batch=3))
    with pytest.raises(errors.BadRequest):
        engine.update(now=clock.now)
    with pytest.raises(errors.BadRequest):
        engine.update(enqueue=[NewTask("q", b"x")] * 4, now=clock.now)


def test_renew_and_release_in_an_update(engine, clock):
    put(engine, clock.now, "q", "1-keep", "2-give-back")
    keep, give_back = take(engine, clock.now, "q", max_tasks=2, lease_secs=10)
    result = engine.update(renew=[ref(keep)], release=[ref(give_back)], lease_secs=120, now=clock.now)
    assert [o.expires_at for o in result.renewed] == [clock.now + 120]
    assert [o.dead for o in result.released] == [False]
    clock.advance(60)
    assert pids(take(engine, clock.now, "q", max_tasks=10)) == ["2-give-back"]


def test_a_release_in_an_update_carries_its_reason_to_the_dead_letter_queue(engine, clock):
    put(engine, clock.now, "q", "p", max_attempts=1)
    [task] = take(engine, clock.now, "q")
    result = engine.update(release=[ref(task)], reason="bad input", now=clock.now)
    assert [o.dead for o in result.released] == [True]
    assert engine.get("q.dead", "p", clock.now)["headers"] == {DEAD_REASON_HEADER: "bad input", DEAD_PID_HEADER: "p"}


def test_renew_of_an_expired_lease_refuses_the_update(engine, clock):
    put(engine, clock.now, "q", "p")
    [task] = take(engine, clock.now, "q", lease_secs=10)
    clock.advance(10)
    with pytest.raises(errors.LeaseExpired):
        engine.update(renew=[ref(task)], enqueue=[NewTask("q", b"x", pid="next")], now=clock.now)
    assert sizes(engine) == {"q": 1}


def test_a_late_dequeue_in_an_update_is_accepted(engine, clock):
    put(engine, clock.now, "q", "p")
    [task] = take(engine, clock.now, "q", lease_secs=10)
    clock.advance(30)
    engine.update(dequeue=[ref(task)], enqueue=[NewTask("q.next", b"x")], now=clock.now)
    assert sizes(engine) == {"q.next": 1}


def test_enqueues_in_an_update_collapse_like_any_enqueue(engine, clock):
    put(engine, clock.now, "q", "p")
    result = engine.update(enqueue=[NewTask("q", b"x", pid="p"), NewTask("q", b"y", pid="new")], now=clock.now)
    assert [o.collapsed for o in result.enqueued] == [True, False]


@pytest.mark.parametrize("head_tasks", [1000, 2])
def test_dequeue_and_enqueue_of_the_same_pid_reschedules_the_task(store, clock, head_tasks):
    """The dequeue happens before the enqueue, also for a task the head cache no longer holds."""
    engine = Engine(store, head_tasks=head_tasks)
    put(engine, clock.now, "q", "p", data=b"run 1")
    [task] = take(engine, clock.now, "q")
    put(engine, clock.now, "q", "a", "b", "c", "d", "e")  # pushes "p" past a small head's horizon
    result = engine.update(dequeue=[ref(task)], enqueue=[NewTask("q", b"run 2", pid="p")], now=clock.now)
    assert [o.collapsed for o in result.enqueued] == [False]
    view = engine.get("q", "p", clock.now)
    assert (view["data"], view["state"], view["attempts"]) == (b"run 2", "available", 0)
    assert sizes(engine) == {"q": 6}
    store.commit()
    assert len(store.scan("q", None, 100)) == 6


def test_an_update_is_atomic_across_a_crash(store, clock):
    """Nothing of an update is durable before the broker commits it; after, all of it is."""
    engine = Engine(store)
    put(engine, clock.now, "g#in", "a")
    store.commit()
    [task] = take(engine, clock.now, "g#in")
    engine.update(dequeue=[ref(task)], enqueue=[NewTask("g#out", b"x", pid="a")], now=clock.now)
    store.rollback()
    engine = Engine(store)
    engine.recover(clock.now)
    assert sizes(engine) == {"g#in": 1}
    assert engine.get("g#in", "a", clock.now)["state"] == "available"


def test_a_release_inside_an_update_clears_the_fence_too(engine, clock):
    put(engine, clock.now, "q", "p")
    [task] = take(engine, clock.now, "q")
    engine.update(release=[ref(task)], now=clock.now)
    try:
        engine.update(dequeue=[ref(task)], now=clock.now)
    except Exception as exc:  # noqa: BLE001 - the code is what matters
        assert getattr(exc, "code", None) == "TASK_NOT_LEASED"
    else:
        raise AssertionError("a released lease finished its task inside an update")
    assert pids(take(engine, clock.now, "q")) == ["p"]


def test_an_update_says_what_it_did_in_a_typed_outcome(engine, clock):
    put(engine, clock.now, "g#in", "a", "b")
    first, second = take(engine, clock.now, "g#in", max_tasks=2)
    result = engine.update(dequeue=[ref(first)], release=[ref(second)], enqueue=[NewTask("g#out", b"x")], now=clock.now)
    assert isinstance(result, UpdateOutcome)
    assert [(o.queue, o.pid) for o in result.dequeued] == [("g#in", "a")]
    assert [(o.queue, o.pid, o.dead) for o in result.released] == [("g#in", "b", False)]
    assert result.renewed == [] and [o.queue for o in result.enqueued] == ["g#out"]
    with pytest.raises(FrozenInstanceError):
        setattr(result, "renewed", [])

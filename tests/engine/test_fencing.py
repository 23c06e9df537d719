"""Lease ids as fencing tokens: a given-back lease fences nothing, and no id is ever issued twice.

TaskMaster §5.6 lets a worker dequeue a task whose lease *ran out* as long as nobody leased it
since. A worker that *released* its task asked for a retry: its old lease id must not finish the
task, or the retry is lost although an attempt was counted. Ids come from the clock and a
persisted high-water mark, so a restart with the clock stepped back never repeats one.
"""

from __future__ import annotations

from kittiwake.engine import Engine
from kittiwake.model import NewTask

from .harness import codes, pids, put, ref, take


def test_a_released_lease_cannot_dequeue_and_the_retry_still_runs(engine, clock):
    put(engine, clock.now, "q", "p")
    [task] = take(engine, clock.now, "q", lease_secs=60)
    assert codes(engine.release([ref(task)], None, clock.now)) == [None]
    assert codes(engine.dequeue([ref(task)], clock.now)) == ["TASK_NOT_LEASED"]
    assert codes(engine.renew([ref(task)], 30, clock.now)) == ["TASK_NOT_LEASED"]
    assert codes(engine.release([ref(task)], None, clock.now)) == ["TASK_NOT_LEASED"]
    [retry] = take(engine, clock.now, "q")
    assert (retry.pid, retry.attempts) == ("p", 1)


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


def test_a_lease_that_ran_out_may_still_dequeue_until_somebody_leases_again(engine, clock):
    put(engine, clock.now, "q", "late", "stolen")
    late, stolen = take(engine, clock.now, "q", max_tasks=2, lease_secs=5)
    clock.advance(6)
    assert codes(engine.renew([ref(late)], 30, clock.now)) == ["LEASE_EXPIRED"]
    [again] = take(engine, clock.now, "q", max_tasks=1)  # sweeps both; re-leases "late"
    assert again.pid == "late"
    assert codes(engine.dequeue([ref(late)], clock.now)) == ["TASK_NOT_LEASED"]
    assert codes(engine.dequeue([ref(stolen)], clock.now)) == [None]  # ran out, not re-leased


def test_lease_ids_and_fifo_pids_never_repeat_after_a_restart_with_the_clock_stepped_back(engine, clock, restart):
    put(engine, clock.now, "q", None)
    [first] = take(engine, clock.now, "q")
    assert codes(engine.dequeue([ref(first)], clock.now)) == [None]  # no row keeps its id or pid now
    engine = restart(engine)
    clock.advance(-3600)  # the new boot's clock is an hour behind
    put(engine, clock.now, "q", None)
    [second] = take(engine, clock.now, "q")
    assert second.lease_id > first.lease_id
    assert second.pid > first.pid


def test_the_high_water_marks_cost_one_write_a_minute_not_one_per_lease(store, clock):
    engine = Engine(store)
    for _ in range(100):
        engine.enqueue([NewTask("q", b"x")], clock.now)
        [task] = take(engine, clock.now, "q")
        engine.dequeue([ref(task)], clock.now)
        clock.advance(0.1)  # ten seconds in all
    if hasattr(store, "writes"):
        counters = [m for m in store.writes if type(m).__name__ == "SetCounter"]
        assert len(counters) == 2  # one lease-id and one FIFO reservation

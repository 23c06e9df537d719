"""The in-memory head of each queue (TaskMaster §5.4): queues far larger than memory.

The engine keeps at most about `head_tasks` available tasks of a queue in memory and refills from
the store on demand. None of that may show: leases stay in pid order across refills, dedupe sees
tasks beyond the horizon, late dequeues find cold tasks, and memory stays bounded.
"""

from __future__ import annotations

import pytest

from kittiwake.engine import Engine
from kittiwake.model import DEAD_PID_HEADER, NewTask

from .harness import codes, pids, put, ref, take

HEAD = 4


@pytest.fixture
def engine(store) -> Engine:
    return Engine(store, head_tasks=HEAD)


def big_queue(engine: Engine, now: float, size: int = 100, queue: str = "q") -> list[str]:
    """A queue of `size` tasks enqueued in scrambled order."""
    names = [f"{(i * 37) % size:04}" for i in range(size)]
    for start in range(0, size, 10):
        put(engine, now, queue, *names[start:start + 10])
    return sorted(names)


def head_of(engine: Engine, queue: str = "q"):
    return engine.state.queues[queue]


def test_the_head_holds_a_bounded_slice_of_a_big_queue(engine, clock):
    big_queue(engine, clock.now, 1000)
    head = head_of(engine)
    assert len(head.available) <= 2 * HEAD
    assert not head.complete
    assert head.size == 1000


def test_leases_stay_in_pid_order_across_refills(engine, clock):
    everything = big_queue(engine, clock.now, 100)
    leased: list[str] = []
    for max_tasks in [1, 3, 7, 1, 10, 2] * 20:
        tasks = take(engine, clock.now, "q", max_tasks=max_tasks)
        leased += pids(tasks)
        assert len(head_of(engine).available) <= max(2 * HEAD, max_tasks + HEAD)
    assert leased == everything
    assert engine.refills > 10


def test_leases_from_two_big_queues_merge_in_pid_order(engine, clock):
    evens = [f"{i:03}" for i in range(0, 60, 2)]
    odds = [f"{i:03}" for i in range(1, 60, 2)]
    put(engine, clock.now, "a", *evens)
    put(engine, clock.now, "b", *odds)
    leased = []
    while tasks := take(engine, clock.now, "a", "b", max_tasks=3):
        leased += pids(tasks)
    assert leased == sorted(evens + odds)


def test_an_enqueue_below_the_horizon_is_leased_before_the_cold_tail(engine, clock):
    big_queue(engine, clock.now, 100)
    assert pids(take(engine, clock.now, "q", max_tasks=2)) == ["0000", "0001"]
    put(engine, clock.now, "q", "0000.5")
    assert pids(take(engine, clock.now, "q", max_tasks=2)) == ["0000.5", "0002"]


def test_dedupe_finds_tasks_beyond_the_horizon(engine, clock):
    everything = big_queue(engine, clock.now, 200)
    horizon = head_of(engine).horizon
    cold = [pid for pid in everything if pid > horizon]
    outcomes = put(engine, clock.now, "q", *cold[::7], data=b"again")
    assert all(outcome.collapsed for outcome in outcomes)
    assert head_of(engine).size == 200


def test_the_same_new_pid_twice_beyond_the_horizon_is_one_task(engine, clock):
    big_queue(engine, clock.now, 100)
    outcomes = put(engine, clock.now, "q", "9999", "9999")
    assert [o.collapsed for o in outcomes] == [False, True]
    assert head_of(engine).size == 101
    engine.store.commit()
    assert len(engine.store.scan("q", None, 1000)) == 101


def test_a_late_dequeue_of_a_task_evicted_from_the_head(engine, clock):
    put(engine, clock.now, "q", "m")
    [task] = take(engine, clock.now, "q", lease_secs=10)
    clock.advance(20)
    assert engine.sweep(clock.now) == 1
    put(engine, clock.now, "q", *(f"a{i:02}" for i in range(20)))  # "m" falls out of the head
    assert "m" not in head_of(engine).available
    assert codes(engine.dequeue([ref(task)], clock.now)) == [None]
    assert head_of(engine).size == 20
    leased = []
    while tasks := take(engine, clock.now, "q", max_tasks=5):
        leased += pids(tasks)
    assert "m" not in leased and len(leased) == 20


def test_a_leased_task_beyond_the_horizon_can_be_renewed_released_and_dequeued(engine, clock):
    put(engine, clock.now, "q", "x1", "x2", "x3")
    x1, x2, x3 = take(engine, clock.now, "q", max_tasks=3)
    put(engine, clock.now, "q", *(f"a{i:02}" for i in range(20)))
    assert head_of(engine).horizon < "x"
    assert codes(engine.renew([ref(x1)], 60, clock.now)) == [None]
    assert codes(engine.release([ref(x2)], None, clock.now)) == [None]
    assert codes(engine.dequeue([ref(x3), ref(x3)], clock.now)) == [None, "TASK_NOT_FOUND"]
    assert head_of(engine).size == 22
    leased = []
    while tasks := take(engine, clock.now, "q", max_tasks=5):
        leased += pids(tasks)
    assert leased == [f"a{i:02}" for i in range(20)] + ["x2"]


def test_tasks_coming_back_from_leases_do_not_overfill_the_head(engine, clock):
    put(engine, clock.now, "q", *"cdefgh")
    leased = take(engine, clock.now, "q", max_tasks=2 * HEAD)
    put(engine, clock.now, "q", *"ijklmnop")
    engine.release([ref(task) for task in leased], None, clock.now)
    assert len(head_of(engine).available) <= 2 * HEAD


def test_a_mass_expiry_does_not_overfill_the_head(engine, clock):
    big_queue(engine, clock.now, 100)
    for _ in range(10):
        take(engine, clock.now, "q", max_tasks=HEAD, lease_secs=5)
    clock.advance(5)
    assert engine.sweep(clock.now) == 10 * HEAD
    assert len(head_of(engine).available) <= 2 * HEAD
    assert pids(take(engine, clock.now, "q", max_tasks=3)) == ["0000", "0001", "0002"]


def test_memory_stays_within_the_cache_across_many_queues(store, clock):
    engine = Engine(store, head_tasks=50, cache_bytes=20_000)
    for queue in range(40):
        put(engine, clock.now, f"q{queue:02}", *(f"{i:03}" for i in range(30)), data=b"x" * 100)
        assert engine.memory_bytes <= engine.cache_bytes
    for queue in range(40):  # every queue still serves in pid order after its head was evicted
        assert pids(take(engine, clock.now, f"q{queue:02}", max_tasks=2)) == ["000", "001"]
        assert engine.memory_bytes <= engine.cache_bytes


def test_a_dead_letter_queue_head_is_evicted_like_any_other(store, clock):
    engine = Engine(store, head_tasks=100, cache_bytes=3_000)
    for i in range(40):
        put(engine, clock.now, "q", f"{i:03}", data=b"x" * 50, max_attempts=1)
        [task] = take(engine, clock.now, "q")
        engine.release([ref(task)], None, clock.now)
        assert engine.memory_bytes <= engine.cache_bytes
    assert head_of(engine, "q.dead").size == 40
    dead = take(engine, clock.now, "q.dead", max_tasks=3)
    assert [task.headers[DEAD_PID_HEADER] for task in dead] == ["000", "001", "002"]


def test_a_recovered_queue_is_cold_until_a_lease_refills_it(engine, clock, restart):
    big_queue(engine, clock.now, 50)
    engine = restart(engine, head_tasks=HEAD)
    head = head_of(engine)
    assert (head.size, len(head.available), head.complete) == (50, 0, False)
    assert [o.collapsed for o in put(engine, clock.now, "q", "0007", "0070")] == [True, False]
    assert pids(take(engine, clock.now, "q", max_tasks=3)) == ["0000", "0001", "0002"]


def test_tasks_directed_to_others_ahead_of_the_horizon(engine, clock):
    """Paštas receivers on a big queue: a lease for one receiver looks past tasks for another."""
    put(engine, clock.now, "inbox", *(f"{i:03}" for i in range(20)), receiver="ada")
    put(engine, clock.now, "inbox", "900", "901")
    put(engine, clock.now, "inbox", *(f"{i:03}" for i in range(950, 970)), receiver="bob")
    assert pids(take(engine, clock.now, "inbox", max_tasks=2)) == ["900", "901"]
    assert pids(take(engine, clock.now, "inbox", max_tasks=3, receiver="bob")) == ["950", "951", "952"]
    assert pids(take(engine, clock.now, "inbox", max_tasks=3, receiver="ada")) == ["000", "001", "002"]


def test_a_lease_past_more_than_eight_refills_of_others_tasks_may_come_back_short(engine, clock):
    """TaskMaster §3.3: a lease returns an approximate top-k. One lease call refills at most eight
    times; the broadcast task behind 100 tasks directed elsewhere is found by a later call."""
    put(engine, clock.now, "inbox", *(f"{i:03}" for i in range(100)), receiver="ada")
    put(engine, clock.now, "inbox", "999")
    calls = 0
    found: list[str] = []
    while not found and calls < 10:
        found = pids(take(engine, clock.now, "inbox"))
        calls += 1
    assert found == ["999"]
    assert calls > 1


def test_enqueue_into_the_head_of_an_update(engine, clock):
    big_queue(engine, clock.now, 60)
    result = engine.update(enqueue=[NewTask("q", b"x", pid="0000.1"), NewTask("q", b"x", pid="0059")], now=clock.now)
    assert [o.collapsed for o in result.enqueued] == [False, True]
    assert pids(take(engine, clock.now, "q", max_tasks=2)) == ["0000", "0000.1"]

"""Broker-wide ids (engine/ids.py): FIFO pids and lease ids from the clock, never issued twice.

A task without a pid gets the broker's clock in microseconds (TaskMaster §3.2, Program 1), stepped
past the last one so FIFO pids grow in every queue even when the clock steps back; lease ids are
made the same way and are the fencing token of every later call. Both rest on a persisted
high-water mark, so a restart with the clock stepped back never repeats one.
"""

from __future__ import annotations

from kittiwake.engine import Engine
from kittiwake.model import FIFO_PID_DIGITS, NewTask, fifo_pid
from kittiwake.store.memory import MemoryStore

from .harness import codes, pids, put, ref, take



def test_fifo_pids_are_the_clock_in_microseconds(engine, clock):
    [outcome] = put(engine, clock.now, "q", None)
    assert outcome.pid == fifo_pid(int(clock.now * 1_000_000))
    assert len(outcome.pid) == FIFO_PID_DIGITS and outcome.pid.isdigit()


def test_fifo_pids_grow_within_one_microsecond_and_when_the_clock_steps_back(engine, clock):
    first = pids(put(engine, clock.now, "q", None, None, None))
    later = pids(put(engine, clock.now - 60.0, "q", None))  # the wall clock stepped back a minute
    assert first + later == sorted(first + later)
    assert len(set(first + later)) == 4
    leased = take(engine, clock.now, "q", max_tasks=4)
    assert pids(leased) == first + later  # served in the order they came


def test_fifo_pids_grow_across_queues_too(engine, clock):
    a = pids(put(engine, clock.now, "a", None))
    b = pids(put(engine, clock.now, "b", None))
    assert b[0] > a[0]


def test_fifo_pids_continue_past_the_last_one_after_a_restart(engine, clock, restart):
    before = pids(put(engine, clock.now, "q", None, None, None))
    put(engine, clock.now, "q", "https://example.com/")  # sorts after every FIFO pid
    engine = restart(engine)
    after = pids(put(engine, clock.now - 1.0, "q", None))  # and the clock stepped back
    assert after[0] > before[-1]


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


def test_lease_ids_never_repeat_across_a_restart_even_at_the_same_clock_reading(engine, clock, restart):
    put(engine, clock.now, "q", "p")
    [first] = take(engine, clock.now, "q")
    engine.release([ref(first)], None, clock.now)
    engine = restart(engine)
    [second] = take(engine, clock.now, "q")
    assert second.lease_id != first.lease_id
    assert codes(engine.dequeue([ref(first)], clock.now)) == ["TASK_NOT_LEASED"]


class _SharedMemoryStore(MemoryStore):
    """The memory store as the third of four brokers sharing it (only what `ids` reads of a shared store)."""

    shared = True
    id_slot = 2
    id_stride = 4


def test_a_cluster_nodes_ids_keep_its_residue_and_a_shared_stores_share_of_it() -> None:
    from kittiwake.engine.ids import next_fifo_pid, next_lease_id

    for store, slot, stride in ((MemoryStore(), 5, 32), (_SharedMemoryStore(), 5 + 32 * 2, 32 * 4)):
        engine = Engine(store, id_class=(5, 32))
        assert (engine.state.id_slot, engine.state.id_stride) == (slot, stride)
        mutations: list = []
        ids = [int(next_fifo_pid(engine.state, 1000.0 + i / 10, mutations)) for i in range(20)]
        ids += [next_lease_id(engine.state, 1000.0, mutations) for _ in range(20)]
        assert {value % 32 for value in ids} == {5} and {value % stride for value in ids} == {slot}
        assert ids[:20] == sorted(set(ids[:20])) and ids[20:] == sorted(set(ids[20:]))

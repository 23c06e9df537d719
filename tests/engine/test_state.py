"""The engine's declared state (engine/state.py): a queue is kept while it holds tasks, deleted in
constant time by generation (TaskMaster §5.2), and forgotten once idle.

Recovery from the store is tested where each part of the state is used: leases in test_leases.py,
ids in test_ids.py, the head in test_head_cache.py, blocked tasks in test_dependencies.py.
"""

from __future__ import annotations

from kittiwake.engine import DropQueue, Engine
from kittiwake.model import NewTask
from kittiwake.store.memory import MemoryStore
from kittiwake.store.sqlite import SqliteStore

from .harness import codes, put, ref, take


def test_queues_exist_only_while_they_hold_tasks(engine, clock):
    put(engine, clock.now, "q", "p")
    [task] = take(engine, clock.now, "q")
    engine.dequeue([ref(task)], clock.now)
    assert engine.list_queues(None, 0, 10) == []
    assert engine.stats(None, None, 0, clock.now) == []
    clock.advance(301)
    engine.maintain(clock.now)  # the queue's rates went idle: it is forgotten altogether
    assert "q" not in engine.state.queues


# ----------------------------------------------------------------- delete_queue


def test_delete_queue_is_one_write_whatever_the_queue_holds():
    store = MemoryStore()
    engine = Engine(store, head_tasks=10)
    put(engine, 1_000.0, "q", *(f"{i:04}" for i in range(500)))
    store.writes.clear()
    assert engine.delete_queue("q") == 500
    assert store.writes == [DropQueue("q")]
    assert engine.list_queues(None, 0, 10) == []
    assert engine.delete_queue("q") == 0


def test_a_deleted_queue_starts_afresh_and_old_leases_cannot_touch_it(engine, clock):
    put(engine, clock.now, "q", "a", "b", data=b"old")
    [old] = take(engine, clock.now, "q")
    engine.delete_queue("q")
    assert codes(engine.dequeue([ref(old)], clock.now)) == ["TASK_NOT_FOUND"]
    [outcome] = put(engine, clock.now, "q", "a", data=b"new")
    assert not outcome.collapsed
    assert engine.peek("q", 10, None, clock.now)[0]["data"] == b"new"
    assert codes(engine.dequeue([ref(old)], clock.now)) == ["TASK_NOT_LEASED"]
    clock.advance(60)  # the old lease's expiry must not touch the new task
    assert engine.sweep(clock.now) == 0
    assert engine.get("q", "a", clock.now)["attempts"] == 0


def test_deletion_survives_a_restart_and_a_new_generation_is_visible(engine, clock, restart):
    put(engine, clock.now, "q", "a", "b", data=b"old")
    engine.delete_queue("q")
    put(engine, clock.now, "q", "b", data=b"new")
    engine = restart(engine)
    assert [(v["pid"], v["data"]) for v in engine.peek("q", 10, None, clock.now)] == [("b", b"new")]
    assert [(q.queue, q.size) for q in engine.list_queues(None, 0, 10)] == [("q", 1)]


def test_the_sqlite_store_reaps_old_generations_later(tmp_path, clock):
    store = SqliteStore(tmp_path, durability="os")
    try:
        engine = Engine(store)
        put(engine, clock.now, "q", *(f"{i:03}" for i in range(50)))
        store.commit()
        engine.delete_queue("q")
        put(engine, clock.now, "q", "001", data=b"new")
        store.commit()
        assert store.reap(20) == 20
        assert store.reap(100) == 30
        assert store.reap(100) == 0
        store.commit()
        assert [(t.pid, t.data) for t in store.scan("q", None, 100)] == [("001", b"new")]
    finally:
        store.close()


def test_deleting_a_queue_leaves_its_dead_letter_queue(engine, clock):
    put(engine, clock.now, "q", "p", max_attempts=1)
    [task] = take(engine, clock.now, "q")
    engine.release([ref(task)], None, clock.now)
    put(engine, clock.now, "q", "other")
    assert engine.delete_queue("q") == 1
    assert [q.queue for q in engine.list_queues(None, 0, 10)] == ["q.dead"]
    engine.enqueue([NewTask("q", b"x", pid="p")], clock.now)
    assert engine.list_queues(None, 0, 10)[0].queue == "q"

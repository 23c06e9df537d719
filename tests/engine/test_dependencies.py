"""Dependencies kept in the broker (engine/dependencies.py, Albatross §5.2.2): parent counts and
children lists, and `unless`. How a failed parent takes its subtree with it is failures' work, but
tested here, on graphs."""

from __future__ import annotations

import pytest

from kittiwake.engine import Engine
from kittiwake.model import LeaseRef, NewTask
from kittiwake.store.memory import MemoryStore
from kittiwake.store.sqlite import SqliteStore

from .harness import finish, lease_all

NOW = 1_000_000.0


@pytest.fixture(params=["memory", "sqlite"])
def engine(request, tmp_path) -> Engine:
    store = MemoryStore() if request.param == "memory" else SqliteStore(tmp_path)
    return Engine(store, head_tasks=4)


def test_a_child_waits_until_every_parent_finished(engine: Engine) -> None:
    engine.enqueue([NewTask("j#a", b"", pid="p1"), NewTask("j#a", b"", pid="p2")], NOW)
    engine.enqueue([NewTask("j#b", b"", pid="c", after=[("j#a", "p1"), ("j#a", "p2")])], NOW)
    assert lease_all(engine, NOW, "j#b") == []
    assert engine.get("j#b", "c", NOW)["state"] == "blocked"
    first, second = lease_all(engine, NOW, "j#a")
    finish(engine, NOW, [first])
    assert lease_all(engine, NOW, "j#b") == []
    finish(engine, NOW, [second])
    assert [t.pid for t in lease_all(engine, NOW, "j#b")] == ["c"]


def test_a_parent_that_is_gone_counts_as_finished(engine: Engine) -> None:
    engine.enqueue([NewTask("q", b"", pid="child", after=[("q", "never-existed")])], NOW)
    assert [t.pid for t in lease_all(engine, NOW, "q")] == ["child"]


def test_deleting_a_parents_queue_counts_its_tasks_as_finished(engine: Engine) -> None:
    engine.enqueue([NewTask("j#a", b"", pid="p1"), NewTask("j#a", b"", pid="p2"), NewTask("j#b", b"", pid="p3")], NOW)
    engine.enqueue([NewTask("j#c", b"", pid="c", after=[("j#a", "p1"), ("j#a", "p2"), ("j#b", "p3")]),
                    NewTask("j#a", b"", pid="sibling", after=[("j#a", "p1")])], NOW)
    assert engine.delete_queue("j#a") == 3
    assert engine.get("j#c", "c", NOW)["state"] == "blocked"  # still waits for j#b/p3
    [p3] = lease_all(engine, NOW, "j#b")
    finish(engine, NOW, [p3])
    assert [t.pid for t in lease_all(engine, NOW, "j#c")] == ["c"]
    assert engine.stats(["j#c"], None, 0, NOW)[0].blocked == 0


def test_a_task_enqueued_where_a_deleted_parent_was_frees_nobody(engine: Engine) -> None:
    engine.enqueue([NewTask("j#a", b"", pid="p1"), NewTask("j#a", b"", pid="p2")], NOW)
    engine.enqueue([NewTask("j#c", b"", pid="c", after=[("j#a", "p1"), ("j#a", "p2")])], NOW)
    engine.delete_queue("j#a")
    [child] = lease_all(engine, NOW, "j#c")  # both parents are gone: finished
    finish(engine, NOW, [child])
    engine.enqueue([NewTask("j#c", b"", pid="c2", after=[("j#x", "p")]), NewTask("j#a", b"", pid="p1")], NOW)
    [again] = lease_all(engine, NOW, "j#a")
    finish(engine, NOW, [again])  # its old edge went with the queue: nothing to decrement
    assert [t.pid for t in lease_all(engine, NOW, "j#c")] == ["c2"]


def test_fan_in_of_a_thousand_parents_fires_the_child_exactly_once(engine: Engine) -> None:
    parents = [NewTask("fan#in", b"", pid=f"p{n:04d}") for n in range(1000)]
    engine.enqueue(parents, NOW)
    engine.enqueue([NewTask("fan#out", b"", pid="sink", after=[("fan#in", t.pid) for t in parents])], NOW)
    leased = lease_all(engine, NOW, "fan#in")
    assert len(leased) == 1000
    for task in leased[:-1]:
        finish(engine, NOW, [task])
        assert lease_all(engine, NOW, "fan#out") == []
    finish(engine, NOW, leased[-1:])
    assert [t.pid for t in lease_all(engine, NOW, "fan#out")] == ["sink"]
    assert lease_all(engine, NOW, "fan#out") == []


def test_a_failed_parent_fails_its_whole_subtree(engine: Engine) -> None:
    engine.enqueue([NewTask("d#root", b"", pid="r", max_attempts=1)], NOW)
    engine.enqueue([NewTask("d#mid", b"", pid=f"m{n}", after=[("d#root", "r")]) for n in range(3)], NOW)
    engine.enqueue([NewTask("d#leaf", b"", pid="l", after=[("d#mid", "m0"), ("d#mid", "m1")])], NOW)
    [root] = lease_all(engine, NOW, "d#root")
    [outcome] = engine.release([LeaseRef(root.queue, root.pid, root.lease_id)], "boom", NOW)
    assert outcome.dead
    stats = {s.queue: s for s in engine.stats(["d#mid", "d#leaf"], None, 0, NOW)}
    assert stats["d#mid"].size == 0 and stats["d#mid"].dead == 3
    assert stats["d#leaf"].size == 0 and stats["d#leaf"].dead == 1
    dead_leaf = engine.get("d#leaf.dead", "l", NOW)
    assert dead_leaf["headers"]["kittiwake-dead-reason"].startswith("PARENT_FAILED")


def test_a_child_of_a_parent_that_already_failed_is_born_dead(engine: Engine) -> None:
    engine.enqueue([NewTask("x", b"", pid="p", max_attempts=1)], NOW)
    [parent] = lease_all(engine, NOW, "x")
    engine.release([LeaseRef("x", "p", parent.lease_id)], None, NOW)
    engine.enqueue([NewTask("y", b"", pid="c", after=[("x", "p")])], NOW)
    assert lease_all(engine, NOW, "y") == []
    assert engine.get("y.dead", "c", NOW)["headers"]["kittiwake-dead-reason"].startswith("PARENT_FAILED")


def test_a_self_dependency_is_refused(engine: Engine) -> None:
    with pytest.raises(Exception) as caught:
        engine.enqueue([NewTask("q", b"", pid="a", after=[("q", "a")])], NOW)
    assert caught.value.code == "BAD_REQUEST"


def test_blocked_tasks_survive_a_restart(tmp_path) -> None:
    store = SqliteStore(tmp_path)
    engine = Engine(store)
    engine.enqueue([NewTask("r", b"", pid="p")], NOW)
    engine.enqueue([NewTask("r2", b"", pid="c", after=[("r", "p")])], NOW)
    store.commit()
    store.close()
    store = SqliteStore(tmp_path)
    engine = Engine(store)
    engine.recover(NOW)
    assert lease_all(engine, NOW, "r2") == []
    assert engine.stats(["r2"], None, 0, NOW)[0].blocked == 1
    finish(engine, NOW, lease_all(engine, NOW, "r"))
    assert [t.pid for t in lease_all(engine, NOW, "r2")] == ["c"]


def test_dedupe_sees_a_blocked_task(engine: Engine) -> None:
    engine.enqueue([NewTask("q", b"", pid="p")], NOW)
    engine.enqueue([NewTask("q2", b"", pid="c", after=[("q", "p")])], NOW)
    [again] = engine.enqueue([NewTask("q2", b"", pid="c")], NOW)
    assert again.collapsed


def test_unless_collapses_when_a_named_task_exists() -> None:
    engine = Engine(MemoryStore())
    engine.enqueue([NewTask("ticks", b"", pid="t1")], NOW)
    [outcome] = engine.enqueue([NewTask("work", b"", pid="t1", unless=[("ticks", "t1")])], NOW)
    assert outcome.collapsed
    [outcome] = engine.enqueue([NewTask("work", b"", pid="t2", unless=[("ticks", "t2")])], NOW)
    assert not outcome.collapsed


def test_a_refused_self_dependency_changes_nothing(engine: Engine) -> None:
    """The check came after the items before it were applied: a refused enqueue kept its first
    task, and a refused update its dequeue, though both answered BAD_REQUEST."""
    with pytest.raises(Exception) as caught:
        engine.enqueue([NewTask("q", b"", pid="a"), NewTask("q", b"", pid="b", after=[("q", "b")])], NOW)
    assert caught.value.code == "BAD_REQUEST"
    assert engine.list_queues(None, 0, 10) == []
    engine.enqueue([NewTask("q", b"", pid="a")], NOW)
    [task] = lease_all(engine, NOW, "q")
    with pytest.raises(Exception) as caught:
        engine.update(dequeue=[LeaseRef("q", "a", task.lease_id)],
                      enqueue=[NewTask("q", b"", pid="c", after=[("q", "c")])], now=NOW)
    assert caught.value.code == "BAD_REQUEST"
    assert [(q.queue, q.size, q.leased) for q in engine.list_queues(None, 0, 10)] == [("q", 1, 1)]

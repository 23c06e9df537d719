"""Dependencies kept in the broker (Albatross §5.2.2): parent counts and children lists."""

from __future__ import annotations

import pytest

from kittiwake.engine import Engine
from kittiwake.model import LeaseRef, LeaseRequest, NewTask
from kittiwake.store.memory import MemoryStore
from kittiwake.store.sqlite import SqliteStore

NOW = 1_000_000.0


@pytest.fixture(params=["memory", "sqlite"])
def engine(request, tmp_path) -> Engine:
    store = MemoryStore() if request.param == "memory" else SqliteStore(tmp_path)
    return Engine(store, head_tasks=4)


def lease_all(engine: Engine, queue: str, now: float = NOW) -> list:
    """Every task leasable now (a lease may return fewer than asked: the head is small)."""
    leased: list = []
    while batch := engine.lease(LeaseRequest([queue], max_tasks=10_000), now):
        leased.extend(batch)
    return leased


def finish(engine: Engine, tasks: list, now: float = NOW) -> None:
    outcomes = engine.dequeue([LeaseRef(t.queue, t.pid, t.lease_id) for t in tasks], now)
    assert all(o.ok for o in outcomes), outcomes


def test_a_child_waits_until_every_parent_finished(engine: Engine) -> None:
    engine.enqueue([NewTask("j#a", b"", pid="p1"), NewTask("j#a", b"", pid="p2")], NOW)
    engine.enqueue([NewTask("j#b", b"", pid="c", after=[("j#a", "p1"), ("j#a", "p2")])], NOW)
    assert lease_all(engine, "j#b") == []
    assert engine.get("j#b", "c", NOW)["state"] == "blocked"
    first, second = lease_all(engine, "j#a")
    finish(engine, [first])
    assert lease_all(engine, "j#b") == []
    finish(engine, [second])
    assert [t.pid for t in lease_all(engine, "j#b")] == ["c"]


def test_a_parent_that_is_gone_counts_as_finished(engine: Engine) -> None:
    engine.enqueue([NewTask("q", b"", pid="child", after=[("q", "never-existed")])], NOW)
    assert [t.pid for t in lease_all(engine, "q")] == ["child"]


def test_fan_in_of_a_thousand_parents_fires_the_child_exactly_once(engine: Engine) -> None:
    parents = [NewTask("fan#in", b"", pid=f"p{n:04d}") for n in range(1000)]
    engine.enqueue(parents, NOW)
    engine.enqueue([NewTask("fan#out", b"", pid="sink", after=[("fan#in", t.pid) for t in parents])], NOW)
    leased = lease_all(engine, "fan#in")
    assert len(leased) == 1000
    for task in leased[:-1]:
        finish(engine, [task])
        assert lease_all(engine, "fan#out") == []
    finish(engine, leased[-1:])
    assert [t.pid for t in lease_all(engine, "fan#out")] == ["sink"]
    assert lease_all(engine, "fan#out") == []


def test_a_failed_parent_fails_its_whole_subtree(engine: Engine) -> None:
    engine.enqueue([NewTask("d#root", b"", pid="r", max_attempts=1)], NOW)
    engine.enqueue([NewTask("d#mid", b"", pid=f"m{n}", after=[("d#root", "r")]) for n in range(3)], NOW)
    engine.enqueue([NewTask("d#leaf", b"", pid="l", after=[("d#mid", "m0"), ("d#mid", "m1")])], NOW)
    [root] = lease_all(engine, "d#root")
    [outcome] = engine.release([LeaseRef(root.queue, root.pid, root.lease_id)], "boom", NOW)
    assert outcome.dead
    stats = {s.queue: s for s in engine.stats(["d#mid", "d#leaf"], None, 0, NOW)}
    assert stats["d#mid"].size == 0 and stats["d#mid"].dead == 3
    assert stats["d#leaf"].size == 0 and stats["d#leaf"].dead == 1
    dead_leaf = engine.get("d#leaf.dead", "l", NOW)
    assert dead_leaf["headers"]["kittiwake-dead-reason"].startswith("PARENT_FAILED")


def test_a_child_of_a_parent_that_already_failed_is_born_dead(engine: Engine) -> None:
    engine.enqueue([NewTask("x", b"", pid="p", max_attempts=1)], NOW)
    [parent] = lease_all(engine, "x")
    engine.release([LeaseRef("x", "p", parent.lease_id)], None, NOW)
    engine.enqueue([NewTask("y", b"", pid="c", after=[("x", "p")])], NOW)
    assert lease_all(engine, "y") == []
    assert engine.get("y.dead", "c", NOW)["headers"]["kittiwake-dead-reason"].startswith("PARENT_FAILED")


def test_cancel_withdraws_a_blocked_task_and_its_descendants(engine: Engine) -> None:
    engine.enqueue([NewTask("c", b"", pid="a")], NOW)
    engine.enqueue([NewTask("c", b"", pid="b", after=[("c", "a")])], NOW)
    engine.enqueue([NewTask("c", b"", pid="z", after=[("c", "b")])], NOW)
    [outcome] = engine.cancel([("c", "b")], None, NOW)
    assert outcome.ok
    assert engine.get("c.dead", "b", NOW)["headers"]["kittiwake-dead-reason"] == "CANCELLED"
    assert engine.get("c.dead", "z", NOW)["headers"]["kittiwake-dead-reason"].startswith("PARENT_FAILED")
    assert [t.pid for t in lease_all(engine, "c")] == ["a"]
    assert engine.cancel([("c", "missing")], None, NOW)[0].code == "TASK_NOT_FOUND"


def test_cancel_of_a_leased_task_takes_the_lease_away(engine: Engine) -> None:
    engine.enqueue([NewTask("c", b"", pid="a")], NOW)
    [task] = lease_all(engine, "c")
    engine.cancel([("c", "a")], "stop", NOW)
    [outcome] = engine.dequeue([LeaseRef("c", "a", task.lease_id)], NOW)
    assert outcome.code == "TASK_NOT_FOUND"


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
    assert lease_all(engine, "r2") == []
    assert engine.stats(["r2"], None, 0, NOW)[0].blocked == 1
    finish(engine, lease_all(engine, "r"))
    assert [t.pid for t in lease_all(engine, "r2")] == ["c"]


def test_dedupe_sees_a_blocked_task(engine: Engine) -> None:
    engine.enqueue([NewTask("q", b"", pid="p")], NOW)
    engine.enqueue([NewTask("q2", b"", pid="c", after=[("q", "p")])], NOW)
    [again] = engine.enqueue([NewTask("q2", b"", pid="c")], NOW)
    assert again.collapsed

"""Deterministic simulation: one seed drives engine + store through random operations, commits,
crashes, restarts and clock jumps, and every invariant is checked after every step.

In the manner of FoundationDB's and TigerBeetle's simulators (docs/style.md): all randomness comes from
one `random.Random(seed)`, the clock is a number the simulation moves (forwards in small ticks and
big jumps, and sometimes backwards, as NTP does), and a failure prints its seed and the last steps.
Replay one seed with

    KITTIWAKE_SIM_SEED=1234 pytest tests/engine/test_simulation.py

(`KITTIWAKE_SIM_STEPS` sets the number of steps). The normal suite runs a few seeds; the `soak`
marker runs many more, longer.

The operations are every call that changes tasks — enqueue (with dependencies), lease, renew,
dequeue, release, update, cancel, requeue and purge of dead letters, delete_queue — and the sweeps
of stats and maintain. The reference is `ModelQueues`, snapshotted at every commit: a crash
(rollback of what was not committed, then a new engine recovered from the store) must bring back
exactly the snapshot, so nothing acknowledged is ever lost and nothing unacknowledged survives.

After every step `TaskStates` also observes each task's state in the store and fails on any change
that the task state machine (`kittiwake.engine.transitions.TRANSITIONS`) does not allow for the
operations that step ran (`OPERATIONS`); a crash must leave every task as it was at the commit.
"""

from __future__ import annotations

import collections
import os
import random
import shutil
import tempfile
from typing import Callable

import pytest

from kittiwake import errors
from kittiwake.engine import Engine
from kittiwake.engine.transitions import Operation
from kittiwake.model import LeaseRef, LeaseRequest, NewTask, fifo_pid, pid_at
from kittiwake.store.memory import MemoryStore
from kittiwake.store.sqlite import SqliteStore

from .reference_queues import REFILLS_PER_LEASE, ModelQueues, Ref, check_engine
from .task_states import TaskStates

SEEDS = 20
STEPS = 300
SOAK_SEEDS = 100
SOAK_STEPS = 2_000
HEAD_TASKS = 4
MAX_TASKS = 8
CACHE_BYTES = 6_000
TRACE_LINES = 40

GROUPS = {"": ["mail", "mail.bulk"], "crawl": ["crawl#fetch", "crawl#parse"], "idx": ["idx#docs"]}
QUEUES = [queue for queues in GROUPS.values() for queue in queues]
PIDS = [f"k{i:02}" for i in range(40)] + ["https://example.com/", "zz-last"]
RECEIVERS = ["ada", "bob"]

# What each step may do to a task (transitions.Operation); a step not named here does nothing to any.
SWEEP = {Operation.EXPIRE, Operation.PARENT_FAILED}  # lease and stats sweep expired leases first
OPERATIONS: dict[str, set[Operation]] = {
    "enqueue": {Operation.ENQUEUE},
    "enqueue_at_the_clock": {Operation.ENQUEUE},
    "lease": {*SWEEP, Operation.LEASE},
    "renew": {Operation.RENEW},
    "dequeue": {Operation.DEQUEUE, Operation.PARENT_FINISHED},
    "release": {Operation.RELEASE, Operation.PARENT_FAILED},
    "update": {Operation.DEQUEUE, Operation.PARENT_FINISHED, Operation.RELEASE, Operation.PARENT_FAILED,
               Operation.RENEW, Operation.ENQUEUE},
    "delete_queue": {Operation.DELETE_QUEUE},
    "cancel": {Operation.CANCEL, Operation.PARENT_FAILED},
    "requeue_dead": {Operation.REQUEUE_DEAD},
    "purge_dead": {Operation.PURGE_DEAD},
    "inspect": SWEEP,
}


class Simulation:
    def __init__(self, seed: int, store_kind: str) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.store_kind = store_kind
        self.directory = tempfile.mkdtemp(prefix="kittiwake-sim-") if store_kind == "sqlite" else None
        self.store = self._open_store()
        self.now = 1_700_000_000.0 + self.rng.random() * 1_000
        self.engine = self._new_engine()
        self.model = ModelQueues(lambda: self.store)
        self.refs: list[Ref] = []
        self.task_states = TaskStates(lambda: self.store, QUEUES)
        self.snapshot = (self.model.copy(), list(self.refs), self.task_states.snapshot())
        self.trace: collections.deque[str] = collections.deque(maxlen=TRACE_LINES)
        self.counts: collections.Counter[str] = collections.Counter()

    # ------------------------------------------------------------ plumbing

    def _open_store(self):
        if self.store_kind == "memory":
            return getattr(self, "store", None) or MemoryStore()
        return SqliteStore(self.directory, durability="os")

    def _new_engine(self) -> Engine:
        return Engine(self.store, head_tasks=HEAD_TASKS, cache_bytes=CACHE_BYTES)

    def close(self) -> None:
        self.store.close()
        if self.directory:
            shutil.rmtree(self.directory, ignore_errors=True)

    def log(self, line: str) -> None:
        self.trace.append(f"t={self.now:.3f} {line}")

    def pick_refs(self, most: int) -> list[Ref]:
        if not self.refs:
            return []
        recent = self.refs[-12:]
        return [self.rng.choice(recent if self.rng.random() < 0.85 else self.refs)
                for _ in range(self.rng.randint(1, most))]

    def new_task(self, queue: str) -> NewTask:
        rng = self.rng
        pid = None if rng.random() < 0.4 else rng.choice(PIDS)
        return NewTask(
            queue,
            rng.randbytes(rng.randint(0, 30)),
            pid=pid,
            receiver=rng.choice(RECEIVERS) if rng.random() < 0.15 else None,
            max_attempts=rng.choice([None, None, 1, 2, 3]),
            after=self.pick_parents(queue, pid) if rng.random() < 0.25 else None,
        )

    def pick_parents(self, queue: str, pid: str | None) -> list[tuple[str, str]] | None:
        """One or two tasks to wait for: live ones, dead ones, and ones that never were."""
        live = [(q, p) for q in QUEUES for p in self.model.tasks(q)]
        dead = [(q, t.dead_pid) for q in QUEUES for t in self.model.tasks(q + ".dead").values() if t.dead_pid]
        pool = [key for key in live + dead + [(self.rng.choice(QUEUES), self.rng.choice(PIDS))] if key != (queue, pid)]
        return self.rng.sample(pool, min(len(pool), self.rng.randint(1, 2))) or None

    def pick_keys(self, most: int) -> list[tuple[str, str]]:
        """Tasks to name: mostly live ones, sometimes a dead letter, sometimes a task that is not there."""
        rng = self.rng
        live = [(q, p) for q in QUEUES for p in self.model.tasks(q)]
        letters = [(q + ".dead", p) for q in QUEUES for p in self.model.tasks(q + ".dead")]
        keys = []
        for _ in range(rng.randint(1, most)):
            roll = rng.random()
            if roll < 0.8 and live:
                keys.append(rng.choice(live))
            elif roll < 0.9 and letters:
                keys.append(rng.choice(letters))
            else:
                keys.append((rng.choice(QUEUES), rng.choice(PIDS)))
        return keys

    # ------------------------------------------------------------ the steps

    def step(self) -> str:
        """Run one random operation; returns its name."""
        operations: list[tuple[float, Callable[[], None]]] = [
            (20, self.enqueue), (3, self.enqueue_at_the_clock), (20, self.lease), (8, self.renew),
            (15, self.dequeue), (6, self.release), (10, self.update), (1.5, self.delete_queue),
            (2, self.cancel), (2, self.requeue_dead), (1.5, self.purge_dead),
            (2, self.inspect), (10, self.tick), (2, self.jump), (0.7, self.step_back), (8, self.commit),
            (1, self.restart), (1.5, self.crash),
        ]
        weights = [weight for weight, _ in operations]
        operation = self.rng.choices([op for _, op in operations], weights)[0]
        self.counts[operation.__name__] += 1
        operation()
        return operation.__name__

    def enqueue(self) -> None:
        queue = self.rng.choice(QUEUES)
        tasks = [self.new_task(queue) for _ in range(self.rng.randint(1, 5))]
        outcomes = self.engine.enqueue(tasks, self.now)
        self.log(f"enqueue {queue} {[t.pid for t in tasks]} -> {[(o.pid, o.collapsed) for o in outcomes]}")
        for task, outcome in zip(tasks, outcomes, strict=True):
            self.model_enqueue(task, outcome)
        assert self.engine.memory_bytes <= self.engine.cache_bytes

    def model_enqueue(self, task: NewTask, outcome) -> None:
        if task.pid is None:
            assert not outcome.collapsed and self.model.get(task.queue, outcome.pid) is None
            assert all(outcome.pid > pid for pid, t in self.model.tasks(task.queue).items() if t.fifo)
        else:
            assert outcome.pid == task.pid
        collapsed = self.model.enqueue(task.queue, outcome.pid, task.data, receiver=task.receiver,
                                       max_attempts=task.max_attempts, fifo=task.pid is None,
                                       after=task.after or ())
        assert outcome.collapsed == collapsed

    def enqueue_at_the_clock(self) -> None:
        queue = self.rng.choice(QUEUES)
        pid = fifo_pid(int(self.now * 1_000_000) + self.rng.randint(0, 3))
        [outcome] = self.engine.enqueue([NewTask(queue, b"delayed", pid=pid)], self.now)
        self.log(f"enqueue {queue} {pid} -> {outcome.collapsed}")
        assert outcome.collapsed == self.model.enqueue(queue, pid, b"delayed")

    def lease(self) -> None:
        rng = self.rng
        queues = rng.sample(QUEUES + [q + ".dead" for q in QUEUES[:2]], rng.randint(1, 3))
        max_tasks = rng.randint(1, MAX_TASKS)
        max_pid = rng.choice([None, None, None, "k20", pid_at(self.now)])
        receiver = rng.choice([None, None, *RECEIVERS])
        lease_secs = rng.choice([1.0, 5.0, 30.0, 120.0])
        request = LeaseRequest(queues, max_tasks=max_tasks, lease_secs=lease_secs, max_pid=max_pid,
                               receiver=receiver, worker=f"w{rng.randint(1, 5)}")
        leased = self.engine.lease(request, self.now)
        got = [(task.queue, task.pid) for task in leased]
        self.log(f"lease {queues} max_tasks={max_tasks} max_pid={max_pid} receiver={receiver} -> {got}")
        self.model.sweep(self.now)
        eligible = self.model.eligible(queues, max_pid, receiver)
        if all(self.model.size(q) <= REFILLS_PER_LEASE * HEAD_TASKS for q in queues):
            assert got == eligible[:max_tasks]
        else:
            assert set(got) <= set(eligible) and [p for _, p in got] == sorted(p for _, p in got)
        for task in leased:
            expected = self.model.get(task.queue, task.pid)
            assert expected is not None and task.data == expected.data and task.lease_id > expected.lease_id
            self.model.grant(task.queue, task.pid, task.lease_id, self.now + lease_secs)
            self.refs.append(Ref(task.queue, task.pid, task.lease_id))
        assert self.engine.memory_bytes <= self.engine.cache_bytes

    def _per_item(self, op: str, call, refs: list[Ref], apply) -> None:
        outcomes = call([LeaseRef(r.queue, r.pid, r.lease_id) for r in refs])
        self.log(f"{op} {[(r.queue, r.pid, r.lease_id) for r in refs]} -> {[o.code for o in outcomes]}")
        for ref, outcome in zip(refs, outcomes, strict=True):
            code = self.model.resolve(ref, op, self.now)
            assert (outcome.ok, outcome.code) == (code is None, code), (op, ref)
            if code is None:
                apply(ref, outcome)

    def renew(self) -> None:
        secs = self.rng.choice([1.0, 10.0, 60.0])

        def apply(ref: Ref, outcome) -> None:
            assert outcome.expires_at == self.now + secs
            self.model.renew(ref, self.now + secs)

        self._per_item("renew", lambda refs: self.engine.renew(refs, secs, self.now), self.pick_refs(3), apply)

    def dequeue(self) -> None:
        self._per_item("dequeue", lambda refs: self.engine.dequeue(refs, self.now), self.pick_refs(4),
                       lambda ref, outcome: self.model.dequeue(ref))

    def release(self) -> None:
        reason = self.rng.choice([None, "crashed"])

        def apply(ref: Ref, outcome) -> None:
            assert outcome.dead == self.model.release(ref, reason)

        self._per_item("release", lambda refs: self.engine.release(refs, reason, self.now), self.pick_refs(2), apply)

    def update(self) -> None:
        rng = self.rng
        group = rng.choice(list(GROUPS))
        new = [self.new_task(rng.choice(GROUPS[group])) for _ in range(rng.randint(0, 3))]
        dequeue, release, renew = self.pick_refs(3), self.pick_refs(1)[: rng.randint(0, 1)], self.pick_refs(1)[: rng.randint(0, 1)]
        bad = rng.random() < 0.05
        if bad:
            new.append(NewTask(GROUPS[group][0], b"", pid="bad\udc80"))
        if not (new or dequeue or release or renew):
            return
        expected = "BAD_REQUEST" if bad else self.model.update_error(
            enqueue_queues=[t.queue for t in new], dequeue=dequeue, release=release, renew=renew, now=self.now)
        secs = rng.choice([5.0, 60.0])
        as_refs = lambda refs: [LeaseRef(r.queue, r.pid, r.lease_id) for r in refs]  # noqa: E731
        try:
            result = self.engine.update(enqueue=new, dequeue=as_refs(dequeue), release=as_refs(release),
                                        renew=as_refs(renew), lease_secs=secs, reason="step failed", now=self.now)
        except errors.KittiwakeError as error:
            self.log(f"update refused {error.code}")
            assert error.code == expected, error
            return
        self.log(f"update dequeue={dequeue} release={release} renew={renew} enqueue={[t.pid for t in new]}")
        assert expected is None, f"update should have been refused with {expected}"
        for ref in dequeue:
            self.model.dequeue(ref)
        for ref, outcome in zip(release, result.released, strict=True):
            assert outcome.dead == self.model.release(ref, "step failed")
        for ref in renew:
            self.model.renew(ref, self.now + secs)
        for task, outcome in zip(new, result.enqueued, strict=True):
            self.model_enqueue(task, outcome)

    def delete_queue(self) -> None:
        queue = self.rng.choice(QUEUES + [QUEUES[0] + ".dead"])
        count = self.engine.delete_queue(queue)
        self.log(f"delete_queue {queue} -> {count}")
        assert count == self.model.delete_queue(queue)

    def cancel(self) -> None:
        keys = self.pick_keys(3)
        reason = self.rng.choice([None, "operator"])
        outcomes = self.engine.cancel(keys, reason, self.now)
        self.log(f"cancel {keys} -> {[o.code for o in outcomes]}")
        codes = self.model.cancel(keys, reason)
        assert [(o.code, o.dead) for o in outcomes] == [(code, code is None) for code in codes]

    def pick_dead_letters(self) -> tuple[str, list[str] | None, str | None, int]:
        """(queue or its dead-letter queue, pids or None to page, after_pid, limit) of a requeue or purge."""
        rng = self.rng
        queue = rng.choice(QUEUES[:3])
        letters = sorted(self.model.tasks(queue + ".dead"))
        originals = sorted({t.dead_pid for t in self.model.tasks(queue + ".dead").values() if t.dead_pid})
        name = queue + ".dead" if rng.random() < 0.5 else queue
        if rng.random() < 0.3:
            return name, None, rng.choice([None, *letters]), rng.randint(1, 3)
        pool = letters + originals + ["nobody"]
        return name, [rng.choice(pool) for _ in range(rng.randint(1, 3))], None, 1000

    def requeue_dead(self) -> None:
        self._dead_letters("requeue_dead", self.engine.requeue_dead, self.model.requeue_dead)

    def purge_dead(self) -> None:
        self._dead_letters("purge_dead", self.engine.purge_dead, self.model.purge_dead)

    def _dead_letters(self, op: str, call, model_call) -> None:
        queue, pids, after_pid, limit = self.pick_dead_letters()
        page = call(queue, pids, self.now, after_pid=after_pid, limit=limit)
        self.log(f"{op} {queue} {pids} after {after_pid} -> {[(o.pid, o.code) for o in page.outcomes]}")
        outcomes, next_pid = model_call(queue, pids, after_pid, limit)
        assert ([(o.pid, o.code) for o in page.outcomes], page.next_pid) == (outcomes, next_pid)

    def inspect(self) -> None:
        if self.rng.random() < 0.5:
            rows = self.engine.stats(None, None, 3, self.now)
            self.log("stats")
        else:
            self.engine.maintain(self.now)
            reaped = self.store.reap(self.rng.choice([1, 5, 1000]))  # the broker's housekeeping
            rows = self.engine.stats(None, None, 3, self.now)
            self.log(f"maintain, reaped {reaped}")
        self.model.sweep(self.now)
        assert [(r.queue, r.size, r.leased) for r in rows] == [
            (name, self.model.size(name), len(self.model.held(name))) for name in self.model.names()]

    def tick(self) -> None:
        self.now += self.rng.choice([0.000_001, 0.01, 0.5, 1.0, 3.0])

    def jump(self) -> None:
        self.now += self.rng.choice([60.0, 600.0, 86_400.0])
        self.log("clock jumps")

    def step_back(self) -> None:
        self.now -= self.rng.choice([0.5, 5.0])
        self.log("clock steps back")

    def commit(self) -> None:
        self.store.commit()
        self.snapshot = (self.model.copy(), list(self.refs), self.task_states.snapshot())
        self.log("commit")

    def restart(self) -> None:
        self.commit()
        self._reopen()
        self.log("restart")

    def crash(self) -> None:
        self.store.rollback()
        model, refs, task_states = self.snapshot
        self.model, self.refs = model.copy(), list(refs)
        self.task_states.restore(task_states)  # the step's check: the store is back at the commit
        self._reopen()
        self.log("crash")

    def _reopen(self) -> None:
        self.now += 1.0  # a restart takes a while: the clock is past the last lease id and FIFO pid
        if self.store_kind == "sqlite":
            self.store.close()
            self.store = self._open_store()
        self.engine = self._new_engine()
        self.engine.recover(self.now)


def run(seed: int, steps: int, store_kind: str) -> collections.Counter[str]:
    simulation = Simulation(seed, store_kind)
    try:
        for index in range(steps):
            try:
                name = simulation.step()
                check_engine(simulation.engine, simulation.model, max_tasks=MAX_TASKS)
                simulation.task_states.step(OPERATIONS.get(name, set()), name)
            except Exception as exc:
                trace = "\n".join(simulation.trace)
                raise AssertionError(
                    f"simulation failed at step {index} with {type(exc).__name__}: {exc}\n"
                    f"replay: KITTIWAKE_SIM_SEED={seed} KITTIWAKE_SIM_STEPS={index + 1} "
                    f"pytest tests/engine/test_simulation.py -k {store_kind}\nlast steps:\n{trace}"
                ) from exc
        return simulation.counts
    finally:
        simulation.close()


def seeds(count: int) -> list[int]:
    if "KITTIWAKE_SIM_SEED" in os.environ:
        return [int(os.environ["KITTIWAKE_SIM_SEED"])]
    return list(range(1, count + 1))


def steps(default: int) -> int:
    return int(os.environ.get("KITTIWAKE_SIM_STEPS", default))


@pytest.mark.parametrize("store_kind", ["memory", "sqlite"])
@pytest.mark.parametrize("seed", seeds(SEEDS))
def test_simulation(seed, store_kind):
    counts = run(seed, steps(STEPS), store_kind)
    assert counts["lease"] and counts["commit"]


@pytest.mark.soak
@pytest.mark.timeout(3600)
@pytest.mark.parametrize("store_kind", ["memory", "sqlite"])
def test_simulation_soak(store_kind):
    for seed in seeds(SOAK_SEEDS):
        run(seed if "KITTIWAKE_SIM_SEED" in os.environ else seed + 1_000_000, steps(SOAK_STEPS), store_kind)


def test_a_failure_names_its_seed(monkeypatch):
    def broken_check(engine, model, **_):
        raise AssertionError("invariant broken")

    monkeypatch.setattr(f"{__name__}.check_engine", broken_check)
    with pytest.raises(AssertionError) as caught:
        run(4242, 5, "memory")
    assert "KITTIWAKE_SIM_SEED=4242" in str(caught.value)

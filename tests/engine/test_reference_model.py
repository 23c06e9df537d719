"""The engine against a tiny reference model of queues (hypothesis `RuleBasedStateMachine`).

Workers and producers enqueue with colliding pids and FIFO pids, lease from one or two queues
with max_tasks / max_pid / receiver, renew, dequeue and release with current and stale lease ids,
send atomic updates (some of which must be refused whole), delete queues and let the clock run so
leases expire and tasks die after max_attempts. The broker commits, restarts (commit, new engine,
recover) and crashes (rollback of what was not committed, new engine, recover); the model is
snapshotted at every commit, so a crash must bring back exactly the committed state: nothing
acknowledged is lost, nothing unacknowledged survives.

After every step `check_engine` holds the engine, its head cache and the store's rows to the
model. The engine runs with a head of 3 tasks and a small cache so refills and evictions happen
all the time.
"""

from __future__ import annotations

import shutil
import tempfile

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from kittiwake import errors
from kittiwake.engine import Engine
from kittiwake.model import LeaseRef, LeaseRequest, NewTask, fifo_pid
from kittiwake.store.memory import MemoryStore
from kittiwake.store.sqlite import SqliteStore

from .reference_queues import REFILLS_PER_LEASE, ModelQueues, Ref, check_engine

HEAD_TASKS = 3
CACHE_BYTES = 2_000  # a dozen small tasks: whole heads get evicted
START = 1_000.0

QUEUES = ["a", "b", "g#c", "g#d"]
LEASE_QUEUES = QUEUES + ["a.dead", "g#c.dead"]
PIDS = ["a", "b", "c", "d", "e", "f", "g", "h"]
RECEIVERS = [None, None, "r1", "r2"]
MAX_TASKS = 4  # <= HEAD_TASKS + 1: the head bound is exactly 2 * HEAD_TASKS
MAX_QUEUE_SIZE = 16  # so one lease's refills always reach every task: exact top-k

queue_names = st.sampled_from(QUEUES)
pids = st.sampled_from(PIDS)
receivers = st.sampled_from(RECEIVERS)
datas = st.binary(max_size=40)
lease_secs = st.sampled_from([1.0, 5.0, 30.0])
indexes = st.integers(0, 3) | st.integers(0, 10_000)  # mostly the latest leases, sometimes any


class EngineMachine(RuleBasedStateMachine):
    """One broker: engine + store, a fake clock, and what its clients were told."""

    def __init__(self) -> None:
        super().__init__()
        self.now = START
        self.store = self.make_store()
        self.engine = self.new_engine()
        self.model = ModelQueues(lambda: self.store)
        self.refs: list[Ref] = []  # leases clients were granted (acknowledged at the next commit)
        self.lease_ids: set[int] = set()
        self.snapshot = self._state()

    # ------------------------------------------------------------ plumbing

    def make_store(self):
        return MemoryStore()

    def reopen_store(self):
        return self.store

    def new_engine(self) -> Engine:
        return Engine(self.store, head_tasks=HEAD_TASKS, cache_bytes=CACHE_BYTES)

    def _state(self):
        return (self.model.copy(), list(self.refs), set(self.lease_ids))

    def teardown(self) -> None:
        self.store.close()

    def check_cache(self) -> None:
        """Calls that add to memory end within the cache setting (TaskMaster §5.4.1)."""
        assert self.engine.memory_bytes <= self.engine.cache_bytes

    def pick_refs(self, picks: list[int]) -> list[Ref]:
        if not self.refs:
            return []
        return [self.refs[-1 - index % len(self.refs)] for index in picks]

    # ------------------------------------------------------------ producers

    @rule(
        queue=queue_names,
        items=st.lists(
            st.tuples(st.one_of(st.none(), pids), datas, receivers, st.sampled_from([None, 1, 2])),
            min_size=1,
            max_size=4,
        ),
    )
    def enqueue(self, queue, items) -> None:
        if self.model.size(queue) + len(items) > MAX_QUEUE_SIZE:
            return
        tasks = [NewTask(queue, data, pid=pid, receiver=receiver, max_attempts=attempts)
                 for pid, data, receiver, attempts in items]
        outcomes = self.engine.enqueue(tasks, self.now)
        assert len(outcomes) == len(tasks)
        self.check_cache()
        for task, outcome in zip(tasks, outcomes):
            self.model_enqueue(task, outcome)

    def model_enqueue(self, task: NewTask, outcome) -> None:
        assert outcome.queue == task.queue
        if task.pid is None:
            # FIFO: never collapses, never lands on an existing pid, sorts after earlier FIFO pids
            assert not outcome.collapsed
            assert self.model.get(task.queue, outcome.pid) is None
            earlier = [pid for pid, t in self.model.tasks(task.queue).items() if t.fifo]
            assert all(outcome.pid > pid for pid in earlier)
            collapsed = self.model.enqueue(task.queue, outcome.pid, task.data, receiver=task.receiver,
                                           max_attempts=task.max_attempts, fifo=True)
        else:
            assert outcome.pid == task.pid
            collapsed = self.model.enqueue(task.queue, task.pid, task.data, receiver=task.receiver,
                                           max_attempts=task.max_attempts)
        assert outcome.collapsed == collapsed

    @rule(queue=queue_names, ahead_micros=st.integers(0, 3), data=datas)
    def enqueue_where_the_clock_is(self, queue, ahead_micros, data) -> None:
        """A delayed task whose pid is where FIFO pids are about to be assigned; then a batch
        with one bad pid, which must be refused whole."""
        if self.model.size(queue) >= MAX_QUEUE_SIZE:
            return
        pid = fifo_pid(int(self.now * 1_000_000) + ahead_micros)
        [outcome] = self.engine.enqueue([NewTask(queue, data, pid=pid)], self.now)
        assert outcome.collapsed == self.model.enqueue(queue, pid, data)
        bad = [NewTask(queue, b"ok", pid="fresh"), NewTask(queue, b"bad", pid="bad\x00")]
        try:
            self.engine.enqueue(bad, self.now)
        except errors.BadRequest:
            pass
        else:
            raise AssertionError("a batch with a bad pid was accepted")

    # ------------------------------------------------------------ workers

    @rule(
        queues=st.lists(st.sampled_from(LEASE_QUEUES), min_size=1, max_size=2),
        max_tasks=st.integers(1, MAX_TASKS),
        max_pid=st.one_of(st.none(), pids),
        receiver=receivers,
        secs=lease_secs,
    )
    def lease(self, queues, max_tasks, max_pid, receiver, secs) -> None:
        self.check_lease(queues, max_tasks, max_pid, receiver, secs)

    @rule(queue=queue_names, max_tasks=st.integers(1, MAX_TASKS), receiver=receivers, secs=lease_secs)
    def lease_one_queue(self, queue, max_tasks, receiver, secs) -> None:
        self.check_lease([queue], max_tasks, None, receiver, secs)

    def check_lease(self, queues, max_tasks, max_pid, receiver, secs) -> None:
        request = LeaseRequest(list(queues), max_tasks=max_tasks, lease_secs=secs, max_pid=max_pid,
                               receiver=receiver, worker="w1")
        leased = self.engine.lease(request, self.now)
        self.check_cache()
        self.model.sweep(self.now)
        eligible = self.model.eligible(queues, max_pid, receiver)
        got = [(task.queue, task.pid) for task in leased]
        if all(self.model.size(q) <= REFILLS_PER_LEASE * HEAD_TASKS for q in queues):
            assert got == eligible[:max_tasks], "lease must take the smallest eligible pids"
        else:  # past the refill budget a lease may take an approximate top-k (TaskMaster §3.3)
            assert set(got) <= set(eligible) and got == sorted(got, key=lambda item: item[1])
        for task in leased:
            expected = self.model.get(task.queue, task.pid)
            assert expected is not None
            assert (task.data, task.attempts, task.deliveries) == (
                expected.data, expected.attempts, expected.deliveries + 1)
            assert task.lease_id not in self.lease_ids, "a lease id was handed out twice"
            assert task.lease_id > expected.lease_id
            assert task.lease_expires_at == self.now + secs
            self.lease_ids.add(task.lease_id)
            self.model.grant(task.queue, task.pid, task.lease_id, self.now + secs)
            self.refs.append(Ref(task.queue, task.pid, task.lease_id))

    @rule(picks=st.lists(indexes, min_size=1, max_size=3), secs=lease_secs)
    def renew(self, picks, secs) -> None:
        refs = self.pick_refs(picks)
        if not refs:
            return
        outcomes = self.engine.renew([LeaseRef(r.queue, r.pid, r.lease_id) for r in refs], secs, self.now)
        for ref, outcome in zip(refs, outcomes):
            code = self.model.resolve(ref, "renew", self.now)
            assert (outcome.ok, outcome.code) == (code is None, code), ref
            if code is None:
                assert outcome.expires_at == self.now + secs
                self.model.renew(ref, self.now + secs)

    @rule(picks=st.lists(indexes, min_size=1, max_size=3))
    def dequeue(self, picks) -> None:
        refs = self.pick_refs(picks)
        if not refs:
            return
        outcomes = self.engine.dequeue([LeaseRef(r.queue, r.pid, r.lease_id) for r in refs], self.now)
        for ref, outcome in zip(refs, outcomes):
            code = self.model.resolve(ref, "dequeue", self.now)
            assert (outcome.ok, outcome.code) == (code is None, code), ref
            if code is None:
                self.model.dequeue(ref)

    @rule(picks=st.lists(indexes, min_size=1, max_size=3), reason=st.sampled_from([None, "boom"]))
    def release(self, picks, reason) -> None:
        refs = self.pick_refs(picks)
        if not refs:
            return
        outcomes = self.engine.release([LeaseRef(r.queue, r.pid, r.lease_id) for r in refs], reason, self.now)
        for ref, outcome in zip(refs, outcomes):
            code = self.model.resolve(ref, "release", self.now)
            assert (outcome.ok, outcome.code) == (code is None, code), ref
            if code is None:
                assert outcome.dead == self.model.release(ref, reason)

    @rule(pick=indexes, queue=st.sampled_from(LEASE_QUEUES), pid=pids)
    def act_with_a_lease_id_never_granted(self, pick, queue, pid) -> None:
        """A made-up fencing token is refused, whatever the task's state."""
        lease_id = max(self.lease_ids, default=1) + 1 + pick
        ref = Ref(queue, pid, lease_id)
        for op, call in (
            ("renew", lambda refs: self.engine.renew(refs, 5.0, self.now)),
            ("release", lambda refs: self.engine.release(refs, None, self.now)),
            ("dequeue", lambda refs: self.engine.dequeue(refs, self.now)),
        ):
            [outcome] = call([LeaseRef(queue, pid, lease_id)])
            assert not outcome.ok
            assert outcome.code == self.model.resolve(ref, op, self.now)

    @rule(
        group=st.sampled_from(["", "g"]),
        enqueue=st.lists(st.tuples(st.one_of(st.none(), pids), st.integers(0, 1), datas), max_size=2),
        dequeue=st.lists(indexes, max_size=2),
        release=st.lists(indexes, max_size=1),
        renew=st.lists(indexes, max_size=1),
        secs=lease_secs,
        bad_item=st.booleans(),
    )
    def update(self, group, enqueue, dequeue, release, renew, secs, bad_item) -> None:
        """The pipeline step of TaskMaster §3.6: finish tasks and hand the next stage its work, atomically."""
        names = ["a", "b"] if group == "" else ["g#c", "g#d"]
        new = [NewTask(names[which], data, pid=pid) for pid, which, data in enqueue]
        if any(self.model.size(t.queue) >= MAX_QUEUE_SIZE - 2 for t in new):
            return
        if bad_item:
            new.append(NewTask(names[0], b"", pid="bad\x00pid"))
        dequeue_refs, release_refs, renew_refs = (self.pick_refs(p) for p in (dequeue, release, renew))
        if not (new or dequeue_refs or release_refs or renew_refs):
            return
        if bad_item:
            expected = "BAD_REQUEST"
        else:
            expected = self.model.update_error(
                enqueue_queues=[t.queue for t in new], dequeue=dequeue_refs, release=release_refs,
                renew=renew_refs, now=self.now)
        before = self.model.copy()
        try:
            result = self.engine.update(
                enqueue=new,
                dequeue=[LeaseRef(r.queue, r.pid, r.lease_id) for r in dequeue_refs],
                release=[LeaseRef(r.queue, r.pid, r.lease_id) for r in release_refs],
                renew=[LeaseRef(r.queue, r.pid, r.lease_id) for r in renew_refs],
                lease_secs=secs,
                reason="stage failed",
                now=self.now,
            )
        except errors.KittiwakeError as error:
            assert error.code == expected, error
            assert self.model.queues == before.queues
            return
        assert expected is None, f"update should have failed with {expected}"
        self.check_cache()
        for ref in dequeue_refs:
            self.model.dequeue(ref)
        for ref, outcome in zip(release_refs, result.released):
            assert outcome.dead == self.model.release(ref, "stage failed")
        for ref, outcome in zip(renew_refs, result.renewed):
            assert outcome.expires_at == self.now + secs
            self.model.renew(ref, self.now + secs)
        assert len(result.enqueued) == len(new)
        for task, outcome in zip(new, result.enqueued):
            self.model_enqueue(task, outcome)

    # ------------------------------------------------------------ operators

    @rule(queue=st.sampled_from(LEASE_QUEUES), rarely=st.integers(0, 2))
    def delete_queue(self, queue, rarely) -> None:
        if rarely:
            return
        assert self.engine.delete_queue(queue) == self.model.delete_queue(queue)

    @rule(queue=st.sampled_from(LEASE_QUEUES), pid=pids, what=st.sampled_from(["get", "stats", "maintain"]))
    def inspect(self, queue, pid, what) -> None:
        getattr(self, what)(queue, pid)

    def get(self, queue, pid) -> None:
        expected = self.model.get(queue, pid)
        try:
            view = self.engine.get(queue, pid, self.now)
        except errors.TaskNotFound:
            assert expected is None
            return
        assert expected is not None
        assert (view["data"], view["attempts"], view["deliveries"]) == (
            expected.data, expected.attempts, expected.deliveries)
        assert view["state"] == ("leased" if expected.running(self.now) else "available")

    def stats(self, *_) -> None:
        rows = self.engine.stats(None, None, 5, self.now)
        self.model.sweep(self.now)
        names = self.model.names()
        assert [row.queue for row in rows] == names
        for row in rows:
            held = len(self.model.held(row.queue))
            assert (row.size, row.leased, row.available) == (self.model.size(row.queue), held,
                                                             self.model.size(row.queue) - held)
            assert row.dead == self.model.size(row.queue + ".dead")
            assert len(row.leased_sample) == min(5, held)

    def maintain(self, *_) -> None:
        self.engine.maintain(self.now)
        self.model.sweep(self.now)

    @rule(secs=st.sampled_from([0.25, 1.0, 3.0, 3.0, 30.0, 1_000.0]))
    def clock(self, secs) -> None:
        """Small ticks, and jumps past every lease."""
        self.now += secs

    # ------------------------------------------------------------ durability

    @rule(what=st.sampled_from(["commit", "commit", "commit", "restart", "crash"]))
    def durability(self, what) -> None:
        getattr(self, what)()

    def commit(self) -> None:
        self.store.commit()
        self.snapshot = self._state()

    def restart(self) -> None:
        """Clean restart: everything was committed; a new engine recovers from the store."""
        self.commit()
        self.now += 1.0  # a restart takes time; lease ids and FIFO pids come from the clock
        self.store = self.reopen_store()
        self.engine = self.new_engine()
        self.engine.recover(self.now)

    def crash(self) -> None:
        """The broker dies: what was not committed was never acknowledged and is gone."""
        self.store.rollback()
        self.now += 1.0
        self.model, refs, lease_ids = self.snapshot
        self.model = self.model.copy()
        self.refs, self.lease_ids = list(refs), set(lease_ids)
        self.store = self.reopen_store()
        self.engine = self.new_engine()
        self.engine.recover(self.now)

    @invariant()
    def engine_matches_model(self) -> None:
        check_engine(self.engine, self.model, max_tasks=MAX_TASKS)


class SqliteEngineMachine(EngineMachine):
    """The same machine over SQLite in a temporary directory, reopened at every restart and crash."""

    def make_store(self):
        self.directory = tempfile.mkdtemp(prefix="kittiwake-model-")
        return SqliteStore(self.directory, durability="os")

    def reopen_store(self):
        self.store.close()
        return SqliteStore(self.directory, durability="os")

    def teardown(self) -> None:
        self.store.close()
        shutil.rmtree(self.directory, ignore_errors=True)


_settings = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])

# 400 programs of 40 steps (16,000 steps a run, about a thousand draws of each rule) over the memory
# store, and the same rules in 150 programs more over SQLite below
TestEngineAgainstModel = EngineMachine.TestCase
TestEngineAgainstModel.settings = settings(max_examples=400, stateful_step_count=40, **_settings)

TestSqliteEngineAgainstModel = SqliteEngineMachine.TestCase
TestSqliteEngineAgainstModel.settings = settings(max_examples=150, stateful_step_count=40, **_settings)

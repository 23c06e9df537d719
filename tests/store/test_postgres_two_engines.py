"""Two brokers' engines on one PostgreSQL schema, against a reference model (hypothesis).

Two engines, each on its own `PostgresStore(brokers="many")` of one schema, serve one queue.
Producers enqueue with colliding and FIFO pids through either engine; leasers lease, renew, release
and dequeue through either engine, with the lease ids either one granted; the clock runs and either
engine sweeps. Each step is one transaction of one engine (claim, call, commit), so the engines
interleave step by step as two brokers' passes do, each seeing the other's commits only through
its claims.

The model is a dict pid → task with its last lease id and, while leased, its expiry. It says which
tasks a lease must return (the lowest available pids: a lease that ran out stays held until a
sweep), and whether each renew, release and dequeue succeeds (late dequeue: the last lease of a task
may still finish it after it ran out, until it is leased again or released). So no task is ever
leased twice at once, none is lost (the rows at the end are the model's), and no engine serves a
stale view of what the other did.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kittiwake import errors
from kittiwake.engine import Engine
from kittiwake.model import LeaseRef, LeaseRequest, NewTask
from support.postgres import fresh_schema

START = 2_000_000_000.0
PIDS = ["a", "b", "c", "d", "e", "f"]

_queues = itertools.count()


@dataclass
class ModelTask:
    lease_id: int = 0  # the last lease granted (0: none, or given back)
    leased_until: float | None = None  # set while held: until a sweep after it ran out


@dataclass(frozen=True)
class Granted:
    pid: str
    lease_id: int


class Brokers:
    def __init__(self, dsn: str, schema: str) -> None:
        from kittiwake.store.postgres import PostgresStore

        self.stores = [PostgresStore(dsn, schema=schema, brokers="many") for _ in range(2)]
        self.engines = [Engine(store, head_tasks=2) for store in self.stores]
        for engine in self.engines:
            engine.recover(START)

    def close(self) -> None:
        for store in self.stores:
            store.close()


@pytest.fixture(scope="module")
def brokers() -> Iterator[Brokers]:
    with fresh_schema() as (dsn, schema):
        pair = Brokers(dsn, schema)
        try:
            yield pair
        finally:
            pair.close()


step = st.one_of(
    st.tuples(st.just("enqueue"), st.integers(0, 1), st.sampled_from(PIDS) | st.none()),
    st.tuples(st.just("lease"), st.integers(0, 1), st.integers(1, 3), st.sampled_from([1.0, 3.0])),
    st.tuples(st.just("renew"), st.integers(0, 1), st.integers(0, 20)),
    st.tuples(st.just("release"), st.integers(0, 1), st.integers(0, 20)),
    st.tuples(st.just("dequeue"), st.integers(0, 1), st.integers(0, 20)),
    st.tuples(st.just("tick"), st.sampled_from([0.5, 1.0, 2.0])),
    st.tuples(st.just("sweep"), st.integers(0, 1)),
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(steps=st.lists(step, min_size=5, max_size=30))
def test_two_engines_on_one_schema_behave_as_one_queue(brokers: Brokers, steps: list[tuple]) -> None:
    queue = f"q{next(_queues)}"
    model: dict[str, ModelTask] = {}
    granted: list[Granted] = []
    now = START + next(_queues) * 1000.0  # each example on a clock of its own, ahead of the last

    def run(index: int, call):  # one engine's transaction: claim what the step names, call, commit
        engine, store = brokers.engines[index], brokers.stores[index]
        engine.claim([queue])
        try:
            result = call(engine)
        except BaseException:
            store.rollback()
            raise
        store.commit()
        return result

    for action, *args in steps:
        if action == "tick":
            now += args[0]
        elif action == "sweep":
            def sweep(engine: Engine) -> int:
                engine.claim([], sweep_at=now)
                return engine.sweep(now)

            run(args[0], sweep)
            for task in model.values():
                if task.leased_until is not None and task.leased_until <= now:
                    task.leased_until = None  # the failed attempt counted; the lease id stays (late dequeue)
        elif action == "enqueue":
            index, pid = args
            outcome = run(index, lambda e: e.enqueue([NewTask(queue, b"x", pid=pid)], now)[0])
            assert outcome.collapsed == (outcome.pid in model), (outcome, sorted(model))
            model.setdefault(outcome.pid, ModelTask())
        elif action == "lease":
            index, want, secs = args
            request = LeaseRequest(queues=[queue], max_tasks=want, lease_secs=secs)
            tasks = run(index, lambda e: e.lease(request, now))
            available = sorted(pid for pid, task in model.items() if task.leased_until is None)
            assert [t.pid for t in tasks] == available[:want], "a lease that is not the lowest available pids"
            for task in tasks:
                held = model[task.pid]
                assert held.leased_until is None, f"{task.pid} leased twice at once"
                held.lease_id, held.leased_until = task.lease_id, now + secs
                granted.append(Granted(task.pid, task.lease_id))
        elif granted:
            index, which = args
            ref = granted[which % len(granted)]
            lease_ref = LeaseRef(queue, ref.pid, ref.lease_id)
            task = model.get(ref.pid)
            current = task is not None and task.lease_id == ref.lease_id
            running = current and task.leased_until is not None and task.leased_until > now
            if action == "dequeue":
                outcome = run(index, lambda e: e.dequeue([lease_ref], now)[0])
                assert outcome.ok == current, (outcome, task, ref)
                if current:
                    del model[ref.pid]
            elif action == "renew":
                outcome = run(index, lambda e: e.renew([lease_ref], 3.0, now)[0])
                assert outcome.ok == running, (outcome, task, ref)
                if running:
                    task.leased_until = now + 3.0
            else:
                outcome = run(index, lambda e: e.release([lease_ref], None, now)[0])
                assert outcome.ok == running, (outcome, task, ref)
                if running:
                    task.lease_id, task.leased_until = 0, None

    # nothing lost, nothing extra: the rows are the model's, whichever engine reads them
    for index in (0, 1):
        rows = run(index, lambda e: e.peek(queue, 100, None, now))
        assert sorted(row["pid"] for row in rows) == sorted(model), "the store and the model disagree"
    stats = run(1, lambda e: e.stats([queue], None, 0, now))
    assert stats[0].size == len(model)


def test_a_write_to_a_queue_not_claimed_is_refused(brokers: Brokers) -> None:
    store = brokers.stores[0]
    from kittiwake.engine.mutations import DeleteTask

    store.write([DeleteTask("never-claimed", "p")])
    with pytest.raises((RuntimeError, errors.StorageFailure)):
        store.commit()
    store.rollback()


def test_a_reap_never_forgets_the_generation_of_a_queue_another_broker_is_writing(brokers: Brokers) -> None:
    """A dropped queue's generation row is forgotten once the queue has no row left; another broker
    may meanwhile be writing the queue's first rows of that generation (uncommitted, so unseen by
    the reap). Forgetting it then would make those rows a dead generation's: lost at commit."""
    from kittiwake.engine.mutations import DropQueue, PutTask
    from kittiwake.model import Task

    a, b = brokers.stores
    queue = f"reaped{next(_queues)}"
    a.claim([queue])
    a.write([PutTask(Task(queue=queue, pid="old", data=b"x", enqueued_at=START))])
    a.commit()
    a.claim([queue])
    a.write([DropQueue(queue)])
    a.commit()

    b.claim([queue])  # sees the new generation, locks the queue
    b.write([PutTask(Task(queue=queue, pid="new", data=b"y", enqueued_at=START))])
    b.claim([f"{queue}-flush"])  # sends the write (uncommitted) within b's transaction
    a.reap(1000)  # deletes the old row; must not forget the generation b writes into
    a.commit()
    b.commit()

    a.claim([queue])
    try:
        assert a.load_task(queue, "new") is not None, "a committed task fell into a forgotten generation"
    finally:
        a.commit()

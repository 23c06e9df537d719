"""What a pass hands to the metrics: the engine's tally of task moves, only once its commit succeeded.

Passes driven by hand over the memory store wrapped in `support.faulty_store.FaultyStore`, fake
connections, hand-moved clocks. A pass that fails at any stage — a write, a read, the commit, after
the commit, a bug in the engine, a conflict with another broker — rebuilds the engine, so its moves
are counted never, or (a bug, a conflict: the pass runs again) once.
"""

from __future__ import annotations

import logging
from typing import Any, Sequence

import pytest

from kittiwake import errors
from kittiwake.broker.passes import PassLimits, PassOutcome, Passes
from kittiwake.engine import Engine
from kittiwake.engine.mutations import Mutation, PutTask
from kittiwake.engine.tally import DEQUEUED, ENQUEUED, LEASED, MOVES
from kittiwake.model import NewTask
from kittiwake.protocol import DEFAULT_MAX_FRAME, FrameReader, Reply, decode_reply, decode_request, encode_request
from kittiwake.store.memory import MemoryStore
from support.faulty_store import Failure, FaultyStore, Stage

NOW = 1_700_000_000.0
POISON = "poison"


class Clocks:
    def __init__(self) -> None:
        self.wall = NOW
        self.monotonic = 100.0


class Connection:
    """A connection as a pass sees it (`passes.Caller`)."""

    def __init__(self) -> None:
        self.peer = "test:4000"
        self.closed = self.ended = self.write_paused = False
        self.deferred: list[Any] = []


class PlantedBug(RuntimeError):
    pass


class BuggyEngine(Engine):
    """An enqueue naming the poison queue writes its other tasks, then raises (a bug half way)."""

    def enqueue(self, tasks: list[NewTask], now: float) -> Any:
        outcomes = super().enqueue([task for task in tasks if task.queue != POISON], now)
        if len(outcomes) < len(tasks):
            raise PlantedBug("an enqueue to the poison queue, after the others were written")
        return outcomes


class ConflictingStore(FaultyStore):
    """Writes of task "d" meet another broker's lock, `conflicts` times (`passes.MAX_CONFLICT_RETRIES`)."""

    conflicts = 0

    def write(self, mutations: Sequence[Mutation]) -> None:
        if self.conflicts and any(isinstance(mutation, PutTask) and mutation.task.pid == "d" for mutation in mutations):
            self.conflicts -= 1
            raise errors.StorageFailure("a deadlock", fault=errors.StorageFault.CONFLICT)
        super().write(mutations)


class Run:
    def __init__(self, store: FaultyStore) -> None:
        self.store = store
        self.clocks = Clocks()
        self.passes = Passes(
            store, lambda: BuggyEngine(store, head_tasks=2),
            PassLimits(max_frame=DEFAULT_MAX_FRAME, max_held_bytes=1 << 20),
            wall_clock=lambda: self.clocks.wall, monotonic_clock=lambda: self.clocks.monotonic,
        )
        self.passes.start(NOW)
        self.connection = Connection()
        self.next_id = 0
        self.counted: dict[str, list[int]] = {}
        self.commits: list[float] = []

    def send(self, op: str, **fields: Any) -> int:
        self.next_id += 1
        self.passes.submit(self.connection, decode_request(encode_request(op, self.next_id, fields)))
        return self.next_id

    def run(self) -> tuple[PassOutcome, list[Reply]]:
        """One pass; what it hands over is added up as the broker's aggregate would."""
        outcome = self.passes.run()
        if outcome.tally is not None:
            assert outcome.committed
            for queue, row in outcome.tally.counts.items():
                total = self.counted.setdefault(queue, [0] * len(MOVES))
                for move, count in enumerate(row):
                    total[move] += count
        else:
            assert not outcome.committed or outcome.commit_secs is None
        if outcome.commit_secs is not None:
            self.commits.append(outcome.commit_secs)
        frames = b"".join(outcome.replies.get(self.connection, []))  # type: ignore[call-overload]
        return outcome, [decode_reply(body) for body in FrameReader(DEFAULT_MAX_FRAME).feed(frames)]

    def enqueue(self, queue: str, *pids: str) -> int:
        return self.send("enqueue", tasks=[{"queue": queue, "data": b"x", "pid": pid} for pid in pids])

    def moves(self, queue: str) -> dict[str, int]:
        return {name: count for name, count in zip(MOVES, self.counted.get(queue, [])) if count}


@pytest.fixture
def run(caplog: pytest.LogCaptureFixture) -> Run:
    caplog.set_level(logging.CRITICAL, logger="kittiwake.broker")
    return Run(FaultyStore(MemoryStore()))


@pytest.mark.parametrize("stage", [Stage.WRITE, Stage.READ, Stage.COMMIT, Stage.AFTER_COMMIT])
def test_nothing_is_counted_when_the_pass_fails(run: Run, stage: Stage) -> None:
    run.enqueue("q", "a")
    assert run.run()[0].committed
    run.enqueue("q", "b", "c")
    run.send("peek", queue="q", n=10)  # reads the store
    run.send("lease", queues=["q"], max_tasks=1)
    run.store.arm(stage, Failure.IO_ERROR)
    outcome, replies = run.run()
    assert not outcome.committed and all(reply.error["code"] == "UNAVAILABLE" for reply in replies)
    assert run.moves("q") == {"enqueued": 1}
    run.enqueue("q", "d")  # the engine was rebuilt from the store: what it did before is not counted later
    assert run.run()[0].committed
    assert run.moves("q") == {"enqueued": 2}
    stored = {task.pid for task in run.store.inner.scan("q", None, 100)}
    # after the commit reached the disk, b and c are stored: the broker could not know, and counts them not
    assert stored == ({"a", "b", "c", "d"} if stage is Stage.AFTER_COMMIT else {"a", "d"})


def test_a_bug_rolls_back_its_moves_and_the_pass_counts_the_rest_once(run: Run) -> None:
    run.enqueue("q", "a", "b")
    run.send("enqueue", tasks=[{"queue": "q", "data": b"x", "pid": "c"}, {"queue": POISON, "data": b"x"}])
    run.send("lease", queues=["q"], max_tasks=2)
    outcome, replies = run.run()
    assert outcome.committed and [reply.ok for reply in replies] == [True, False, True]
    assert replies[1].error["code"] == "INTERNAL" and run.passes.bugs == 1
    assert run.moves("q") == {"enqueued": 2, "leased": 2}


def test_a_conflict_runs_the_pass_again_and_counts_it_once(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.CRITICAL, logger="kittiwake.broker")
    store = ConflictingStore(MemoryStore())
    run = Run(store)
    run.enqueue("q", "a", "b")
    assert run.run()[0].committed
    store.conflicts = 2
    run.enqueue("q", "c")
    run.send("lease", queues=["q"], max_tasks=1)
    run.enqueue("q", "d")  # meets the lock twice, after the moves of the requests before it
    outcome, replies = run.run()
    assert outcome.committed and all(reply.ok for reply in replies) and run.passes.conflicts == 2
    assert run.moves("q") == {"enqueued": 4, "leased": 1}


def test_a_pass_that_stops_after_too_many_conflicts_counts_nothing(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.CRITICAL, logger="kittiwake.broker")
    store = ConflictingStore(MemoryStore())
    run = Run(store)
    run.enqueue("q", "a", "b")
    assert run.run()[0].committed
    store.conflicts = 100
    run.enqueue("q", "c")
    run.enqueue("q", "d")
    outcome, _ = run.run()
    assert not outcome.committed
    assert run.moves("q") == {"enqueued": 2}


def test_moves_of_a_housekeeping_sweep_count_when_its_pass_commits(run: Run) -> None:
    run.enqueue("q", "a")
    run.send("lease", queues=["q"], max_tasks=1, lease_secs=1.0)
    run.run()
    run.clocks.wall += 2.0
    run.passes.request_sweep()
    run.store.arm(Stage.COMMIT, Failure.DISK_FULL)
    assert not run.run()[0].committed
    assert run.moves("q") == {"enqueued": 1, "leased": 1}
    run.passes.request_sweep()
    assert run.run()[0].committed
    assert run.moves("q") == {"enqueued": 1, "leased": 1, "expired": 1}


def test_the_commit_is_timed_on_the_monotonic_clock_when_the_pass_wrote(run: Run) -> None:
    inner_commit = run.store.commit

    def slow_commit() -> None:
        run.clocks.monotonic += 0.25
        inner_commit()

    run.store.commit = slow_commit  # type: ignore[method-assign]
    run.enqueue("q", "a")
    outcome, _ = run.run()
    assert outcome.commit_secs == 0.25
    run.send("ping")
    outcome, _ = run.run()  # wrote nothing: no commit worth timing
    assert outcome.committed and outcome.commit_secs is None
    assert run.commits == [0.25]


def test_moves_made_between_passes_are_not_the_next_passes(run: Run) -> None:
    """Only a pass changes the engine; should anything else, its moves are not passed off as the pass's."""
    run.enqueue("q", "a")
    run.run()
    engine = run.passes.engine
    assert engine is not None
    engine.state.tally.count("q", DEQUEUED)
    run.send("lease", queues=["q"], max_tasks=1)
    run.run()
    assert run.moves("q") == {"enqueued": 1, "leased": 1}
    assert run.counted["q"][ENQUEUED] == 1 and run.counted["q"][LEASED] == 1

"""Group-commit passes without sockets: one seed drives random batches, store faults and clock jumps
through `broker.passes`, and every invariant is checked after every pass.

The simulation is the shell's twin (`broker.group_commit`): fake connections submit decoded requests
(`support.pass_requests`: enqueue, lease with and without a wait, dequeue, renew, release, update,
cancel_wait, reads, now and then a decode error or a request that hits a planted bug) and receive
the frames a pass returns. Between passes the seed moves the wall clock (ticks, jumps of a minute to a day, steps
back) and the monotonic clock, pauses and resumes connections' output, half-closes and closes
them, asks for sweeps and maintenance, and arms faults in the store (`support.faulty_store`): a
write, a read, a commit before or after it reached the disk, a rollback or a recovery failing, once
or for a while; behind the commit log (`sqlite+log`), also at the log's own stages: an append's write
or sync (and the cut after it), a checkpoint, the log's new round. After every pass:

* no ok reply leaves a pass that failed, but for what changes nothing (a withdrawn or expired
  long-poll's empty list, a `cancel_wait`'s answer);
* every request is answered at most once, and each one not answered yet is still pending,
  deferred or parked — so each long-poll is answered exactly once in the end;
* a connection's replies come in the order it sent its requests, long-polls aside (they answer
  when tasks come: that is what request ids are for);
* nothing written is left uncommitted; an enqueue answered ok is in the store, one answered "not
  applied" (or hit by a bug) never is;
* behind the commit log, now and then: the files as a crash would leave them, opened afresh, hold
  what the live store holds (the log replayed once past the database's ticket);
* the engine equals a fresh engine recovered from the store: both are held to one model read back
  from the store (`engine.reference_queues.check_engine`);
* the task moves the passes handed over (`engine.tally`, only from passes that committed) account
  for what the store holds: each queue's size is its enqueues less its dequeues and dead letters
  (a dead-letter queue's, the dead letters of its queue less its dequeues). A commit that reached
  the disk and then failed is not counted, by design: the check starts again from the store then.

Replay one seed with

    KITTIWAKE_PASS_SEED=1234 pytest tests/broker/test_pass_simulation.py

(`KITTIWAKE_PASS_STEPS` sets the number of passes); a failure prints both and the last steps.
"""

from __future__ import annotations

import collections
import errno
import os
import random
import shutil
import tempfile
from typing import Any

import pytest

from engine.reference_queues import ModelQueues, ModelTask, check_engine
from kittiwake import errors
from kittiwake.broker.pass_replies import NOT_APPLIED, OUTCOME_UNKNOWN, error_frame
from kittiwake.broker.passes import Item, PassLimits, PassOutcome, Passes
from kittiwake.engine import DEAD_REASON_HEADER, Engine
from kittiwake.engine.tally import DEAD_LETTERED, DEQUEUED, ENQUEUED, MOVES
from kittiwake.model import DEAD_PID_HEADER, DEAD_SUFFIX
from kittiwake.model import NewTask
from kittiwake.protocol import FrameReader, Reply, decode_reply, decode_request, encode_request
from kittiwake.protocol import messages as m
from kittiwake.store.memory import MemoryStore
from kittiwake.store.sqlite import SqliteStore
from support.faulty_store import Failure, FaultyStore, Stage
from support.pass_requests import DECODE_ERROR, MAX_TASKS, POISON, PassRequests

SEEDS = 12
PASSES = 150
SQLITE_SEEDS = 2
LOG_SEEDS = 3
SOAK_SEEDS = 200
SOAK_PASSES = 1_000
CONNECTIONS = 4
HEAD_TASKS = 3
CACHE_BYTES = 4_000
MAX_FRAME = 16 * 1024 * 1024
TRACE_LINES = 60


class LogFaults:
    """Disk errors at the commit log's stages (`store.log_file`), each armed to fire once."""

    def __init__(self) -> None:
        self.armed: dict[str, int] = {}  # stage → errno

    def arm(self, stage: str, code: int) -> None:
        self.armed[stage] = code

    def __call__(self, stage: str) -> None:
        code = self.armed.pop(stage, None)
        if code is not None:
            raise OSError(code, f"injected at the commit log's {stage}")


class PlantedBug(RuntimeError):
    pass


class BuggyEngine(Engine):
    """The engine, with a bug on the `POISON` queue: a peek raises at once, an enqueue raises after
    it has written its other tasks, so the pass must roll back half a request."""

    def peek(self, queue: str, n: int, from_pid: str | None, now: float) -> Any:
        if queue == POISON:
            raise PlantedBug("a peek of the poison queue")
        return super().peek(queue, n, from_pid, now)

    def enqueue(self, tasks: list[NewTask], now: float) -> Any:
        outcomes = super().enqueue([task for task in tasks if task.queue != POISON], now)
        if len(outcomes) < len(tasks):
            raise PlantedBug("an enqueue to the poison queue, after the others were written")
        return outcomes


class FakeConnection:
    """A client connection as a pass sees it (`passes.Caller`), with what it sent and was answered."""

    def __init__(self, name: str) -> None:
        self.peer = f"{name}:4000"
        self.closed = False
        self.ended = False
        self.write_paused = False
        self.deferred: list[Item] = []
        self.sent: dict[int, m.Request | None] = {}  # request id → request (None: a decode error)
        self.order: dict[int, int] = {}  # request id → its place in the order sent
        self.waits: set[int] = set()  # ids of long-poll leases
        self.answered: dict[int, Reply] = {}
        self.last_in_order = -1
        self.reader = FrameReader(MAX_FRAME)

    def defer(self, item: Item) -> None:
        self.deferred.append(item)

    def unanswered_waits(self) -> list[int]:
        return [request_id for request_id in self.waits if request_id not in self.answered]


class PassSimulation:
    def __init__(self, seed: int, store_kind: str) -> None:
        self.seed = seed
        self.rng = rng = random.Random(seed)
        self.directory = tempfile.mkdtemp(prefix="kittiwake-passes-") if store_kind != "memory" else None
        self.wall = 1_700_000_000.0 + rng.random() * 1_000
        self.monotonic = 1_000.0
        self.log_faults = LogFaults()
        inner: SqliteStore | MemoryStore
        if store_kind == "sqlite+log":
            # behind the commit log, synced (so every stage of an append is met), checkpointing often
            inner = SqliteStore(self.directory, durability="fsync", commit_log=True, log_fault=self.log_faults,
                                log_preallocate=64 * 1024,
                                checkpoint_mutations=rng.choice([1, 5, 40]), checkpoint_secs=rng.choice([0.5, 1e9]),
                                monotonic_clock=lambda: self.monotonic)
        elif store_kind == "sqlite":
            inner = SqliteStore(self.directory, durability="os")
        else:
            inner = MemoryStore()
        self.inner = inner
        self.store = FaultyStore(inner)
        limits = PassLimits(
            max_frame=MAX_FRAME,
            max_held_bytes=rng.choice([300, 2_000, 1 << 20]),
            max_requests=rng.choice([5, 40, 20_000]),
            max_reply_bytes=rng.choice([1_500, 64 << 20]),
        )
        self.passes = Passes(self.store, self.new_engine, limits,
                             wall_clock=lambda: self.wall, monotonic_clock=lambda: self.monotonic)
        self.passes.start(self.wall)
        self.connections = [FakeConnection(f"c{number}") for number in range(CONNECTIONS)]
        self.opened = CONNECTIONS
        self.next_id = 0
        self.requests = PassRequests(rng)
        self.present: set[tuple[str, str]] = set()  # enqueued ok: to find in the store after the pass
        self.refused: set[tuple[str, str]] = set()  # enqueued and refused as not applied: never in the store
        self.outage_passes = 0  # passes left of a lasting fault
        self.trace: collections.deque[str] = collections.deque(maxlen=TRACE_LINES)
        self.counts: collections.Counter[str] = collections.Counter()
        self.moves: dict[str, list[int]] = {}  # queue → moves counted by committed passes
        self.unknown_commits = 0  # commits that reached the disk and failed after: their moves are not counted
        self.size_offsets: dict[str, int] = {}  # queue → tasks stored but not accounted for by the moves

    def new_engine(self) -> Engine:
        return BuggyEngine(self.store, head_tasks=HEAD_TASKS, cache_bytes=CACHE_BYTES)

    def close(self) -> None:
        self.store.close()
        if self.directory:
            shutil.rmtree(self.directory, ignore_errors=True)

    def log(self, line: str) -> None:
        self.trace.append(f"wall={self.wall:.3f} mono={self.monotonic:.3f} {line}")

    # ------------------------------------------------------------- one step

    def step(self) -> None:
        rng = self.rng
        self.move_clocks()
        if rng.random() < 0.15:
            self.connection_event()
        self.arm_faults()
        for _ in range(rng.choice([0, 1, 2, 3, 5, 8, 13])):
            self.send()
        if rng.random() < 0.3:
            self.passes.request_sweep()
        if rng.random() < 0.1:
            self.passes.request_maintenance()
        self.run_pass()

    def move_clocks(self) -> None:
        rng = self.rng
        secs = rng.choice([0.0, 0.001, 0.05, 0.3, 1.2, 4.0])
        self.wall += secs
        self.monotonic += secs
        roll = rng.random()
        if roll < 0.03:
            self.wall += rng.choice([60.0, 600.0, 86_400.0])
            self.log("the wall clock jumps")
        elif roll < 0.05:
            self.wall -= rng.choice([0.5, 5.0])
            self.log("the wall clock steps back")

    def connection_event(self) -> None:
        rng = self.rng
        connection = rng.choice(self.connections)
        roll = rng.random()
        if roll < 0.45:
            connection.write_paused = not connection.write_paused
            self.log(f"{connection.peer} output {'paused' if connection.write_paused else 'resumed'}")
            if not connection.write_paused:
                self.resubmit_deferred(connection)
                self.passes.wake_connection(connection)  # as `Connection.resume_writing` asks
        elif roll < 0.7 and not connection.ended:
            connection.ended = True  # the client's EOF: its long-polls are answered at once
            self.log(f"{connection.peer} half-closes")
            self.deliver(connection, self.passes.end_waits(connection), committed=True)
        else:
            connection.closed = True
            self.passes.drop_connection(connection)
            self.log(f"{connection.peer} closes")
            self.connections.remove(connection)
            self.opened += 1
            self.connections.append(FakeConnection(f"c{self.opened}"))

    def arm_faults(self) -> None:
        rng = self.rng
        if isinstance(self.inner, SqliteStore) and self.inner._log is not None and rng.random() < 0.12:
            # the commit log's own stages: an append's write or sync (then perhaps its cut), the
            # checkpoint into the database, the log's new round
            stage = rng.choice(["write", "sync", "sync", "checkpoint", "start"])
            self.log_faults.arm(stage, rng.choice([errno.EIO, errno.ENOSPC]))
            if stage in ("write", "sync") and rng.random() < 0.3:
                self.log_faults.arm("cut", errno.EIO)  # the failed record cannot be cut back at once
            self.log(f"armed log {stage}")
        if self.outage_passes:
            self.outage_passes -= 1
            if not self.outage_passes:
                self.store.clear()
                self.log("the lasting fault clears")
            return
        roll = rng.random()
        if roll < 0.12:
            stage = rng.choice([Stage.WRITE, Stage.READ, Stage.COMMIT, Stage.AFTER_COMMIT])
            failure = Failure.IO_ERROR if stage is Stage.AFTER_COMMIT else rng.choice(list(Failure))
            then = rng.choice([None, None, (Stage.ROLLBACK, 1), (Stage.ROLLBACK, 2), (Stage.RECOVER, 1)])
            self.store.arm(stage, failure, times=1, then=then)
            self.log(f"armed {stage.value} {failure.name} then {then}")
        elif roll < 0.14:
            stage = rng.choice([Stage.COMMIT, Stage.READ, Stage.RECOVER])
            self.store.arm(stage, Failure.DISK_FULL, times=None)
            self.outage_passes = rng.randint(2, 12)
            self.log(f"a lasting {stage.value} fault for {self.outage_passes} passes")

    # ------------------------------------------------------------- requests

    def send(self) -> None:
        # a connection whose output is full stops reading, and one that sent EOF sends no more
        open_connections = [c for c in self.connections if not (c.ended or c.write_paused)]
        if not open_connections:
            return
        connection = self.rng.choice(open_connections)
        made = self.requests.make(connection.unanswered_waits(), self.next_id)
        if made is None:
            return
        op, fields = made
        self.next_id += 1
        request_id = self.next_id
        self.counts[op] += 1
        connection.order[request_id] = len(connection.order)
        item: Item
        if op == DECODE_ERROR:
            connection.sent[request_id] = None
            item = error_frame(request_id, errors.MalformedFrame("the simulation's garbage"))
        else:
            request = decode_request(encode_request(op, request_id, fields))
            connection.sent[request_id] = request
            if isinstance(request, m.Lease) and request.wait_secs > 0:
                connection.waits.add(request_id)
            item = request
        self.log(f"{connection.peer} sends {request_id} {op} {fields}")
        self.passes.submit(connection, item)

    # ------------------------------------------------------------- the pass

    def run_pass(self) -> None:
        outcome = self.passes.run()
        if outcome.tally is not None:
            assert outcome.committed, "a pass that failed handed over its moves"
            for queue, row in outcome.tally.counts.items():
                total = self.moves.setdefault(queue, [0] * len(MOVES))
                for move, count in enumerate(row):
                    total[move] += count
        assert outcome.committed == (outcome.tally is not None)
        self.counts["pass"] += 1
        self.counts["committed" if outcome.committed else "failed"] += 1
        self.log(f"pass {'committed' if outcome.committed else 'FAILED'}: {sum(map(len, outcome.replies.values()))} "
                 f"replies, {len(outcome.deferred)} deferred, engine {'up' if self.passes.engine else 'DOWN'}")
        self.apply(outcome)
        self.check()

    def apply(self, outcome: PassOutcome) -> None:
        """What the shell does with a pass's outcome."""
        for connection, item in outcome.deferred:
            connection.defer(item)  # type: ignore[attr-defined]
        for connection, frames in outcome.replies.items():
            self.deliver(connection, frames, outcome.committed)  # type: ignore[arg-type]

    def resubmit_deferred(self, connection: FakeConnection) -> None:
        if connection.deferred and not connection.closed:
            items, connection.deferred = connection.deferred, []
            self.passes.resubmit(connection, items)

    def deliver(self, connection: FakeConnection, frames: list[bytes], committed: bool) -> None:
        if connection.closed or not frames:
            return  # as `Connection.deliver`: nothing reaches a closed socket
        for body in connection.reader.feed(b"".join(frames)):
            self.receive(connection, decode_reply(body), committed)
        if not connection.write_paused:
            self.resubmit_deferred(connection)

    def receive(self, connection: FakeConnection, reply: Reply, committed: bool) -> None:
        """One reply: exactly once, in order, and never ok from a failed pass if it changed anything."""
        assert reply.id in connection.sent, f"{connection.peer} was answered {reply.id}, which it never sent"
        assert reply.id not in connection.answered, f"{connection.peer} was answered {reply.id} twice"
        connection.answered[reply.id] = reply
        request = connection.sent[reply.id]
        self.log(f"  {connection.peer} <- {reply.id} {'ok' if reply.ok else reply.error}")
        if reply.id not in connection.waits:
            place = connection.order[reply.id]
            assert place > connection.last_in_order, f"{connection.peer}: reply {reply.id} came out of order"
            connection.last_in_order = place
        if reply.ok and not committed:
            harmless = isinstance(request, m.CancelWait) or (isinstance(request, m.Lease) and reply.result == [])
            assert harmless, f"ok reply to {reply.id} ({request}) from a pass that failed"
        if isinstance(request, m.Lease) and reply.ok:
            self.requests.granted.extend((task["queue"], task["pid"], task["lease_id"]) for task in reply.result)
        keys = {(task.queue, task.pid) for task in enqueued_by(request)}
        if reply.ok:
            self.present |= keys
            return
        assert reply.error is not None
        if reply.error["code"] != "UNAVAILABLE" or NOT_APPLIED in reply.error["message"]:
            self.refused |= keys  # refused, failed on a bug, or not applied: none of it may stay
        else:
            assert OUTCOME_UNKNOWN in reply.error["message"], reply.error

    # ------------------------------------------------------------- checking

    def check(self) -> None:
        self.check_accounted_for()
        engine = self.passes.engine
        if engine is None:
            assert self.passes.health.failing, "no engine, yet the store is said to be healthy"
            return  # the store may hold the failed pass's writes until the next rebuild rolls them back
        assert not self.store.uncommitted, "a pass left writes that no commit made durable"
        with self.store.held_off():
            model = model_of(self.store, self.wall)
            self.check_crash_image(model)
            stored = {(queue, pid) for queue, tasks in model.queues.items() for pid in tasks}
            missing = self.present - stored
            assert not missing, f"enqueues answered ok are not in the store: {sorted(missing)[:5]}"
            self.present.clear()
            back = self.refused & stored
            assert not back, f"enqueues refused as not applied are in the store: {sorted(back)[:5]}"
            check_engine(engine, model, max_tasks=MAX_TASKS)
            self.check_moves(model)
            fresh = self.new_engine()
            fresh.recover(self.wall)
            check_engine(fresh, model, max_tasks=MAX_TASKS)
            assert engine.list_queues(None, 0, 1_000_000) == fresh.list_queues(None, 0, 1_000_000)

    def check_crash_image(self, model: ModelQueues) -> None:
        """Behind the commit log, now and then: the files as a crash would leave them, opened afresh (the
        log replayed past the database's ticket), hold what the live store holds. Not while the log is
        damaged: a record of unknown fate may be in the file until it is cut back."""
        inner = self.inner
        if not isinstance(inner, SqliteStore) or inner._log is None or inner._log.damaged or self.rng.random() > 0.2:
            return
        assert self.directory is not None
        image = self.directory + "-image"
        shutil.rmtree(image, ignore_errors=True)
        os.mkdir(image)
        for name in ("kittiwake.db", "kittiwake.db-wal", "commit.log"):
            if os.path.exists(os.path.join(self.directory, name)):
                shutil.copyfile(os.path.join(self.directory, name), os.path.join(image, name))
        reopened = FaultyStore(SqliteStore(image, durability="os"))
        try:
            assert model_of(reopened, self.wall).queues == model.queues, "the log and database on disk differ"
        finally:
            reopened.close()
            shutil.rmtree(image, ignore_errors=True)
        self.counts["crash images"] += 1

    def check_moves(self, model: ModelQueues) -> None:
        """Each queue's size, from the moves counted: enqueued - dequeued - dead-lettered (+ the dead
        letters of its queue for a dead-letter queue), up to an offset taken again after a commit that
        reached the disk but raised (its moves were made durable and rightly not counted)."""
        def accounted(queue: str) -> int:
            row = self.moves.get(queue, [0] * len(MOVES))
            size = row[ENQUEUED] - row[DEQUEUED] - row[DEAD_LETTERED]
            if queue.endswith(DEAD_SUFFIX):
                size += self.moves.get(queue[: -len(DEAD_SUFFIX)], [0] * len(MOVES))[DEAD_LETTERED]
            return size

        names = set(model.queues) | set(self.moves) | {name + DEAD_SUFFIX for name in self.moves}
        sizes = {name: len(model.queues.get(name, {})) - accounted(name) for name in names}
        unknown = self.store.injected[Stage.AFTER_COMMIT]
        if unknown != self.unknown_commits:
            self.unknown_commits = unknown
            self.size_offsets = sizes
            return
        for name in names:
            assert sizes[name] == self.size_offsets.get(name, 0), (
                f"{name}: {len(model.queues.get(name, {}))} tasks stored, the moves counted account for "
                f"{accounted(name) + self.size_offsets.get(name, 0)}"
            )

    def check_accounted_for(self) -> None:
        """Every request of an open connection is answered once, or still pending, deferred or parked."""
        pending = collections.Counter((id(c), self.item_id(item)) for c, item in self.passes.pending)
        parked = collections.Counter((id(w.connection), w.request_id) for w in self.passes.long_polls.waiters.everyone())
        for connection in self.connections:
            deferred = collections.Counter((id(connection), self.item_id(item)) for item in connection.deferred)
            for request_id in connection.sent:
                key = (id(connection), request_id)
                places = (request_id in connection.answered) + pending[key] + deferred[key] + parked[key]
                assert places == 1, f"{connection.peer}'s request {request_id} is in {places} places"

    @staticmethod
    def item_id(item: Item) -> int:
        if isinstance(item, bytes):
            return decode_reply(FrameReader(MAX_FRAME).feed(item)[0]).id
        return item.id

    def drain(self) -> None:
        """Faults cleared, outputs resumed, clocks past every wait: every request must be answered once."""
        self.store.clear()
        self.outage_passes = 0
        self.monotonic += 3_600.0
        for connection in self.connections:
            connection.write_paused = False
            self.resubmit_deferred(connection)
        for _ in range(1_000):
            if not self.passes.pending and not any(c.deferred for c in self.connections):
                break
            self.run_pass()
        self.run_pass()  # a pass that finds nothing to do still answers the long-polls past their deadline
        for connection, frames in self.passes.end_every_wait().items():
            self.deliver(connection, frames, committed=True)  # type: ignore[arg-type]
        for connection in self.connections:
            unanswered = sorted(set(connection.sent) - set(connection.answered))
            assert not unanswered, f"{connection.peer} never had an answer to {unanswered[:10]}"


def enqueued_by(request: m.Request | None) -> list[m.TaskIn]:
    """The tasks a request enqueues (the simulation gives each one a pid of its own)."""
    if isinstance(request, m.Enqueue):
        return request.tasks
    if isinstance(request, m.Update):
        return request.enqueue
    return []


def model_of(store: FaultyStore, now: float) -> ModelQueues:
    """The reference model of what the store holds: every task, its lease and attempts."""
    model = ModelQueues(lambda: store)
    for summary in store.recover(now).queues:
        model.queues[summary.queue] = {
            task.pid: ModelTask(
                task.data,
                receiver=task.receiver,
                max_attempts=task.max_attempts,
                attempts=task.attempts,
                deliveries=task.deliveries,
                lease_id=task.lease_id,
                expires_at=task.lease_expires_at,
                dead_reason=(task.headers or {}).get(DEAD_REASON_HEADER),
                dead_pid=(task.headers or {}).get(DEAD_PID_HEADER),
                waiting_on=task.waiting_on,
                children=task.children,
            )
            for task in store.scan(summary.queue, None, 1_000_000)
        }
    return model


def run(seed: int, passes: int, store_kind: str) -> collections.Counter[str]:
    simulation = PassSimulation(seed, store_kind)
    try:
        for index in range(passes + 1):
            try:
                if index < passes:
                    simulation.step()
                else:
                    simulation.drain()
            except Exception as exc:
                trace = "\n".join(simulation.trace)
                raise AssertionError(
                    f"pass simulation failed at step {index} with {type(exc).__name__}: {exc}\n"
                    f"replay: KITTIWAKE_PASS_SEED={seed} KITTIWAKE_PASS_STEPS={index} "
                    f"pytest tests/broker/test_pass_simulation.py -k {store_kind}\nlast steps:\n{trace}"
                ) from exc
        return simulation.counts
    finally:
        simulation.close()


def seeds(count: int, offset: int = 0) -> list[int]:
    if "KITTIWAKE_PASS_SEED" in os.environ:
        return [int(os.environ["KITTIWAKE_PASS_SEED"])]
    return list(range(offset + 1, offset + count + 1))


def steps(default: int) -> int:
    return int(os.environ.get("KITTIWAKE_PASS_STEPS", default))


@pytest.mark.parametrize("seed", seeds(SEEDS))
def test_pass_simulation_memory(seed: int) -> None:
    counts = run(seed, steps(PASSES), "memory")
    assert counts["committed"] and counts["lease"]


@pytest.mark.parametrize("seed", seeds(SQLITE_SEEDS, offset=100))
def test_pass_simulation_sqlite(seed: int) -> None:
    counts = run(seed, steps(PASSES), "sqlite")
    assert counts["committed"] and counts["lease"]


@pytest.mark.parametrize("seed", seeds(LOG_SEEDS, offset=200))
def test_pass_simulation_sqlite_behind_the_commit_log(seed: int) -> None:
    counts = run(seed, steps(PASSES), "sqlite+log")
    assert counts["committed"] and counts["lease"] and counts["crash images"]


def test_the_simulation_meets_every_kind_of_pass() -> None:
    """Over the normal suite's seeds, passes fail and recover, long-polls park, outputs back up."""
    totals: collections.Counter[str] = collections.Counter()
    for seed in seeds(4):
        simulation = PassSimulation(seed, "memory")
        try:
            for _ in range(PASSES):
                simulation.step()
            totals.update(simulation.counts)
            totals["bugs"] += simulation.passes.bugs
            totals["injected"] += sum(simulation.store.injected.values())
            totals["rebuilds"] += simulation.passes.health.rebuilds
        finally:
            simulation.close()
    assert totals["failed"] and totals["committed"] and totals["bugs"] and totals["rebuilds"], totals
    assert totals["cancel_wait"] and totals[DECODE_ERROR], totals


@pytest.mark.soak
@pytest.mark.timeout(3600)
@pytest.mark.parametrize("store_kind", ["memory", "sqlite", "sqlite+log"])
def test_pass_simulation_soak(store_kind: str) -> None:
    for seed in seeds(SOAK_SEEDS, offset=1_000_000):
        run(seed, steps(SOAK_PASSES), store_kind)


def test_a_failure_names_its_seed(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken_check(self: PassSimulation) -> None:
        raise AssertionError("invariant broken")

    monkeypatch.setattr(PassSimulation, "check", broken_check)
    with pytest.raises(AssertionError) as caught:
        run(4242, 5, "memory")
    assert "KITTIWAKE_PASS_SEED=4242" in str(caught.value)

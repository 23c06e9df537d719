"""Crash tests: SIGKILL a real broker under load, restart it, and prove nothing acknowledged was lost.

The crash loop: three producers enqueue unique values (the value is the
data, and the pid too except for a share of tasks left to the broker's FIFO
pids) into two queues of one consistency group, alone and in batches; three consumers lease with a short lease, record each delivery, then
dequeue — or, for some tasks, atomically dequeue and enqueue a derived value
into a third queue in one update. Now and then a consumer stalls past its
lease, so another may take the tasks and the late finish must be fenced off.
The main thread SIGKILLs the broker at random moments and restarts it on the
same data directory. Clients see `ConnectionLost` (outcome unknown) or
`BrokerUnreachable` (not sent) while it is down and carry on. At the end
every queue is drained and the queue checker (`support/checker.py`)
classifies every value: lost and unexpected must be zero; duplicates are
counted and must each be explained by a restart or an expired lease.

The seed is printed first; set KITTIWAKE_CRASH_SEED to replay a schedule
(thread interleavings still vary, the kill times and choices do not).

The suite runs the loop with 20 kills; the soak (``--soak``) runs it with
1,000 (KITTIWAKE_SOAK_KILLS sets another count). Over so many cycles an
unbounded backlog would make every restart slower (recovery reads the queues
back), so in the soak producers wait while about `SOAK_BACKLOG` tasks are
queued: the broker restarts in the same time at the last kill as at the
first, and the report says how long restarts took.

The second test kills the broker while one enqueue of 5,000 tasks is in
flight: one request is one engine call and one commit, so after the restart
either none or all 5,000 are there.

Both run again with the broker writing through the commit log
(`store.commit_log`), checkpointing every 50 ms: kills then land in appends,
checkpoints and log truncations, and every restart replays a log.
"""

from __future__ import annotations

import itertools
import os
import random
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import pytest

from kittiwake import errors
from kittiwake.client import Client, LeasedTask
from kittiwake.model import FIFO_PID_DIGITS
from support.broker_process import BrokerProcess
from support.checker import DELIVER, DEQUEUE, ENQUEUE, History, Operation, check

GROUP = "crash"
QUEUE_A = f"{GROUP}#a"  # producers; some of its tasks are finished by an update into C
QUEUE_B = f"{GROUP}#b"  # producers
QUEUE_C = f"{GROUP}#c"  # derived values, enqueued by consumers' updates
QUEUES = [QUEUE_A, QUEUE_B, QUEUE_C]
DERIVED_SUFFIX = ".u"

COMMIT_LOG_ARGS = ["--commit-log", "on", "--checkpoint-secs", "0.05"]
PRODUCERS = 3
CONSUMERS = 3
CRASHES = 20
SOAK_KILLS = 1000
SOAK_BACKLOG = 5000  # tasks queued before producers wait (an estimate, re-read from the broker each cycle)
SOAK_PROGRESS_EVERY = 100  # kills between progress lines
LOAD_SECS = (0.1, 0.5)  # load between a restart and the next kill: hundreds of enqueues acknowledged per cycle
LEASE_SECS = 2.0  # short, so tasks held at a kill come back soon
LEASE_WAIT_SECS = 0.2
UPDATE_SHARE = 0.3  # tasks of queue A finished by dequeue-and-enqueue-derived
STALL_SHARE = 0.003  # leases a consumer holds past their expiry before finishing (fencing at work)
STALL_LEASE_SECS = 0.5
STALL_SECS = 0.8
BATCH_SHARE = 0.3  # enqueues sent as enqueue_many
FIFO_SHARE = 0.2  # single enqueues that let the broker pick a FIFO pid
MAX_BATCH = 25
ERROR_PAUSE_SECS = (0.02, 0.1)
CONNECT_TIMEOUT_SECS = 2.0
REQUEST_TIMEOUT_SECS = 10.0
MIN_ACKNOWLEDGED = 2000
DRAIN_DEADLINE_SECS = 30.0

# Outcome of a request that raised: the broker may have applied it (unknown)
# or certainly did not (fail). BrokerUnreachable means nothing was sent.
UNKNOWN_ERRORS = (errors.ConnectionLost, errors.RequestTimeout)


def crash_seed() -> int:
    text = os.environ.get("KITTIWAKE_CRASH_SEED")
    return int(text) if text else 20240611


@dataclass
class Load:
    """What the load threads share: the history, the broker, the stop flag, and their own mistakes."""

    history: History
    broker: BrokerProcess
    stop: threading.Event = field(default_factory=threading.Event)
    counter: itertools.count = field(default_factory=lambda: itertools.count(1))
    corrupt: list[str] = field(default_factory=list)  # a task whose pid does not fit its data
    crashed: list[BaseException] = field(default_factory=list)  # a load thread died of a bug
    backlog_limit: int | None = None  # producers wait while about this many tasks are queued
    backlog: int = 0  # estimate: acknowledged enqueues minus acknowledged dequeues, re-read each cycle
    backlog_lock: threading.Lock = field(default_factory=threading.Lock)

    def next_value(self, producer: int) -> str:
        # zero-padded counter first: pids sort in roughly the order they were made
        return f"{next(self.counter):08d}.p{producer}"

    def count(self, delta: int) -> None:
        if self.backlog_limit is not None:
            with self.backlog_lock:
                self.backlog += delta

    def wait_for_room(self) -> None:
        while self.backlog_limit is not None and self.backlog > self.backlog_limit and not self.stop.is_set():
            time.sleep(0.01)


class FollowingClient:
    """A thread's client, made anew when a restart moved the broker to another port."""

    def __init__(self, broker: BrokerProcess) -> None:
        self.broker = broker
        self.client: Client | None = None

    def get(self) -> Client:
        url = self.broker.url
        if self.client is None or self.client.url != url:
            if self.client is not None:
                self.client.close()
            self.client = Client(url, connect_timeout=CONNECT_TIMEOUT_SECS, timeout=REQUEST_TIMEOUT_SECS)
        return self.client

    def close(self) -> None:
        if self.client is not None:
            self.client.close()


def record_failure(history: History, ops: list[Operation], exc: errors.KittiwakeError) -> None:
    for op in ops:
        if isinstance(exc, UNKNOWN_ERRORS):
            history.unknown(op, exc.code)
        else:
            history.fail(op, exc.code)


def pause(rng: random.Random) -> None:
    time.sleep(rng.uniform(*ERROR_PAUSE_SECS))


def produce(load: Load, index: int, seed: int) -> None:
    rng = random.Random(seed)
    history = load.history
    process = f"producer-{index}"
    clients = FollowingClient(load.broker)
    try:
        while not load.stop.is_set():
            load.wait_for_room()
            client = clients.get()
            queue = rng.choice((QUEUE_A, QUEUE_B))
            if rng.random() < BATCH_SHARE:
                values = [load.next_value(index) for _ in range(rng.randint(2, MAX_BATCH))]
                op = history.invoke(process, ENQUEUE, values)
                try:
                    client.enqueue_many([{"queue": queue, "pid": v, "data": v.encode()} for v in values])
                except errors.KittiwakeError as exc:
                    record_failure(history, [op], exc)
                    pause(rng)
                    continue
            else:
                value = load.next_value(index)
                pid = None if rng.random() < FIFO_SHARE else value
                op = history.invoke(process, ENQUEUE, [value])
                try:
                    client.enqueue(queue, value.encode(), pid=pid)
                except errors.KittiwakeError as exc:
                    record_failure(history, [op], exc)
                    pause(rng)
                    continue
            history.ok(op)
            load.count(len(op.values))
    finally:
        clients.close()


def consume(load: Load, index: int, seed: int) -> None:
    rng = random.Random(seed)
    history = load.history
    process = f"consumer-{index}"
    clients = FollowingClient(load.broker)
    try:
        while not load.stop.is_set():
            client = clients.get()
            stall = rng.random() < STALL_SHARE
            op = history.invoke(process, DELIVER)
            try:
                tasks = client.lease(
                    QUEUES,
                    max_tasks=rng.randint(1, 10),
                    lease_secs=STALL_LEASE_SECS if stall else LEASE_SECS,
                    wait_secs=LEASE_WAIT_SECS,
                )
            except errors.KittiwakeError as exc:
                record_failure(history, [op], exc)
                pause(rng)
                continue
            history.ok(op, [value_of(t) for t in tasks], expires_at={value_of(t): t.expires_at for t in tasks})
            load.corrupt.extend(misfits(tasks))
            if stall:
                time.sleep(STALL_SECS)  # another consumer may take them; our late finish must be fenced
            plain = []
            for task in tasks:
                if task.queue == QUEUE_A and rng.random() < UPDATE_SHARE:
                    finish_by_update(load, clients, process, task, rng)
                else:
                    plain.append(task)
            if plain:
                finish_by_dequeue(load, clients, process, plain, rng)
    finally:
        clients.close()


def finish_by_dequeue(
    load: Load, clients: FollowingClient, process: str, tasks: list[LeasedTask], rng: random.Random
) -> None:
    """Dequeue a batch; retry what came back unknown (a dequeue is safe to repeat: the
    lease id fences it) until each item has a definite answer or the broker is gone."""
    history = load.history
    values = {(task.queue, task.pid): value_of(task) for task in tasks}
    for _ in range(3):
        op = history.invoke(process, DEQUEUE, list(values.values()))
        try:
            outcomes = clients.get().dequeue(tasks)
        except errors.KittiwakeError as exc:
            record_failure(history, [op], exc)
            if not isinstance(exc, UNKNOWN_ERRORS):
                return
            pause(rng)
            continue
        history.ok(op, [values[outcome.queue, outcome.pid] for outcome in outcomes if outcome.ok])
        load.count(-len(op.ok_values))
        return


def finish_by_update(
    load: Load, clients: FollowingClient, process: str, task: LeasedTask, rng: random.Random
) -> None:
    """Dequeue a task of A and enqueue its derived value into C, atomically; both sides recorded."""
    history = load.history
    value = value_of(task)
    derived = value + DERIVED_SUFFIX
    dequeue_op = history.invoke(process, DEQUEUE, [value])
    enqueue_op = history.invoke(process, ENQUEUE, [derived])
    try:
        clients.get().update(
            dequeue=[task],
            enqueue=[{"queue": QUEUE_C, "pid": derived, "data": derived.encode()}],
        )
    except errors.KittiwakeError as exc:
        record_failure(history, [dequeue_op, enqueue_op], exc)
        pause(rng)
        return
    history.ok(dequeue_op)
    history.ok(enqueue_op)


def guarded(load: Load, target, *args) -> None:
    try:
        target(load, *args)
    except BaseException as exc:  # a bug in the test or the client: fail the test, loudly
        load.crashed.append(exc)
        load.stop.set()
        raise


def value_of(task: LeasedTask) -> str:
    return task.data.decode()


def misfits(tasks: list[LeasedTask]) -> list[str]:
    """Tasks whose pid is neither their value nor a FIFO pid: a mix-up of rows."""
    return [
        f"{task.queue}/{task.pid}: data {task.data[:40]!r}"
        for task in tasks
        if task.pid != value_of(task) and not (len(task.pid) == FIFO_PID_DIGITS and task.pid.isdigit())
    ]


def error_counts(history: History) -> str:
    """How the operations that did not succeed ended, by kind, outcome and error code."""
    counts = Counter(
        f"{op.kind} {op.status} {op.error}" for op in history.operations if op.status not in ("ok", "invoke")
    )
    return ", ".join(f"{key}: {n}" for key, n in sorted(counts.items())) or "none"


def drain(url: str, deadline_secs: float) -> tuple[list[str], list[str]]:
    """Lease and dequeue every task of the group until no queue holds one; (values, corrupt)."""
    values: list[str] = []
    corrupt: list[str] = []
    deadline = time.monotonic() + deadline_secs
    with Client(url, connect_timeout=10.0, timeout=30.0) as client:
        while True:
            queues = [info.queue for info in client.list_queues(pattern=f"^{GROUP}#")]
            if not queues:
                return values, corrupt
            if time.monotonic() > deadline:
                raise AssertionError(f"drain did not finish within {deadline_secs}s: {client.list_queues()}")
            # a long lease: nothing taken here may come back; the wait covers
            # leases held at the last kill until they expire
            tasks = client.lease(queues, max_tasks=1000, lease_secs=300.0, wait_secs=1.0)
            corrupt.extend(misfits(tasks))
            if tasks:
                outcomes = client.dequeue(tasks)
                failed = [outcome for outcome in outcomes if not outcome.ok]
                assert not failed, f"drain could not dequeue: {failed[:5]}"
                values.extend(value_of(task) for task in tasks)


def soak_kills() -> int:
    text = os.environ.get("KITTIWAKE_SOAK_KILLS")
    return int(text) if text else SOAK_KILLS


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))] if ordered else 0.0


def restart_figures(restart_secs: list[float]) -> str:
    """How long the broker took from SIGKILL to listening again (recovery included)."""
    return (
        f"restart p50={percentile(restart_secs, 0.5) * 1000:.0f} ms p99={percentile(restart_secs, 0.99) * 1000:.0f} ms "
        f"max={max(restart_secs, default=0.0) * 1000:.0f} ms"
    )


def sample_backlog(load: Load) -> None:
    """Re-read the backlog estimate from the broker (drift: enqueues and dequeues of unknown outcome)."""
    try:
        with Client(load.broker.url, connect_timeout=CONNECT_TIMEOUT_SECS, timeout=REQUEST_TIMEOUT_SECS) as client:
            size = sum(stats.size for stats in client.stats(QUEUES))
    except errors.KittiwakeError:
        return
    with load.backlog_lock:
        load.backlog = size


def start_load(load: Load, rng: random.Random) -> list[threading.Thread]:
    """The producer and consumer threads of a crash loop, started, each with its own seed."""
    threads = [
        threading.Thread(target=guarded, args=(load, produce, i, rng.randrange(2**32)), name=f"producer-{i}")
        for i in range(PRODUCERS)
    ] + [
        threading.Thread(target=guarded, args=(load, consume, i, rng.randrange(2**32)), name=f"consumer-{i}")
        for i in range(CONSUMERS)
    ]
    for thread in threads:
        thread.start()
    return threads


def run_crash_loop(broker: BrokerProcess, kills: int, *, backlog_limit: int | None = None, progress: bool = False) -> None:
    """The crash loop of the module docstring with `kills` SIGKILLs; asserts the queue checker's verdict."""
    seed = crash_seed()
    print(f"\ncrash loop seed={seed} kills={kills} (replay with KITTIWAKE_CRASH_SEED={seed})", flush=True)
    rng = random.Random(seed)
    started = time.monotonic()
    history = History()
    load = Load(history, broker, backlog_limit=backlog_limit)
    restart_secs: list[float] = []
    threads = start_load(load, rng)
    try:
        for cycle in range(kills):
            time.sleep(rng.uniform(*LOAD_SECS))
            if load.stop.is_set():
                break
            history.crash(f"SIGKILL {cycle + 1}")
            killed_at = time.monotonic()
            broker.kill()
            broker.restart()
            restart_secs.append(time.monotonic() - killed_at)
            if backlog_limit is not None:
                sample_backlog(load)
            if progress and (cycle + 1) % SOAK_PROGRESS_EVERY == 0:
                print(
                    f"  {cycle + 1} kills, {time.monotonic() - started:.0f} s, {len(history.operations)} operations, "
                    f"backlog ~{load.backlog}, {restart_figures(restart_secs)}",
                    flush=True,
                )
        time.sleep(rng.uniform(*LOAD_SECS))
    finally:
        load.stop.set()
        for thread in threads:
            thread.join(timeout=30.0)
    assert not load.crashed, f"a load thread died: {load.crashed[0]!r}"
    assert not any(thread.is_alive() for thread in threads), "a load thread did not stop"
    load_secs = time.monotonic() - started

    drained, corrupt = drain(broker.url, DRAIN_DEADLINE_SECS)
    result = check(history, drained)
    acknowledged_requests = sum(1 for op in history.operations if op.status == "ok")
    report = "\n".join([
        result.format(),
        f"  client errors: {error_counts(history)}",
        f"  acknowledged requests={acknowledged_requests} of {len(history.operations)}; {restart_figures(restart_secs)}",
        f"  seed={seed} crashes={len(history.crashes)} load={load_secs:.1f}s "
        f"total={time.monotonic() - started:.1f}s",
    ])
    print(report, flush=True)
    assert result.lost == [] and result.unexpected == [], report
    assert result.unexplained == [], report
    assert result.failed_present == [], report
    assert not load.corrupt and not corrupt, f"tasks whose pid does not fit their data: {(load.corrupt + corrupt)[:5]}"
    assert len(history.crashes) >= min(kills, 10), report
    assert result.acknowledged >= MIN_ACKNOWLEDGED, f"too few acknowledged enqueues to mean anything\n{report}"


@pytest.fixture
def logged_broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    """A broker writing through the commit log, checkpointing every 50 ms so that kills land in
    checkpoints and log truncations too."""
    process = BrokerProcess(tmp_path / "data", extra_args=COMMIT_LOG_ARGS)
    try:
        yield process
    finally:
        process.kill()


@pytest.mark.timeout(180)
def test_crash_loop_loses_nothing_acknowledged(broker: BrokerProcess) -> None:
    run_crash_loop(broker, CRASHES)


@pytest.mark.timeout(180)
def test_crash_loop_behind_the_commit_log_loses_nothing_acknowledged(logged_broker: BrokerProcess) -> None:
    run_crash_loop(logged_broker, CRASHES)


@pytest.mark.soak
@pytest.mark.timeout(4 * 3600)
def test_crash_soak_of_a_thousand_kills_loses_nothing_acknowledged(broker: BrokerProcess) -> None:
    run_crash_loop(broker, soak_kills(), backlog_limit=SOAK_BACKLOG, progress=True)


@pytest.mark.soak
@pytest.mark.timeout(4 * 3600)
def test_crash_soak_behind_the_commit_log(logged_broker: BrokerProcess) -> None:
    run_crash_loop(logged_broker, soak_kills(), backlog_limit=SOAK_BACKLOG, progress=True)


BIG_BATCH = 5000
BIG_BATCH_ROUNDS = 10
KILL_WINDOW = (0.0, 1.5)  # when to kill, as a share of an undisturbed request's time


@pytest.mark.timeout(180)
def test_kill_during_a_big_batch_enqueue_keeps_all_or_nothing(broker: BrokerProcess) -> None:
    kill_during_big_batches(broker)


@pytest.mark.timeout(180)
def test_kill_during_a_big_batch_enqueue_behind_the_commit_log(logged_broker: BrokerProcess) -> None:
    kill_during_big_batches(logged_broker)


def kill_during_big_batches(broker: BrokerProcess) -> None:
    seed = crash_seed()
    print(f"\nbig batch seed={seed} (replay with KITTIWAKE_CRASH_SEED={seed})")
    rng = random.Random(seed)
    lines: list[str] = []
    try:
        with Client(broker.url, timeout=60.0) as client:
            client.ping()
            # calibrate: how long does one such request take when nothing goes wrong?
            timings = []
            for attempt in range(3):
                begun = time.monotonic()
                client.enqueue_many(batch(f"calibrate{attempt}", 0))
                timings.append(time.monotonic() - begun)
            full_secs = min(timings)
            assert client.list_queues(pattern="^big#calibrate")[0].size == BIG_BATCH
        lines.append(f"one enqueue of {BIG_BATCH} tasks takes {full_secs * 1000:.0f} ms undisturbed")

        answers: list[str] = []
        for round_ in range(BIG_BATCH_ROUNDS):
            queue = f"round{round_}"
            connected = threading.Event()
            answer: list[str] = []
            sender = threading.Thread(target=send_batch, args=(broker.url, queue, round_, connected, answer))
            sender.start()
            assert connected.wait(10.0), "the sender could not connect"
            # the connection is up: kill somewhere in the request's send, apply, commit or reply
            time.sleep(rng.uniform(*KILL_WINDOW) * full_secs)
            broker.kill()
            broker.restart()
            sender.join(timeout=60.0)
            with Client(broker.url, timeout=60.0) as client:
                present = {view.pid for view in client.peek(f"big#{queue}", BIG_BATCH + 1)}
            outcome = answer[0] if answer else "no answer"
            answers.append(outcome)
            lines.append(f"round {round_}: client {outcome}, present after restart {len(present)}")
            assert present in (set(), set(batch_pids(round_))), (
                f"round {round_}: {len(present)} of {BIG_BATCH} tasks of one request survived the kill "
                f"(client said {outcome})"
            )
            if outcome == "ok":
                assert len(present) == BIG_BATCH, f"round {round_}: acknowledged, yet not all present"
        assert any(answer.startswith("unknown") for answer in answers), (
            "no kill landed inside a request; the test proved nothing"
        )
    finally:
        print("\n".join("  " + line for line in lines))


def send_batch(url: str, queue: str, round_: int, connected: threading.Event, answer: list[str]) -> None:
    with Client(url, connect_timeout=CONNECT_TIMEOUT_SECS, timeout=60.0) as client:
        try:
            client.ping()
        finally:
            connected.set()
        tasks = batch(queue, round_)
        try:
            client.enqueue_many(tasks)
            answer.append("ok")
        except UNKNOWN_ERRORS as exc:
            answer.append(f"unknown ({exc.code})")
        except errors.KittiwakeError as exc:
            answer.append(f"fail ({exc.code})")


def batch_pids(round_: int) -> list[str]:
    return [f"{round_}-{i:05d}" for i in range(BIG_BATCH)]


def batch(queue: str, round_: int) -> list[dict]:
    return [{"queue": f"big#{queue}", "pid": pid, "data": (pid * 8).encode()} for pid in batch_pids(round_)]

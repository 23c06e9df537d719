"""Producers and consumers over a cluster (`kw://a,b,c`), recorded for the queue checker, with the
gaps of each consumer and the availability of tasks on the live nodes.

One spread queue, `QUEUE`, takes a mix of tasks: FIFO (no pid: the node that takes the push issues
one, its residue naming that node) and keyed (pid = the value: routed to the owner of its slot).
A value is `f<n>.<producer>` or `k<n>.<producer>` and is the task's data.

* **Producers** (a thread and a `Client` each; `near=` their node) push one value at a time. An
  enqueue is acknowledged when it returns ok. A failed FIFO push is recorded (fail, or unknown
  for a cut connection or a timeout) and not tried again: a FIFO task has no pid, so a retry after
  an unknown outcome could enqueue it twice. A failed keyed push (its owner down: a transient
  error) is tried again by the producer `KEYED_RETRY_SECS` later, as callers retry today, while
  it goes on pushing new values; the pid collapses a repeat of a push that had been applied.
  Producers connect with a short budget (`PRODUCER_CONNECT_SECS`): a keyed push to a dead node
  fails after that long rather than the cluster client's default, so they keep pushing.
* **Consumers** (a thread and a `Client` each, `near=` their node) lease a few tasks, record the
  delivery, work on them (`work_secs` of their node: a sleep) and dequeue them; the wall-clock
  time of every lease that gave tasks is kept. Consumers slower than the producers leave a
  backlog on their nodes; a fast one empties its own node and steals from the others (where a
  dead node could hold it up).
* **The monitor** asks every node directly, every `MONITOR_SECS`, how many tasks of `QUEUE` it
  has available (`stats`); a node that does not answer counts as down.

`longest_stall` turns these into the property the cluster promises: the longest stretch, within
a gap between two leases of one consumer that gave tasks, during which the monitor saw tasks
available on a live node at every look. Counted that way, a slow machine (a thread not scheduled
for a while, every node briefly empty) does not fail the test, and a consumer that keeps asking a
dead node, or ignores a live node holding tasks, does.
"""

from __future__ import annotations

import itertools
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from kittiwake import Client, errors
from support.checker import DELIVER, DEQUEUE, ENQUEUE, FAIL, UNKNOWN, History, Operation

QUEUE = "work"
KEYED_SHARE = 0.5
KEYED_RETRY_SECS = 0.2
PRODUCER_CONNECT_SECS = 0.5  # a producer that would rather retry its keyed push than wait for the node
LEASE_SECS = 2.0  # short: tasks leased on the node when it dies come back soon after its restart
LEASE_WAIT_SECS = 0.2
MAX_LEASE = 8
MONITOR_SECS = 0.05
MONITOR_CONNECT_SECS = 0.05
REQUEST_TIMEOUT_SECS = 10.0
ERROR_PAUSE_SECS = 0.01

UNKNOWN_ERRORS = (errors.ConnectionLost, errors.RequestTimeout)


def outcome_of(exc: errors.KittiwakeError) -> str:
    """FAIL when the request surely did nothing (nothing sent, or refused), else UNKNOWN."""
    if isinstance(exc, UNKNOWN_ERRORS) or (isinstance(exc, errors.Unavailable) and "unknown" in exc.message):
        return UNKNOWN
    return FAIL


@dataclass
class Pushed:
    """An acknowledged FIFO push: its value, the pid the node issued and when it returned."""

    value: str
    pid: str
    at: float


@dataclass
class Sample:
    """What the monitor saw at `at`: available tasks of each node that answered (absent: down)."""

    at: float
    available: dict[str, int]

    @property
    def tasks_on_live_nodes(self) -> bool:
        return sum(self.available.values()) > 0


@dataclass
class KeyedFailure:
    value: str
    at: float
    error: str


@dataclass
class ClusterLoad:
    """The load's threads and what they recorded (module docstring)."""

    url: str
    nodes: dict[str, str]  # name -> kw:// of that node alone (for the monitor)
    max_values: int
    work_secs: dict[str, float] = field(default_factory=dict)  # near node -> a consumer's sleep per lease
    seed: int = 0
    history: History = field(default_factory=History)
    stop_producing: threading.Event = field(default_factory=threading.Event)
    stop_consuming: threading.Event = field(default_factory=threading.Event)
    fifo_pushed: list[Pushed] = field(default_factory=list)
    keyed_failures: list[KeyedFailure] = field(default_factory=list)
    keyed_unknown: set[str] = field(default_factory=set)  # keyed values with an enqueue of unknown outcome
    keyed_pending: set[str] = field(default_factory=set)  # keyed values not acknowledged yet
    leases_at: dict[str, list[float]] = field(default_factory=dict)  # consumer -> times of leases with tasks
    samples: list[Sample] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)
    crashed: list[BaseException] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._counter = itertools.count(1)
        self._lock = threading.Lock()
        self._producers: list[threading.Thread] = []
        self._consumers: list[threading.Thread] = []
        self._monitor = threading.Thread(target=self._watch, name="monitor", daemon=True)

    # ------------------------------------------------------------ running

    def start_producers(self) -> None:
        rng = random.Random(self.seed)
        self._monitor.start()
        for near in self.nodes:
            self._producers.append(self._spawn(self._produce, f"producer-{near}", near, rng.randrange(2**32),
                                               PRODUCER_CONNECT_SECS))

    def start_consumers(self) -> None:
        rng = random.Random(self.seed + 1)
        for near in self.nodes:
            self._consumers.append(self._spawn(self._consume, f"consumer-{near}", near, rng.randrange(2**32)))

    def finish_producing(self, deadline_secs: float = 30.0) -> None:
        """Stop new values; wait for the keyed retries to end (bounded) and the producers to stop."""
        self.stop_producing.set()
        for thread in self._producers:
            thread.join(timeout=deadline_secs)
        self._assert_healthy(self._producers)

    def finish(self) -> None:
        self.stop_producing.set()
        self.stop_consuming.set()
        for thread in [*self._producers, *self._consumers, self._monitor]:
            thread.join(timeout=30.0)
        self._assert_healthy([*self._producers, *self._consumers, self._monitor])

    def _assert_healthy(self, threads: Sequence[threading.Thread]) -> None:
        assert not self.crashed, f"a load thread died: {self.crashed[0]!r}"
        assert not any(thread.is_alive() for thread in threads), "a load thread did not stop"

    def _spawn(self, target: Callable[[str, random.Random, Client], None], name: str, near: str,
               seed: int, connect_secs: float = 2.0) -> threading.Thread:
        def run() -> None:
            try:
                with Client(self.url, near=near, connect_timeout=connect_secs, timeout=REQUEST_TIMEOUT_SECS) as client:
                    target(name, random.Random(seed), client)
            except BaseException as exc:  # a bug in the test or the client: fail the test, loudly
                self.crashed.append(exc)
                self.stop_producing.set()
                self.stop_consuming.set()
                raise

        thread = threading.Thread(target=run, name=name, daemon=True)
        thread.start()
        return thread

    def _record_failure(self, op: Operation, exc: errors.KittiwakeError) -> str:
        outcome = outcome_of(exc)
        with self._lock:
            self.errors[f"{op.kind} {outcome} {exc.code}"] += 1
        if outcome == UNKNOWN:
            self.history.unknown(op, exc.code)
        else:
            self.history.fail(op, exc.code)
        return outcome

    # ----------------------------------------------------------- producers

    def _produce(self, process: str, rng: random.Random, client: Client) -> None:
        retries: list[tuple[float, str]] = []  # (due, keyed value)
        produced = 0
        give_up = None
        while True:
            now = time.monotonic()
            if self.stop_producing.is_set():
                if not retries:
                    return
                give_up = give_up or now + 20.0
                assert now < give_up, f"{process}: keyed pushes still failing: {retries[:3]}"
            due = [item for item in retries if item[0] <= now]
            if due:
                retries.remove(due[0])
                value = due[0][1]
            elif self.stop_producing.is_set() or produced >= self.max_values:
                if not retries:
                    return
                time.sleep(KEYED_RETRY_SECS)
                continue
            else:
                keyed = rng.random() < KEYED_SHARE
                value = f"{'k' if keyed else 'f'}{next(self._counter):07d}.{process[-1]}"
                produced += 1
            keyed = value.startswith("k")
            if keyed:
                with self._lock:
                    self.keyed_pending.add(value)
            op = self.history.invoke(process, ENQUEUE, [value])
            try:
                [outcome] = client.enqueue_many([{"queue": QUEUE, "data": value.encode(),
                                                  **({"pid": value} if keyed else {})}])
            except errors.KittiwakeError as exc:
                result = self._record_failure(op, exc)
                if keyed:
                    with self._lock:
                        self.keyed_failures.append(KeyedFailure(value, time.time(), exc.code))
                        if result == UNKNOWN:
                            self.keyed_unknown.add(value)
                    retries.append((time.monotonic() + KEYED_RETRY_SECS, value))
                else:
                    time.sleep(ERROR_PAUSE_SECS)
                continue
            self.history.ok(op)
            with self._lock:
                if keyed:
                    self.keyed_pending.discard(value)
                else:
                    self.fifo_pushed.append(Pushed(value, outcome.pid, time.time()))

    # ----------------------------------------------------------- consumers

    def _consume(self, process: str, rng: random.Random, client: Client) -> None:
        history = self.history
        leases = self.leases_at.setdefault(process, [])
        work_secs = self.work_secs.get(process.rpartition("-")[2], 0.0)
        while not self.stop_consuming.is_set():
            op = history.invoke(process, DELIVER)
            try:
                tasks = client.lease(QUEUE, max_tasks=rng.randint(1, MAX_LEASE), lease_secs=LEASE_SECS,
                                     wait_secs=LEASE_WAIT_SECS)
            except errors.KittiwakeError as exc:
                self._record_failure(op, exc)
                time.sleep(ERROR_PAUSE_SECS)
                continue
            values = {(task.queue, task.pid): task.data.decode() for task in tasks}
            history.ok(op, list(values.values()),
                       expires_at={task.data.decode(): task.expires_at for task in tasks})
            if not tasks:
                continue
            leases.append(time.time())
            time.sleep(work_secs)
            op = history.invoke(process, DEQUEUE, list(values.values()))
            try:
                outcomes = client.dequeue(tasks)
            except errors.KittiwakeError as exc:
                self._record_failure(op, exc)
                continue
            history.ok(op, [values[item.queue, item.pid] for item in outcomes if item.ok])

    # ------------------------------------------------------------ monitor

    def _watch(self) -> None:
        clients = {name: Client(url, connect_timeout=MONITOR_CONNECT_SECS, timeout=1.0)
                   for name, url in self.nodes.items()}
        try:
            while not self.stop_consuming.is_set():
                available: dict[str, int] = {}
                for name, client in clients.items():
                    try:
                        available[name] = sum(row.available for row in client.stats([QUEUE]))
                    except errors.KittiwakeError:
                        pass
                self.samples.append(Sample(time.time(), available))
                time.sleep(MONITOR_SECS)
        finally:
            for client in clients.values():
                client.close()

    # ------------------------------------------------------------ judging

    def longest_stall(self, consumer: str, start: float, end: float,
                      excluded: Sequence[tuple[float, float]] = ()) -> float:
        """The longest stretch within `start`..`end` between two leases of `consumer` that gave tasks
        during which every monitor sample saw tasks available on a live node (module docstring); gaps
        that overlap an `excluded` window (its own node down) are not counted."""
        times = [start, *(at for at in self.leases_at.get(consumer, []) if start < at < end), end]
        longest = 0.0
        samples = self.samples
        for before, after in zip(times, times[1:]):
            if any(low < after and before < high for low, high in excluded):
                continue
            run_start: float | None = None
            for sample in samples:
                if not before <= sample.at <= after:
                    continue
                if sample.tasks_on_live_nodes:
                    run_start = sample.at if run_start is None else run_start
                    longest = max(longest, sample.at - run_start)
                else:
                    run_start = None
        return longest


def drain(url: str, deadline_secs: float = 30.0) -> list[str]:
    """Lease and dequeue every task of `QUEUE` on every node until none is left; their values."""
    values: list[str] = []
    deadline = time.monotonic() + deadline_secs
    with Client(url, connect_timeout=5.0, timeout=30.0) as client:
        while True:
            left = sum(row.size for row in client.stats([QUEUE]))
            if not left:
                return values
            assert time.monotonic() < deadline, f"drain did not finish within {deadline_secs} s: {left} left"
            tasks = client.lease(QUEUE, max_tasks=1000, lease_secs=300.0, wait_secs=0.5)
            if tasks:
                failed = [outcome for outcome in client.dequeue(tasks) if not outcome.ok]
                assert not failed, f"drain could not dequeue: {failed[:5]}"
                values.extend(task.data.decode() for task in tasks)

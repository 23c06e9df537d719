"""A client workload for fault tests, recorded for the queue checker, with checks that nothing is half-applied.

`QueueLoad` runs producer and consumer threads against one broker URL (or
several brokers sharing a store, the threads taking the URLs in turn):
producers enqueue unique values (the value is the pid and the data) into two
queues of one consistency group, alone or in batches (`enqueue_many`, one
request); consumers lease from all three queues, then dequeue, except that a
fixed share of the values of queue A (chosen by the value itself, so every
delivery of it does the same) is finished by one atomic `update` that
dequeues it and enqueues a derived value into queue C. Consumers also peek
now and then, a read that goes to the store whatever is in memory. Every
operation but the peeks is recorded in a `support.checker.History`.

How a failed request is recorded is the heart of a fault test. A lost
connection or a timeout is *unknown*. An `UNAVAILABLE` reply is what the
broker says it is: *fail* when its message says the change was not applied,
*unknown* when it says the outcome is unknown (a commit that failed with an
I/O error); a test may override this with `unavailable`. The checker then
holds the broker to its word: a value whose enqueue was refused as "not
applied" must never show up (`failed_present`).

Besides the checker's verdict (`lost`, `unexpected`...), `verify` checks
atomicity, since a fault in the middle of a request must not leave half of
it: each `enqueue_many` batch shows up whole or not at all, and each update
either removed its value *and* made its derived value, or neither.
"""

from __future__ import annotations

import itertools
import random
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Iterable

from kittiwake import errors
from kittiwake.broker.pass_replies import NOT_APPLIED, OUTCOME_UNKNOWN
from kittiwake.client import Client, LeasedTask
from support.checker import DELIVER, DEQUEUE, ENQUEUE, FAIL, UNKNOWN, History, Operation, Result, check

GROUP = "faults"
QUEUE_A = f"{GROUP}#a"  # producers; a share of its values is finished by an update into C
QUEUE_B = f"{GROUP}#b"  # producers
QUEUE_C = f"{GROUP}#c"  # derived values, made by updates
QUEUES = (QUEUE_A, QUEUE_B, QUEUE_C)
DERIVED_SUFFIX = ".u"
UPDATE_EVERY = 3  # values of A whose number is a multiple of this are finished by an update

BATCH_SHARE = 0.3
MAX_BATCH = 20
PEEK_SHARE = 0.2  # consumer rounds that start with a peek
LEASE_SECS = 1.0  # short, so tasks held when a dequeue fails come back soon
LEASE_WAIT_SECS = 0.1
ERROR_PAUSE_SECS = (0.01, 0.03)
DEQUEUE_TRIES = 3
REQUEST_TIMEOUT_SECS = 10.0

UNKNOWN_ERRORS = (errors.ConnectionLost, errors.RequestTimeout)


def outcome_of_unavailable(error: errors.KittiwakeError) -> str:
    """What the broker says an UNAVAILABLE reply means: FAIL (not applied) or UNKNOWN."""
    if OUTCOME_UNKNOWN in error.message:
        return UNKNOWN
    assert NOT_APPLIED in error.message, f"an UNAVAILABLE reply that says neither: {error.message!r}"
    return FAIL


def value_of(task: LeasedTask) -> str:
    return task.data.decode()


def finished_by_update(value: str) -> bool:
    return not value.endswith(DERIVED_SUFFIX) and int(value.split(".")[0]) % UPDATE_EVERY == 0


@dataclass
class Verdict:
    """The checker's result plus the atomicity checks; `ok` when the run is valid on every count."""

    result: Result
    broken_batches: list[str] = field(default_factory=list)
    broken_updates: list[str] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)

    @property
    def ok(self) -> bool:
        result = self.result
        return (
            result.valid
            and not result.failed_present
            and not result.unexplained
            and not self.broken_batches
            and not self.broken_updates
        )

    def format(self) -> str:
        lines = [self.result.format()]
        if self.broken_batches:
            lines.append(f"  batches partly applied: {self.broken_batches[:5]}")
        if self.broken_updates:
            lines.append(f"  updates partly applied: {self.broken_updates[:5]}")
        lines.append("  client errors: " + (", ".join(f"{k}: {n}" for k, n in sorted(self.errors.items())) or "none"))
        return "\n".join(lines)


class QueueLoad:
    """Producers and consumers against `url`; see the module docstring."""

    def __init__(
        self,
        url: str | list[str],
        *,
        seed: int,
        producers: int = 2,
        consumers: int = 2,
        unavailable: Callable[[errors.KittiwakeError], str] = outcome_of_unavailable,
    ) -> None:
        self.urls = [url] if isinstance(url, str) else list(url)  # threads take them in turn
        self.seed = seed
        self.producers = producers
        self.consumers = consumers
        self.unavailable = unavailable
        self.history = History()
        self.stop = threading.Event()
        self.batches: list[tuple[str, ...]] = []
        self.queue_of: dict[str, str] = {}  # value -> the queue its producer put it in
        self.errors: Counter[str] = Counter()
        self.crashed: list[BaseException] = []
        self._counter = itertools.count(1)
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []

    # ------------------------------------------------------------ running

    def start(self) -> None:
        rng = random.Random(self.seed)
        urls = self.urls
        for index in range(self.producers):
            self._spawn(self._produce, f"producer-{index}", rng.randrange(2**32), urls[index % len(urls)])
        for index in range(self.consumers):
            self._spawn(self._consume, f"consumer-{index}", rng.randrange(2**32), urls[(index + 1) % len(urls)])

    def finish(self) -> None:
        self.stop.set()
        for thread in self._threads:
            thread.join(timeout=30.0)
        assert not self.crashed, f"a load thread died: {self.crashed[0]!r}"
        assert not any(thread.is_alive() for thread in self._threads), "a load thread did not stop"

    def _spawn(self, target: Callable[[str, random.Random, Client], None], name: str, seed: int, url: str) -> None:
        def run() -> None:
            try:
                with Client(url, connect_timeout=2.0, timeout=REQUEST_TIMEOUT_SECS) as client:
                    target(name, random.Random(seed), client)
            except BaseException as exc:  # a bug in the test or the client: fail the test, loudly
                self.crashed.append(exc)
                self.stop.set()
                raise

        thread = threading.Thread(target=run, name=name, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _record_failure(self, ops: Iterable[Operation], exc: errors.KittiwakeError) -> str:
        if isinstance(exc, errors.Unavailable):
            outcome = self.unavailable(exc)
        elif isinstance(exc, UNKNOWN_ERRORS):
            outcome = UNKNOWN
        else:
            outcome = FAIL
        ops = list(ops)
        with self._lock:
            self.errors[f"{ops[0].kind} {outcome} {exc.code}"] += 1
        for op in ops:
            if outcome == UNKNOWN:
                self.history.unknown(op, exc.code)
            else:
                self.history.fail(op, exc.code)
        return outcome

    def _next_value(self, producer: str) -> str:
        return f"{next(self._counter):08d}.{producer[-1]}"

    def _produce(self, process: str, rng: random.Random, client: Client) -> None:
        history = self.history
        while not self.stop.is_set():
            queue = rng.choice((QUEUE_A, QUEUE_B))
            count = rng.randint(2, MAX_BATCH) if rng.random() < BATCH_SHARE else 1
            values = [self._next_value(process) for _ in range(count)]
            with self._lock:
                self.queue_of.update(dict.fromkeys(values, queue))
            op = history.invoke(process, ENQUEUE, values)
            try:
                if count == 1:
                    client.enqueue(queue, values[0].encode(), pid=values[0])
                else:
                    with self._lock:
                        self.batches.append(tuple(values))
                    client.enqueue_many([{"queue": queue, "pid": v, "data": v.encode()} for v in values])
            except errors.KittiwakeError as exc:
                self._record_failure([op], exc)
                time.sleep(rng.uniform(*ERROR_PAUSE_SECS))
                continue
            history.ok(op)

    def _consume(self, process: str, rng: random.Random, client: Client) -> None:
        history = self.history
        while not self.stop.is_set():
            if rng.random() < PEEK_SHARE:
                try:
                    client.peek(rng.choice(QUEUES), 5)
                except errors.KittiwakeError as exc:
                    with self._lock:
                        self.errors[f"peek {exc.code}"] += 1
            op = history.invoke(process, DELIVER)
            try:
                tasks = client.lease(list(QUEUES), max_tasks=rng.randint(1, 10), lease_secs=LEASE_SECS,
                                     wait_secs=LEASE_WAIT_SECS)
            except errors.KittiwakeError as exc:
                self._record_failure([op], exc)
                time.sleep(rng.uniform(*ERROR_PAUSE_SECS))
                continue
            history.ok(op, [value_of(t) for t in tasks], expires_at={value_of(t): t.expires_at for t in tasks})
            plain = []
            for task in tasks:
                if task.queue == QUEUE_A and finished_by_update(value_of(task)):
                    self._update(process, task, client)
                else:
                    plain.append(task)
            if plain:
                self._dequeue(process, plain, rng, client)

    def _dequeue(self, process: str, tasks: list[LeasedTask], rng: random.Random, client: Client) -> None:
        """Dequeue a batch; try again after a failure (the lease id fences a repeat)."""
        values = {(task.queue, task.pid): value_of(task) for task in tasks}
        for _ in range(DEQUEUE_TRIES):
            op = self.history.invoke(process, DEQUEUE, list(values.values()))
            try:
                outcomes = client.dequeue(tasks)
            except errors.KittiwakeError as exc:
                self._record_failure([op], exc)
                time.sleep(rng.uniform(*ERROR_PAUSE_SECS))
                continue
            self.history.ok(op, [values[o.queue, o.pid] for o in outcomes if o.ok])
            return

    def _update(self, process: str, task: LeasedTask, client: Client) -> None:
        value = value_of(task)
        derived = value + DERIVED_SUFFIX
        dequeue_op = self.history.invoke(process, DEQUEUE, [value])
        enqueue_op = self.history.invoke(process, ENQUEUE, [derived])
        try:
            client.update(dequeue=[task], enqueue=[{"queue": QUEUE_C, "pid": derived, "data": derived.encode()}])
        except errors.KittiwakeError as exc:
            self._record_failure([dequeue_op, enqueue_op], exc)
            return
        self.history.ok(dequeue_op)
        self.history.ok(enqueue_op)

    # ----------------------------------------------------------- checking

    def verify(self, drained: list[str]) -> Verdict:
        """The checker's verdict on the history and the values drained at the end, plus atomicity."""
        result = check(self.history, drained)
        operations, _ = self.history.snapshot()
        delivered = {value for op in operations if op.kind == DELIVER for value in op.ok_values}
        present = set(drained)
        seen = delivered | present
        verdict = Verdict(result, errors=self.errors)
        for batch in self.batches:
            shown = sum(value in seen for value in batch)
            if shown not in (0, len(batch)):
                verdict.broken_batches.append(f"{shown} of {len(batch)} from {batch[0]}")
        for value, queue in sorted(self.queue_of.items()):
            if queue != QUEUE_A or not finished_by_update(value) or value not in seen:
                continue
            # only an update ever removes this value, and the same update makes the derived one
            removed = value not in present
            made = value + DERIVED_SUFFIX in seen
            if removed != made:
                what = "removed without its derived value" if removed else "derived value made, original still there"
                verdict.broken_updates.append(f"{value}: {what}")
        return verdict


def hung_or_cut(counts: Counter[str]) -> list[str]:
    """The client errors of a verdict that say the broker hung (a timeout) or dropped a connection."""
    return [key for key in counts if key.endswith((errors.RequestTimeout.code, errors.ConnectionLost.code))]


def drain(url: str, deadline_secs: float = 30.0) -> list[str]:
    """Lease and dequeue every task of the load's queues until none is left; their values."""
    values: list[str] = []
    deadline = time.monotonic() + deadline_secs
    with Client(url, connect_timeout=10.0, timeout=30.0) as client:
        while True:
            left = [info for info in client.list_queues() if info.queue in QUEUES]
            if not left:
                return values
            if time.monotonic() > deadline:
                raise AssertionError(f"drain did not finish within {deadline_secs} s: {left}")
            # a long lease: nothing taken here may come back; the wait covers the load's leases
            tasks = client.lease(list(QUEUES), max_tasks=1000, lease_secs=300.0, wait_secs=1.0)
            if tasks:
                failed = [outcome for outcome in client.dequeue(tasks) if not outcome.ok]
                assert not failed, f"drain could not dequeue: {failed[:5]}"
                values.extend(value_of(task) for task in tasks)


def wait_until_serving(url: str, deadline_secs: float = 10.0) -> float:
    """Enqueue a probe until it succeeds; the seconds it took. Fails past the deadline."""
    started = time.monotonic()
    last: Exception | None = None
    with Client(url, connect_timeout=2.0, timeout=5.0) as client:
        for attempt in itertools.count():
            if time.monotonic() - started > deadline_secs:
                break
            try:
                client.enqueue(f"{GROUP}-probe", b"probe", pid=f"probe-{time.time_ns()}-{attempt}")
                return time.monotonic() - started
            except errors.KittiwakeError as exc:
                last = exc
                time.sleep(0.05)
    raise AssertionError(f"the broker did not serve again within {deadline_secs} s: {last}")

"""The queue checker: record what clients did, then judge the run (the shape of Jepsen's total-queue checker).

A test records every client operation in a `History` as it happens: the
invocation, then exactly one completion — ok, fail (the broker definitely did
not apply it) or unknown (timeout, connection cut: it may or may not have been
applied). Three kinds of operation matter to a queue:

* ``enqueue`` of values (one or a batch, or the enqueue side of an update);
* ``deliver``: a lease that handed values to a consumer (its ok lists them,
  with their lease expiry);
* ``dequeue`` of values: the consumer acknowledging them (or the dequeue side
  of an update). A dequeue may succeed for some items and fail for others.

Crashes of the broker are recorded too (`History.crash`), so that a value
delivered twice can be explained.

After the run the test drains every queue and calls `check(history, drained)`
with the values still present. Each value is classified the way Jepsen's
total-queue checker does it, adapted to leases (a delivery does not remove a
task; an acknowledged dequeue does):

* **lost**: its enqueue returned ok, no dequeue of it succeeded or had an
  unknown outcome, and it is not present at the end (a dequeue of unknown
  outcome may have removed it, so it is counted apart, not as lost);
* **unexpected**: delivered or present, but no enqueue of it was attempted;
* **duplicated**: delivered more than once (a value still present at the end
  after an earlier delivery counts as one more delivery). Each repeat gets a
  reason: ``restart`` (the broker crashed while the value was leased, and it
  came back once the lease had run out), ``restart_before_expiry`` (the same,
  but it came back while the lease should still have held it: the restart
  forgot the lease — legal for at-least-once, worth seeing),
  ``lease_expired`` (no crash: the earlier lease had run out), ``after_ack``
  (the earlier delivery's dequeue had been acknowledged: an acknowledged
  change was undone) or ``unexplained``;
* **recovered**: its enqueue's outcome was unknown, and it showed up.

An enqueue with an unknown outcome that never shows up is not lost: the broker
may rightly never have applied it. A run is valid when lost = 0 and
unexpected = 0. Times are epoch seconds (`time.time` by default) because lease
expiry times come from the broker's wall clock on the same host.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping

ENQUEUE = "enqueue"
DELIVER = "deliver"
DEQUEUE = "dequeue"
KINDS = (ENQUEUE, DELIVER, DEQUEUE)

INVOKE = "invoke"
OK = "ok"
FAIL = "fail"
UNKNOWN = "unknown"

# Why a value was delivered again (see the module docstring).
RESTART = "restart"  # the broker crashed while it was leased; it came back once the lease ran out
RESTART_BEFORE_EXPIRY = "restart_before_expiry"  # ... and came back before: the restart forgot the lease
LEASE_EXPIRED = "lease_expired"  # no crash: the earlier lease ran out
AFTER_ACK = "after_ack"  # the earlier delivery's dequeue had been acknowledged
UNEXPLAINED = "unexplained"  # none of the above
EXPLAINED_REASONS = (RESTART, RESTART_BEFORE_EXPIRY, LEASE_EXPIRED)

# Slack when comparing a client's clock reading with the broker's lease expiry:
# both read the same wall clock, but a float timestamp can round either way.
CLOCK_SLACK_SECS = 0.01

SAMPLE_VALUES = 10  # values shown per anomaly by `Result.format`


@dataclass(slots=True)
class Operation:
    """One client operation: its invocation and, once known, its completion.

    `values` are the values the operation was about (empty for a deliver until
    it completes); `ok_values` are those it succeeded for. `expires_at` maps a
    delivered value to its lease expiry.
    """

    index: int
    process: str
    kind: str
    values: tuple[str, ...]
    invoked_at: float
    status: str = INVOKE
    completed_at: float | None = None
    ok_values: tuple[str, ...] = ()
    expires_at: dict[str, float] = field(default_factory=dict)
    error: str | None = None


@dataclass(frozen=True, slots=True)
class Crash:
    """The broker was killed at `at` (and restarted later)."""

    at: float
    note: str = ""


class History:
    """A thread-safe log of client operations and broker crashes."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._counter = itertools.count()
        self.operations: list[Operation] = []
        self.crashes: list[Crash] = []

    def now(self) -> float:
        return self._clock()

    def invoke(self, process: str, kind: str, values: Iterable[str] = ()) -> Operation:
        """Record that `process` is about to send an operation."""
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
        values = tuple(values)
        with self._lock:
            op = Operation(next(self._counter), process, kind, values, self._clock())
            self.operations.append(op)
        return op

    def ok(
        self,
        op: Operation,
        values: Iterable[str] | None = None,
        *,
        expires_at: float | Mapping[str, float] | None = None,
    ) -> None:
        """The operation succeeded: for all its values, or only for `values`
        (a deliver's delivered values; a dequeue's items that succeeded — the
        others failed)."""
        ok_values = op.values if values is None else tuple(values)
        if op.kind == DELIVER:
            op.values = ok_values
        if expires_at is None:
            expiry: dict[str, float] = {}
        elif isinstance(expires_at, Mapping):
            expiry = dict(expires_at)
        else:
            expiry = dict.fromkeys(ok_values, float(expires_at))
        self._complete(op, OK, None, ok_values, expiry)

    def fail(self, op: Operation, error: object = None) -> None:
        """The operation definitely had no effect."""
        self._complete(op, FAIL, error, (), {})

    def unknown(self, op: Operation, error: object = None) -> None:
        """The operation may or may not have taken effect."""
        self._complete(op, UNKNOWN, error, (), {})

    def crash(self, note: str = "") -> Crash:
        """Record that the broker was killed now."""
        with self._lock:
            crash = Crash(self._clock(), note)
            self.crashes.append(crash)
        return crash

    def _complete(
        self, op: Operation, status: str, error: object, ok_values: tuple[str, ...], expiry: dict[str, float]
    ) -> None:
        with self._lock:
            if op.status != INVOKE:
                raise ValueError(f"operation {op.index} already completed as {op.status}")
            op.status = status
            op.completed_at = self._clock()
            op.ok_values = ok_values
            op.expires_at = expiry
            op.error = None if error is None else str(error)

    def snapshot(self) -> tuple[list[Operation], list[Crash]]:
        with self._lock:
            return list(self.operations), list(self.crashes)


@dataclass(slots=True)
class Result:
    """The checker's verdict: counts always, and the values behind each anomaly."""

    attempted: int = 0  # distinct values whose enqueue was attempted
    acknowledged: int = 0  # ... of which some enqueue returned ok
    enqueue_unknown: int = 0  # ... of which no enqueue returned ok and one was unknown
    enqueue_failed: int = 0  # ... of which every enqueue failed
    delivered: int = 0  # distinct values delivered at least once
    deliveries: int = 0  # deliveries in total (repeats included)
    acked: int = 0  # distinct values with a dequeue that returned ok
    drained: int = 0  # distinct values present at the end
    unknown_absent: int = 0  # enqueue unknown, never showed up: not lost
    dequeue_unknown_absent: int = 0  # enqueue ok, absent, only a dequeue of unknown outcome removed it
    lost: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    recovered: list[str] = field(default_factory=list)
    failed_present: list[str] = field(default_factory=list)  # every enqueue failed, yet it showed up
    duplicated: dict[str, int] = field(default_factory=dict)  # value -> deliveries
    duplicate_reasons: Counter[str] = field(default_factory=Counter)  # reason -> repeats
    unexplained: list[str] = field(default_factory=list)  # values with an after_ack or unexplained repeat
    crashes: int = 0

    @property
    def valid(self) -> bool:
        return not self.lost and not self.unexpected

    def counts(self) -> dict[str, int]:
        return {
            "lost": len(self.lost),
            "unexpected": len(self.unexpected),
            "duplicated": len(self.duplicated),
            "recovered": len(self.recovered),
        }

    def format(self) -> str:
        """The counts, always, then a sample of the values behind each anomaly."""
        reasons = ", ".join(f"{reason}={n}" for reason, n in sorted(self.duplicate_reasons.items()))
        lines = [
            f"queue checker: {'valid' if self.valid else 'INVALID'}",
            f"  lost={len(self.lost)} unexpected={len(self.unexpected)} "
            f"duplicated={len(self.duplicated)} recovered={len(self.recovered)}",
            f"  enqueues: attempted={self.attempted} ok={self.acknowledged} "
            f"unknown={self.enqueue_unknown} (never showed up: {self.unknown_absent}) "
            f"failed={self.enqueue_failed}",
            f"  delivered={self.delivered} deliveries={self.deliveries} acked={self.acked} "
            f"removed by a dequeue of unknown outcome={self.dequeue_unknown_absent} "
            f"drained={self.drained} crashes={self.crashes}",
            f"  duplicate repeats by reason: {reasons or 'none'}",
        ]
        for name, values in (
            ("lost", self.lost),
            ("unexpected", self.unexpected),
            ("failed enqueue yet present", self.failed_present),
            ("duplicates not explained by a restart or lease expiry", self.unexplained),
        ):
            if values:
                lines.append(f"  {name}: {_sample(values)}")
        return "\n".join(lines)


def _sample(values: list[str]) -> str:
    shown = ", ".join(repr(v) for v in values[:SAMPLE_VALUES])
    more = len(values) - SAMPLE_VALUES
    return shown + (f" … and {more} more" if more > 0 else "")


def check(history: History, drained_values: Iterable[str], *, drained_at: float | None = None) -> Result:
    """Classify every value of a run; `drained_values` are the values still in
    the queues at the end (the final drain is not part of the history), and
    `drained_at` is when the drain took them (default: now)."""
    operations, crashes = history.snapshot()
    drained_at = history.now() if drained_at is None else drained_at
    crash_times = sorted(crash.at for crash in crashes)
    drained = Counter(drained_values)
    result = Result(crashes=len(crashes), drained=len(drained))

    enqueue_status: dict[str, str] = {}  # value -> best outcome: ok > unknown > fail
    rank = {FAIL: 0, UNKNOWN: 1, OK: 2}
    removed_maybe: set[str] = set()  # a dequeue returned ok or unknown
    acked_at: dict[str, float] = {}  # value -> earliest completion of an ok dequeue
    deliveries: dict[str, list[Operation]] = {}

    for op in operations:
        if op.kind == ENQUEUE:
            for value in op.values:
                status = UNKNOWN if op.status == INVOKE else op.status
                best = enqueue_status.get(value)
                if best is None or rank[status] > rank[best]:
                    enqueue_status[value] = status
        elif op.kind == DEQUEUE:
            if op.status in (UNKNOWN, INVOKE):
                removed_maybe.update(op.values)
            for value in op.ok_values:
                removed_maybe.add(value)
                assert op.completed_at is not None
                acked_at[value] = min(acked_at.get(value, op.completed_at), op.completed_at)
        elif op.status == OK:
            for value in op.ok_values:
                deliveries.setdefault(value, []).append(op)

    result.attempted = len(enqueue_status)
    statuses = Counter(enqueue_status.values())
    result.acknowledged = statuses[OK]
    result.enqueue_unknown = statuses[UNKNOWN]
    result.enqueue_failed = statuses[FAIL]
    result.delivered = len(deliveries)
    result.deliveries = sum(len(ops) for ops in deliveries.values())
    result.acked = len(acked_at)

    seen = set(deliveries) | set(drained)
    for value, status in enqueue_status.items():
        if status == OK:
            # Delivered or not, an acknowledged value must end either removed
            # by a dequeue that may have happened, or still in a queue.
            if value not in drained and value not in removed_maybe:
                result.lost.append(value)
            elif value not in drained and value not in acked_at:
                result.dequeue_unknown_absent += 1
        elif status == UNKNOWN:
            if value in seen:
                result.recovered.append(value)
            else:
                result.unknown_absent += 1
        elif value in seen:
            result.failed_present.append(value)
    result.unexpected = sorted(value for value in seen if value not in enqueue_status)

    for value in sorted(seen):
        repeats = _repeats(value, deliveries.get(value, []), drained[value], drained_at, acked_at, crash_times)
        if repeats:
            result.duplicated[value] = len(repeats) + 1
            result.duplicate_reasons.update(repeats)
            if any(reason not in EXPLAINED_REASONS for reason in repeats):
                result.unexplained.append(value)

    result.lost.sort()
    result.recovered.sort()
    result.failed_present.sort()
    return result


def _repeats(
    value: str,
    ops: list[Operation],
    present: int,
    drained_at: float,
    acked_at: dict[str, float],
    crash_times: list[float],
) -> list[str]:
    """The reason for each delivery of `value` after its first; being present
    at the end counts as one more delivery, at `drained_at`."""
    ops = sorted(ops, key=lambda op: op.completed_at or 0.0)
    repeats: list[str] = []
    for earlier, later in zip(ops, ops[1:]):
        assert later.completed_at is not None
        repeats.append(_reason(value, earlier, later.invoked_at, later.completed_at, acked_at, crash_times))
    if present and ops:
        repeats.append(_reason(value, ops[-1], drained_at, drained_at, acked_at, crash_times))
    repeats.extend([UNEXPLAINED] * max(0, present - 1))  # in the queues twice at the end
    return repeats


def _reason(
    value: str,
    earlier: Operation,
    asked_at: float,
    again_at: float,
    acked_at: dict[str, float],
    crash_times: list[float],
) -> str:
    """Why `value`, delivered by `earlier`, was delivered again by a lease
    invoked at `asked_at` that returned at `again_at`."""
    acked = acked_at.get(value)
    if acked is not None and acked < asked_at:
        return AFTER_ACK  # the ack came back before the second lease was even asked for
    expires_at = earlier.expires_at.get(value)
    expired = expires_at is not None and again_at + CLOCK_SLACK_SECS >= expires_at
    if any(earlier.invoked_at <= at <= again_at for at in crash_times):
        return RESTART if expired else RESTART_BEFORE_EXPIRY
    return LEASE_EXPIRED if expired else UNEXPLAINED

"""`Batcher`: the batching producer's rule, sans-IO (CMQ: producers batch and flush by size or age).

Both producers — `Producer` (threads, its own connection) and `AsyncProducer` (asyncio, the
client's connection) — wrap one `Batcher` and do only the I/O around it. The batcher owns what
tasks are held, which batch each joins, which batch goes out next and why, and what an answer
does; it reads no clock (every call that needs the time takes `now`, in seconds of the shell's
monotonic clock), starts no thread, touches no socket and signals no waiter: it returns the
batches it settled (or was handed them, for `answer`), and the shell wakes whoever waits on them.

Theory of operation. Tasks join the *gathering* batch. A batch takes no more tasks once it is
*closed*: full (`max_batch_tasks` tasks, or `max_batch_bytes` bytes reached), asked for by
`flush` (the shells flush on close too), or waited on by a full buffer with nothing in flight.
Closed batches wait in order (*ready*) until there is room in flight; at most `MAX_IN_FLIGHT`
batches are in flight. `next_send(now)` answers, in this order:

    in flight is full (two)                     -> None: wait for an answer
    a batch is ready                            -> send it; why: the reason it closed (size, flush),
                                                   or why it first went if it goes again
    a batch gathers, and an answer freed room
      since the last send of a gathering batch
      or the last "wait"                        -> send it: reply
    a batch gathers, and nothing is in flight   -> send it: idle
    a batch gathers, and its oldest task waited
      linger_ms behind the one in flight        -> send it: linger
    a batch gathers, younger than that          -> the seconds until it will have lingered
    nothing gathers                             -> None: wait for a task

So on an idle broker the first task goes out at once, alone (idle), and adds no waiting; under
load a batch gathers exactly while the one before it is being committed and goes out when that
one's answer arrives (reply), so batches grow with the broker's commit time. Why two in flight:
with one, the broker idles between a reply and the next request, and a full batch would wait a
whole commit; the second arrives while the first commits and joins the next group commit. A
third would only join that same commit, and would widen what a broken connection leaves
unknown. Batches leave in the order they were made, so FIFO pids follow the order of `take`.

Answers: an ok answer settles its batch with the reply's raw result (decoded only when a
handle asks, `Batch.outcome`); an error settles it failed — every task of it raises that error.
A batch whose bytes did not leave (`not_sent`) goes back to the front of the ready line, up to
a number of attempts, then fails as not enqueued. `fail_in_flight` is a connection that broke
(outcome unknown), `fail_unsent` batches that will never go (the broker unreachable, the
producer closed). Every failed task is counted for the next `failure_report` (what `flush`
raises), once.

Memory is bounded: `max_buffer_tasks` tasks are held at most (gathering, ready, or in flight);
`take` then raises PRODUCER_FULL, or — with `block=True` — returns None and the shell waits
for a batch to settle. After `close`, `take` raises PRODUCER_CLOSED.

The batcher is not thread-safe: `Producer` calls it under its lock, `AsyncProducer` from its
event loop only.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Generic, TypeVar

from kittiwake import errors
from kittiwake.client.producer_settings import ProducerSettings
from kittiwake.model import EnqueueOutcome, NewTask
from kittiwake.protocol.replies import result_decoder

MAX_IN_FLIGHT = 2  # batches sent and not yet answered (see the theory of operation)

S = TypeVar("S")  # what the shell waits on for one batch (a threading.Event, an asyncio.Future)

_decode_enqueued: Callable[[Any], list[EnqueueOutcome]] = result_decoder("enqueue")


class SendReason(StrEnum):
    """Why a batch went out; the values are the keys of `ProducerStats.sends`."""

    IDLE = "idle"  # nothing was in flight: it went out at once
    SIZE = "size"  # it reached max_batch_tasks or max_batch_bytes
    LINGER = "linger"  # its oldest task waited linger_ms behind the batch in flight
    REPLY = "reply"  # an answer freed a place in flight
    FLUSH = "flush"  # flush() or close() asked for it, or a full buffer waited on it


@dataclass
class ProducerStats:
    """What a producer did so far; `sends` counts batches by why they went out (`SendReason`:
    idle, size, linger, reply, flush)."""

    batches_sent: int = 0
    tasks_sent: int = 0
    batches_failed: int = 0
    tasks_failed: int = 0
    largest_batch_tasks: int = 0
    connections: int = 0
    sends: dict[str, int] = field(default_factory=lambda: {reason.value: 0 for reason in SendReason})


class Batch(Generic[S]):
    """Tasks that travel in one request, and what came back for them; `signal` is the shell's."""

    __slots__ = ("tasks", "bytes", "started", "reason", "signal", "raw", "outcomes", "error", "attempts")

    def __init__(self, started: float, signal: S) -> None:
        self.tasks: list[NewTask] = []  # emptied once settled: the handles keep the batch, not its data
        self.bytes = 0
        self.started = started  # when its oldest task came (the shell's clock)
        self.reason: SendReason | None = None  # why it goes out, once closed or sent
        self.signal = signal
        self.raw: object = None  # the reply's result, decoded on first demand
        self.outcomes: list[EnqueueOutcome] | None = None
        self.error: errors.KittiwakeError | None = None
        self.attempts = 0  # sends whose bytes did not leave whole

    def outcome(self, index: int) -> EnqueueOutcome:
        """The outcome of the batch's `index`-th task once settled; raises the batch's error."""
        error = self.error
        if error is not None:
            raise errors.error_for_code(error.code, error.message)
        outcomes = self.outcomes
        if outcomes is None:
            # two threads may decode at once: both get equal lists, either one stays
            outcomes = self.outcomes = _decode_enqueued(self.raw)
        return outcomes[index]


@dataclass(frozen=True, slots=True)
class Send(Generic[S]):
    """A batch to send now, and why; the shell reports back with `sent` or `not_sent`."""

    batch: Batch[S]
    reason: SendReason


class Batcher(Generic[S]):
    """The batching rule of one producer; see the module docstring. `new_signal` makes what the
    shell will wait on for each new batch; `stats` are the figures it counts into (the producer's)."""

    def __init__(
        self, settings: ProducerSettings, new_signal: Callable[[], S], stats: ProducerStats | None = None
    ) -> None:
        self.settings = settings
        self.stats = ProducerStats() if stats is None else stats
        self._new_signal = new_signal
        self._linger_secs = settings.linger_ms / 1000.0
        self._max_tasks = settings.max_batch_tasks
        self._max_bytes = settings.max_batch_bytes
        self._max_held = settings.max_buffer_tasks
        self._gathering: Batch[S] | None = None
        self._ready: deque[Batch[S]] = deque()  # closed, not yet sent, in order
        self._in_flight: list[Batch[S]] = []  # in the order sent
        self._held = 0  # tasks taken and not yet settled
        # an answer freed a place since next_send last said to wait or sent a gathering batch: the
        # next one goes out at once (reply), even behind a ready batch sent into the same room
        self._answered = False
        self._closed = False
        self._failed_tasks = 0  # since the last failure_report
        self._first_failure: errors.KittiwakeError | None = None

    @property
    def held(self) -> int:
        """Tasks taken and not yet settled."""
        return self._held

    @property
    def closed(self) -> bool:
        """Whether `close` was called: `take` refuses every task."""
        return self._closed

    @property
    def in_flight(self) -> int:
        """Batches sent and not yet answered."""
        return len(self._in_flight)

    @property
    def unsent(self) -> bool:
        """Whether a batch is ready or gathering: something a connection would send."""
        return bool(self._ready) or self._gathering is not None

    # ------------------------------------------------------------------ taking

    def take(self, task: NewTask, size: int, now: float) -> Batch[S] | None:
        """Add `task` (`size` bytes) to the gathering batch and return that batch (the task is its
        last); None when the buffer is full and settings say to block (ask again once a batch
        settled). Raises PRODUCER_FULL when full with `block=False`, PRODUCER_CLOSED after `close`."""
        if self._closed:
            raise errors.ProducerClosed("the producer is closed")
        if self._held >= self._max_held:
            if not self.settings.block:
                raise errors.ProducerFull(
                    f"the producer holds {self._held} tasks not yet answered (max_buffer_tasks = {self._max_held})"
                )
            if self._gathering is not None and not self._in_flight:
                self._close_gathering(SendReason.FLUSH)  # never wait on a batch that nothing will send
            return None
        batch = self._gathering
        if batch is None:
            batch = self._gathering = Batch(now, self._new_signal())
        tasks = batch.tasks
        tasks.append(task)
        batch.bytes += size
        self._held += 1
        if len(tasks) >= self._max_tasks or batch.bytes >= self._max_bytes:
            self._close_gathering(SendReason.SIZE)
        return batch

    def sendable(self) -> bool:
        """Whether `next_send` would send without looking at the clock: room in flight, and nothing
        in flight or a batch ready. The hot path asks this before it reads a clock."""
        in_flight = len(self._in_flight)
        return in_flight < MAX_IN_FLIGHT and (in_flight == 0 or bool(self._ready))

    # ----------------------------------------------------------------- sending

    def next_send(self, now: float) -> Send[S] | float | None:
        """The batch to send now and why (it counts as in flight from here); or the seconds to linger
        before asking again; or None: nothing to send until an answer or a task comes."""
        in_flight = self._in_flight
        if len(in_flight) >= MAX_IN_FLIGHT:
            self._answered = False
            return None
        if self._ready:
            batch = self._ready.popleft()
            reason = batch.reason
            assert reason is not None  # a batch is closed with its reason
        else:
            batch_or_none = self._gathering
            if batch_or_none is None:
                self._answered = False
                return None
            batch = batch_or_none
            if self._answered:
                reason = SendReason.REPLY
                self._answered = False
            elif not in_flight:
                reason = SendReason.IDLE
            elif now >= (deadline := batch.started + self._linger_secs):
                reason = SendReason.LINGER
            else:
                self._answered = False
                return deadline - now
            self._gathering = None
            batch.reason = reason  # a batch that must go again keeps why it first went
        in_flight.append(batch)
        return Send(batch, reason)

    def sent(self, send: Send[S]) -> None:
        """The shell wrote `send`'s batch: count it."""
        stats = self.stats
        count = len(send.batch.tasks)
        stats.batches_sent += 1
        stats.tasks_sent += count
        stats.sends[send.reason.value] += 1
        if count > stats.largest_batch_tasks:
            stats.largest_batch_tasks = count

    def not_sent(self, send: Send[S], why: str, attempts_max: int) -> Batch[S] | None:
        """`send`'s bytes did not leave whole (`why`), so the broker cannot have acted on them: the
        batch goes back to the front of the line, or after `attempts_max` tries fails as not
        enqueued (BROKER_UNREACHABLE) and is returned, settled."""
        batch = send.batch
        self._in_flight.remove(batch)
        batch.attempts += 1
        if batch.attempts >= attempts_max:
            self._settle(batch, None, errors.BrokerUnreachable(f"the batch could not be sent: {why}"))
            return batch
        self._ready.appendleft(batch)
        return None

    # ----------------------------------------------------------------- answers

    def answer(self, batch: Batch[S], raw: object = None, error: errors.KittiwakeError | None = None) -> None:
        """The answer to an in-flight batch: its raw result, or the error that fails each of its
        tasks. It frees a place in flight, so the next send of a gathering batch is a reply send.
        The shell signals `batch`."""
        self._in_flight.remove(batch)
        self._settle(batch, raw, error)
        self._answered = True

    def fail_in_flight(self, error: errors.KittiwakeError) -> list[Batch[S]]:
        """The connection the batches in flight went on broke: they fail with `error` (their
        outcome is unknown). Returns them, settled."""
        failed, self._in_flight = self._in_flight, []
        self._answered = False
        for batch in failed:
            self._settle(batch, None, error)
        return failed

    def fail_unsent(self, error: errors.KittiwakeError) -> list[Batch[S]]:
        """The batches not yet sent (ready and gathering) will never be: they fail with `error` (not
        enqueued). Returns them, settled."""
        failed = [*self._ready, *([self._gathering] if self._gathering is not None else [])]
        self._ready.clear()
        self._gathering = None
        for batch in failed:
            self._settle(batch, None, error)
        return failed

    # -------------------------------------------------------- flushing, closing

    def flush(self) -> list[Batch[S]]:
        """Close the gathering batch (it goes out as flush) and return every batch not yet
        settled, in order: what the shell waits on. The shell then sends what is due."""
        if self._gathering is not None:
            self._close_gathering(SendReason.FLUSH)
        return [*self._in_flight, *self._ready]

    def close(self) -> None:
        """Take no more tasks; what is held still goes out (`flush`) or fails (`fail_unsent`)."""
        self._closed = True

    def failure_report(self) -> errors.KittiwakeError | None:
        """The error `flush` raises for the tasks that failed since the last report, once: the first
        failure's class and code, its message saying how many failed. None if none did."""
        failed, first = self._failed_tasks, self._first_failure
        self._failed_tasks, self._first_failure = 0, None
        if first is None:
            return None
        return errors.error_for_code(first.code, f"{failed} task(s) were not enqueued; the first: {first.message}")

    # ----------------------------------------------------------------- inside

    def _close_gathering(self, reason: SendReason) -> None:
        batch = self._gathering
        assert batch is not None
        self._gathering = None
        batch.reason = reason
        self._ready.append(batch)

    def _settle(self, batch: Batch[S], raw: object, error: errors.KittiwakeError | None) -> None:
        count = len(batch.tasks)
        if error is not None:
            batch.error = error
            self.stats.batches_failed += 1
            self.stats.tasks_failed += count
            self._failed_tasks += count
            if self._first_failure is None:
                self._first_failure = error
        else:
            batch.raw = raw
        self._held -= count
        batch.tasks = []

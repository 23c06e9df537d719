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
handle asks, `Batch.outcome`); an error settles it failed — every task of it raises that error —
except a refusal for what the batch holds (below).

Refused batches. The broker refuses an enqueue whole, before it applies any of it, when one task
names a queue the user may not use (FORBIDDEN: `broker.access` checks every task of a request
before it runs) or is one the engine would not take (BAD_REQUEST: `engine.enqueue` checks every
task, and the joins' rules, before it adds one; a pass answers an engine error with nothing of
that request applied). So a batch answered so (`SPLIT_CODES`) is not failed but sent again in
*parts*, each a `Batch` whose `parent` is the refused batch (the one the handles keep): one part
per queue when it names 2 to `MAX_QUEUE_PARTS` queues, else halves; a part refused again is split
in halves in its place, until a refused part has one task, which fails with the error. A refused
batch makes at most `MAX_SPLIT_SENDS` parts; a part refused once that is spent fails whole, and so
at once does a part of plain tasks (no after, unless or headers) into one queue refused FORBIDDEN:
its only check was that queue. Parts go one at a time, before any later batch, depth first: the
parts accepted apply in the order of their tasks (within each queue, once split by queue); the
batch sent behind the refused one, already in flight, applies before them. A refused batch
settles when its last part is answered: each task with its own outcome or error. A part whose
connection broke fails its tasks with that error (outcome unknown: never sent again); the parts
not sent yet go on, as batches not sent do. An error of unknown outcome is never split.
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
# errors that refuse a request whole for what it holds, before anything of it is applied: access
# checks each task's queues first (FORBIDDEN), the engine checks every task before it adds one
# (BAD_REQUEST); a batch refused so is sent again in parts (see "Refused batches")
SPLIT_CODES = frozenset({errors.Forbidden.code, errors.BadRequest.code})
MAX_SPLIT_SENDS = 64  # parts one refused batch may be sent again as, at most
MAX_QUEUE_PARTS = 8  # a refused batch naming 2 to this many queues is first split by queue
_NOT_ENQUEUED = EnqueueOutcome("", "", False)  # a split batch's place of a task that failed (never read)

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
    split_sends: int = 0  # parts of refused batches sent again (not in batches_sent, tasks_sent, sends)
    sends: dict[str, int] = field(default_factory=lambda: {reason.value: 0 for reason in SendReason})


class Batch(Generic[S]):
    """Tasks that travel in one request, and what came back for them; `signal` is the shell's."""

    __slots__ = (
        "tasks", "bytes", "started", "reason", "signal", "raw", "outcomes", "error", "attempts",
        "parent", "positions", "task_errors", "parts_left", "splits_left",
    )

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
        # a part of a refused batch, sent again on its own (see "Refused batches" above): the batch
        # whose handles wait for it; None for a batch of handles
        self.parent: Batch[S] | None = None
        self.positions: list[int] = []  # a part's: the index in its parent of each of its tasks
        # a batch that was split: the error of each of its tasks that failed (the rest have an
        # outcome), how many of its parts are not answered yet, how many more parts it may make
        self.task_errors: dict[int, errors.KittiwakeError] | None = None
        self.parts_left = 0
        self.splits_left = 0

    def outcome(self, index: int) -> EnqueueOutcome:
        """The outcome of the batch's `index`-th task once settled; raises the batch's error, or
        the task's own when the batch was split."""
        error = self.error
        if error is None and self.task_errors is not None:
            error = self.task_errors.get(index)
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
        self._parts: deque[Batch[S]] = deque()  # parts of refused batches not yet sent, in order
        self._splitting: list[Batch[S]] = []  # refused batches whose parts are not all answered
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
        """Whether a batch (or a part of a refused one) is ready or gathering: something a
        connection would send."""
        return bool(self._ready) or self._gathering is not None or bool(self._parts)

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
        in flight or a batch (or part) ready. The hot path asks this before it reads a clock."""
        in_flight = len(self._in_flight)
        return in_flight < MAX_IN_FLIGHT and (in_flight == 0 or bool(self._ready) or bool(self._parts))

    # ----------------------------------------------------------------- sending

    def next_send(self, now: float) -> Send[S] | float | None:
        """The batch to send now and why (it counts as in flight from here); or the seconds to linger
        before asking again; or None: nothing to send until an answer or a task comes."""
        in_flight = self._in_flight
        if len(in_flight) >= MAX_IN_FLIGHT:
            self._answered = False
            return None
        if self._splitting:
            # a refused batch goes again in parts, one at a time, before any later batch
            if not self._parts or any(sent.parent is not None for sent in in_flight):
                return None
            part = self._parts.popleft()
            in_flight.append(part)
            assert part.parent is not None and part.parent.reason is not None
            return Send(part, part.parent.reason)
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
        if send.batch.parent is not None:
            stats.split_sends += 1
            return
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
            error = errors.BrokerUnreachable(f"the batch could not be sent: {why}")
            if batch.parent is not None:
                settled = self._resolve(batch, None, error)
                return settled[0] if settled else None
            self._settle(batch, None, error)
            return batch
        (self._ready if batch.parent is None else self._parts).appendleft(batch)
        return None

    # ----------------------------------------------------------------- answers

    def answer(
        self, batch: Batch[S], raw: object = None, error: errors.KittiwakeError | None = None
    ) -> list[Batch[S]]:
        """The answer to an in-flight batch (or part): its raw result, or the error that fails each
        of its tasks — unless it refuses the request whole for what it holds (`SPLIT_CODES`), which
        nothing of it was applied after: then the batch goes again in parts. It frees a place in
        flight, so the next send of a gathering batch is a reply send. Returns the batches it
        settled (none while a split goes on), which the shell signals."""
        self._in_flight.remove(batch)
        self._answered = True
        if error is not None and error.code in SPLIT_CODES and self._split(batch, error):
            return []
        if batch.parent is not None:
            return self._resolve(batch, raw, error)
        self._settle(batch, raw, error)
        return [batch]

    def fail_in_flight(self, error: errors.KittiwakeError) -> list[Batch[S]]:
        """The connection the batches in flight went on broke: they fail with `error` (their
        outcome is unknown). Returns them, settled."""
        failed, self._in_flight = self._in_flight, []
        self._answered = False
        settled: list[Batch[S]] = []
        for batch in failed:
            if batch.parent is not None:
                settled += self._resolve(batch, None, error)  # the parts not sent yet go on
            else:
                self._settle(batch, None, error)
                settled.append(batch)
        return settled

    def fail_unsent(self, error: errors.KittiwakeError) -> list[Batch[S]]:
        """The batches not yet sent (ready and gathering) will never be: they fail with `error` (not
        enqueued). Returns them, settled."""
        failed = [*self._ready, *([self._gathering] if self._gathering is not None else [])]
        self._ready.clear()
        self._gathering = None
        for batch in failed:
            self._settle(batch, None, error)
        parts = list(self._parts)
        self._parts.clear()
        for part in parts:
            failed += self._resolve(part, None, error)
        return failed

    # -------------------------------------------------------- flushing, closing

    def flush(self) -> list[Batch[S]]:
        """Close the gathering batch (it goes out as flush) and return every batch not yet
        settled, in order: what the shell waits on. The shell then sends what is due."""
        if self._gathering is not None:
            self._close_gathering(SendReason.FLUSH)
        return [*(batch for batch in self._in_flight if batch.parent is None), *self._splitting, *self._ready]

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
            self._count_failed(count, error)
        else:
            batch.raw = raw
        self._held -= count
        batch.tasks = []

    def _count_failed(self, count: int, error: errors.KittiwakeError) -> None:
        self.stats.batches_failed += 1
        self.stats.tasks_failed += count
        self._failed_tasks += count
        if self._first_failure is None:
            self._first_failure = error

    def _split(self, batch: Batch[S], error: errors.KittiwakeError) -> bool:
        """`batch` (or a part) was refused whole with `error`, and nothing of it applied: put its
        parts first in line (a batch's behind the parts of batches refused before it). False when
        it is not split: one task, a batch with a task that names others (`after`, `unless`), a
        FORBIDDEN that can only be about the one queue all its tasks name, or its batch may make no
        more parts (`MAX_SPLIT_SENDS`); it then fails whole."""
        tasks = batch.tasks
        if len(tasks) < 2:
            return False
        if any(task.after or task.unless for task in (batch.parent or batch).tasks):
            # a part sent alone could enqueue a child without its refused parent (a parent that does
            # not exist counts as finished), or ahead of it: such a batch fails whole, as it was sent
            return False
        queues = {task.queue: None for task in tasks}
        if (error.code == errors.Forbidden.code and len(queues) == 1
                and not any(task.after or task.unless or task.headers for task in tasks)):
            return False  # produce on that queue is all access checks of such tasks
        parent = batch.parent
        root = batch if parent is None else parent
        pairs = list(zip(range(len(tasks)) if parent is None else batch.positions, tasks))
        if parent is None and 1 < len(queues) <= MAX_QUEUE_PARTS:
            groups = [[pair for pair in pairs if pair[1].queue == queue] for queue in queues]
        else:
            half = len(pairs) // 2  # bisect: isolating one bad task of n costs 2·log2(n) sends
            groups = [pairs[:half], pairs[half:]]
        if parent is None:
            root.splits_left = MAX_SPLIT_SENDS
        if len(groups) > root.splits_left:
            return False
        root.splits_left -= len(groups)
        parts: list[Batch[S]] = []
        for group in groups:
            part = Batch(root.started, root.signal)
            part.parent = root
            part.positions = [position for position, _ in group]
            part.tasks = [task for _, task in group]
            parts.append(part)
        if parent is None:
            batch.task_errors = {}
            batch.outcomes = [_NOT_ENQUEUED] * len(tasks)
            batch.parts_left = len(parts)
            self._splitting.append(batch)
            self._parts.extend(parts)
        else:
            parent.parts_left += len(parts) - 1  # the refused part is replaced by its own
            self._parts.extendleft(reversed(parts))
        return True

    def _resolve(self, part: Batch[S], raw: object, error: errors.KittiwakeError | None) -> list[Batch[S]]:
        """A part's answer goes to its batch's tasks; the batch settles with its last part's, and is
        returned then."""
        parent = part.parent
        assert parent is not None and parent.outcomes is not None and parent.task_errors is not None
        if error is None:
            for position, outcome in zip(part.positions, _decode_enqueued(raw)):
                parent.outcomes[position] = outcome
        else:
            for position in part.positions:
                parent.task_errors[position] = error
        part.tasks = []
        parent.parts_left -= 1
        if parent.parts_left:
            return []
        self._splitting.remove(parent)
        task_errors = parent.task_errors
        if task_errors:
            self._count_failed(len(task_errors), task_errors[min(task_errors)])
        self._held -= len(parent.tasks)
        parent.tasks = []
        return [parent]

"""The batching rule (`client.batching.Batcher`) on its own: a fake clock, no broker, no threads.

Each send reason is driven to happen and read from what `next_send` answers and from
`ProducerStats.sends`: idle, full by tasks, full by bytes, linger, a reply freeing room, flush.
Then the full buffer (block or refuse, as the settings say), flush and close with tasks
waiting, answers that fail a batch, bytes that did not leave. Last, a hypothesis state machine
runs random takes, clock steps, sends, answers, broken connections, flushes and closes against
a tiny model of the rule, which fixes the one reason every send must have.

The producers' I/O around the rule (a paused broker holding batches in flight, a killed
producer) is tested over real sockets in test_producer.py, test_producer_async.py and
test_producer_kill.py.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path

import msgspec
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from kittiwake import errors
from kittiwake.client import ProducerStats as ExportedStats
from kittiwake.client import batching
from kittiwake.client.batching import MAX_IN_FLIGHT, Batch, Batcher, ProducerStats, Send, SendReason
from kittiwake.client.producer_settings import ProducerSettings
from kittiwake.model import EnqueueOutcome, NewTask

LINGER_MS = 5.0
ATTEMPTS_MAX = 3


class Signal:
    """What a shell waits on for a batch; the batcher never touches it (the test sets it)."""

    def __init__(self) -> None:
        self.set = False


@dataclass
class FakeClock:
    """Seconds, counted in whole microseconds so that a wait of exactly the linger reaches its deadline."""

    micros: int = 1_000_000_000

    @property
    def now(self) -> float:
        return self.micros / 1_000_000

    def advance_ms(self, ms: float) -> None:
        self.micros += round(ms * 1000)


def make(
    *, linger_ms: float = LINGER_MS, max_batch_tasks: int = 4, max_batch_bytes: int = 1 << 20,
    max_buffer_tasks: int = 200, block: bool = True,
) -> tuple[Batcher[Signal], FakeClock]:
    settings = ProducerSettings(linger_ms=linger_ms, max_batch_tasks=max_batch_tasks, max_batch_bytes=max_batch_bytes,
                                max_buffer_tasks=max_buffer_tasks, block=block)
    return Batcher(settings, Signal), FakeClock()


def task(n: int, data_bytes: int = 1) -> tuple[NewTask, int]:
    """Task `n` (its data names it) and its size in bytes as a producer counts it."""
    data = b"%d" % n
    return NewTask("q", data), max(data_bytes, len(data))


def take(batcher: Batcher[Signal], clock: FakeClock, n: int, data_bytes: int = 1) -> tuple[Batch[Signal], int]:
    new, size = task(n, data_bytes)
    batch = batcher.take(new, size, clock.now)
    assert batch is not None
    return batch, len(batch.tasks) - 1


def send(batcher: Batcher[Signal], clock: FakeClock) -> Send[Signal]:
    due = batcher.next_send(clock.now)
    assert isinstance(due, Send), f"expected a send, got {due!r}"
    batcher.sent(due)
    return due


def ok_result(batch: Batch[Signal]) -> bytes:
    """What the broker answers for `batch`: an outcome per task, pid `p<n>` for task n."""
    return msgspec.msgpack.encode([EnqueueOutcome("q", "p" + t.data.decode(), False) for t in batch.tasks])


def numbers(batch: Batch[Signal]) -> list[int]:
    return [int(t.data) for t in batch.tasks]


# ------------------------------------------------------------------------------ send reasons


def test_idle_the_first_task_goes_out_at_once_alone() -> None:
    batcher, clock = make(linger_ms=60_000)
    take(batcher, clock, 0)
    assert batcher.sendable()
    first = send(batcher, clock)
    assert (first.reason, numbers(first.batch)) == (SendReason.IDLE, [0])
    assert batcher.stats.sends == {"idle": 1, "size": 0, "linger": 0, "reply": 0, "flush": 0}
    assert (batcher.stats.batches_sent, batcher.stats.tasks_sent, batcher.in_flight) == (1, 1, 1)


def test_full_by_tasks_goes_out_behind_the_one_in_flight() -> None:
    batcher, clock = make(linger_ms=60_000, max_batch_tasks=3)
    take(batcher, clock, 0)
    send(batcher, clock)
    for n in (1, 2):
        take(batcher, clock, n)
        assert not batcher.sendable() and isinstance(batcher.next_send(clock.now), float)  # gathers, lingers
    take(batcher, clock, 3)  # the third task fills it
    assert batcher.sendable()
    full = send(batcher, clock)
    assert (full.reason, numbers(full.batch)) == (SendReason.SIZE, [1, 2, 3])
    take(batcher, clock, 4)
    assert batcher.next_send(clock.now) is None  # two in flight: only an answer makes room
    assert batcher.stats.largest_batch_tasks == 3


def test_full_by_bytes_goes_out_once_its_bytes_reach_the_limit() -> None:
    batcher, clock = make(linger_ms=60_000, max_batch_tasks=100, max_batch_bytes=100)
    take(batcher, clock, 0)
    send(batcher, clock)
    take(batcher, clock, 1, data_bytes=60)
    assert not batcher.sendable()
    take(batcher, clock, 2, data_bytes=40)  # 100 bytes: full
    full = send(batcher, clock)
    assert (full.reason, numbers(full.batch), full.batch.bytes) == (SendReason.SIZE, [1, 2], 100)
    assert batcher.stats.sends["size"] == 1


def test_a_batch_lingers_behind_the_one_in_flight_then_goes_out() -> None:
    batcher, clock = make(linger_ms=LINGER_MS)
    take(batcher, clock, 0)
    send(batcher, clock)
    take(batcher, clock, 1)
    clock.advance_ms(2)
    take(batcher, clock, 2)
    wait = batcher.next_send(clock.now)
    assert wait == pytest.approx(0.003)  # counted from the oldest task, not the newest
    clock.advance_ms(3)
    lingered = send(batcher, clock)
    assert (lingered.reason, numbers(lingered.batch)) == (SendReason.LINGER, [1, 2])


def test_a_reply_sends_what_gathered_while_it_was_awaited() -> None:
    batcher, clock = make(linger_ms=60_000, max_batch_tasks=100)
    take(batcher, clock, 0)
    first = send(batcher, clock)
    for n in range(1, 6):
        take(batcher, clock, n)
    batcher.answer(first.batch, ok_result(first.batch))
    gathered = send(batcher, clock)
    assert (gathered.reason, numbers(gathered.batch)) == (SendReason.REPLY, [1, 2, 3, 4, 5])
    # the reply freed one place, once: the next batch lingers behind the one now in flight
    take(batcher, clock, 6)
    assert isinstance(batcher.next_send(clock.now), float)
    assert batcher.stats.sends == {"idle": 1, "size": 0, "linger": 0, "reply": 1, "flush": 0}


def test_a_reply_sends_the_ready_batch_first_then_the_gathering_one_as_reply() -> None:
    batcher, clock = make(linger_ms=60_000, max_batch_tasks=2)
    take(batcher, clock, 0)
    first = send(batcher, clock)
    take(batcher, clock, 1)
    take(batcher, clock, 2)
    second = send(batcher, clock)  # full, second in flight
    take(batcher, clock, 3)
    take(batcher, clock, 4)  # full, ready, no room
    take(batcher, clock, 5)  # gathering
    assert batcher.next_send(clock.now) is None
    batcher.answer(first.batch, ok_result(first.batch))
    batcher.answer(second.batch, ok_result(second.batch))
    ready, gathering = send(batcher, clock), send(batcher, clock)
    assert (ready.reason, numbers(ready.batch)) == (SendReason.SIZE, [3, 4])
    assert (gathering.reason, numbers(gathering.batch)) == (SendReason.REPLY, [5])
    assert batcher.next_send(clock.now) is None and batcher.in_flight == MAX_IN_FLIGHT


def test_an_answer_that_fails_frees_room_as_well() -> None:
    batcher, clock = make(linger_ms=60_000)
    take(batcher, clock, 0)
    first = send(batcher, clock)
    take(batcher, clock, 1)
    batcher.answer(first.batch, error=errors.Unavailable("busy"))
    assert send(batcher, clock).reason == SendReason.REPLY


def test_nothing_to_send_until_a_task_comes() -> None:
    batcher, clock = make()
    assert batcher.next_send(clock.now) is None and not batcher.unsent
    assert batcher.sendable()  # room and nothing in flight: a task taken now would go at once


# ------------------------------------------------------------------------------ a full buffer


def test_a_full_buffer_refuses_with_block_false() -> None:
    batcher, clock = make(max_batch_tasks=2, max_buffer_tasks=4, block=False)
    for n in range(4):
        take(batcher, clock, n)
    with pytest.raises(errors.ProducerFull, match="holds 4 tasks") as refused:
        batcher.take(*task(4), clock.now)
    assert refused.value.code == "PRODUCER_FULL" and batcher.held == 4


def test_a_full_buffer_says_wait_with_block_true_until_an_answer_makes_room() -> None:
    batcher, clock = make(max_batch_tasks=2, max_buffer_tasks=4)
    take(batcher, clock, 0)
    first = send(batcher, clock)
    for n in (1, 2, 3):
        take(batcher, clock, n)
    assert batcher.take(*task(4), clock.now) is None and batcher.held == 4
    batcher.answer(first.batch, ok_result(first.batch))
    batch, index = take(batcher, clock, 4)
    assert (numbers(batch), index, batcher.held) == ([3, 4], 1, 4)


def test_a_full_buffer_with_nothing_in_flight_closes_the_gathering_batch_so_it_can_go() -> None:
    batcher, clock = make(max_batch_tasks=3, max_buffer_tasks=4, linger_ms=60_000)
    for n in range(4):  # no connection yet: nothing was sent
        take(batcher, clock, n)
    assert batcher.take(*task(4), clock.now) is None
    full, flushed = send(batcher, clock), send(batcher, clock)
    assert (full.reason, numbers(full.batch)) == (SendReason.SIZE, [0, 1, 2])
    assert (flushed.reason, numbers(flushed.batch)) == (SendReason.FLUSH, [3])


def test_a_closed_batcher_takes_nothing_even_when_full() -> None:
    batcher, clock = make(max_batch_tasks=2, max_buffer_tasks=2, block=False)
    take(batcher, clock, 0)
    take(batcher, clock, 1)
    batcher.close()
    with pytest.raises(errors.ProducerClosed) as refused:
        batcher.take(*task(2), clock.now)
    assert refused.value.code == "PRODUCER_CLOSED"


# ------------------------------------------------------------------------ flushing, closing


def test_flush_closes_the_gathering_batch_and_names_every_batch_to_wait_on() -> None:
    batcher, clock = make(max_batch_tasks=2, linger_ms=60_000)
    take(batcher, clock, 0)
    first = send(batcher, clock)
    for n in (1, 2, 3):  # [1, 2] full and sent; [3] gathering
        take(batcher, clock, n)
    second = send(batcher, clock)
    waiting = batcher.flush()
    assert [numbers(batch) for batch in waiting] == [[0], [1, 2], [3]]
    assert waiting[:2] == [first.batch, second.batch]
    batcher.answer(first.batch, ok_result(first.batch))
    flushed = send(batcher, clock)
    assert (flushed.reason, flushed.batch) == (SendReason.FLUSH, waiting[2])
    assert batcher.flush() == [second.batch, flushed.batch]  # nothing gathering: nothing new to close


def test_close_with_tasks_waiting_fails_the_unsent_and_leaves_the_in_flight_to_the_shell() -> None:
    batcher, clock = make(max_batch_tasks=2, linger_ms=60_000)
    take(batcher, clock, 0)
    in_flight = send(batcher, clock)
    handles = [take(batcher, clock, n) for n in (1, 2, 3)]  # [1, 2] ready, [3] gathering
    batcher.close()
    with pytest.raises(errors.ProducerClosed):
        batcher.take(*task(4), clock.now)
    failed = batcher.fail_unsent(errors.ProducerClosed("closed before the task was sent"))
    assert [numbers(batch) for batch in failed] == [[], []]  # settled: their data is let go
    for batch, index in handles:
        assert batch in failed
        with pytest.raises(errors.ProducerClosed, match="before the task was sent"):
            batch.outcome(index)
    assert batcher.held == 1 and not batcher.unsent
    lost = batcher.fail_in_flight(errors.ConnectionLost("closed before the reply; outcome unknown"))
    assert lost == [in_flight.batch] and batcher.held == 0 and batcher.in_flight == 0
    with pytest.raises(errors.ConnectionLost):
        in_flight.batch.outcome(0)
    assert (batcher.stats.batches_failed, batcher.stats.tasks_failed) == (3, 4)


# ----------------------------------------------------------------------------- answers


def test_an_ok_answer_gives_each_task_its_outcome() -> None:
    batcher, clock = make(linger_ms=60_000)
    take(batcher, clock, 0)
    first = send(batcher, clock)
    handles = [take(batcher, clock, n) for n in (1, 2, 3)]
    batcher.answer(first.batch, ok_result(first.batch))
    second = send(batcher, clock)
    batcher.answer(second.batch, ok_result(second.batch))
    assert first.batch.outcome(0) == EnqueueOutcome("q", "p0", False)
    assert [batch.outcome(index).pid for batch, index in handles] == ["p1", "p2", "p3"]
    assert batcher.held == 0 and batcher.failure_report() is None
    assert second.batch.tasks == []  # settled batches keep no task data


def test_an_error_answer_fails_every_task_of_the_batch_and_is_reported_once() -> None:
    batcher, clock = make(linger_ms=60_000)
    take(batcher, clock, 0)
    first = send(batcher, clock)
    bad = [take(batcher, clock, n) for n in (1, 2)]
    batcher.answer(first.batch, ok_result(first.batch))
    refused = send(batcher, clock)
    # not a refusal for what the batch holds (that splits it: below): every task fails with it
    assert batcher.answer(refused.batch, error=errors.Unavailable("the store is read-only")) == [refused.batch]
    for batch, index in bad:
        with pytest.raises(errors.Unavailable, match="read-only"):
            batch.outcome(index)
    report = batcher.failure_report()
    assert isinstance(report, errors.Unavailable) and report.message.startswith("2 task(s) were not enqueued")
    assert batcher.failure_report() is None  # once
    assert (batcher.stats.batches_failed, batcher.stats.tasks_failed, batcher.held) == (1, 2, 0)
    assert (first.batch.outcome(0).pid, batcher.stats.split_sends) == ("p0", 0)


def refused_batch(
    batcher: Batcher[Signal], clock: FakeClock, tasks: list[NewTask]
) -> tuple[Send[Signal], list[tuple[Batch[Signal], int]]]:
    """`tasks` taken and sent as one batch behind task 0 (answered ok): that send, and their handles."""
    take(batcher, clock, 0)
    first = send(batcher, clock)
    handles = []
    for new in tasks:
        batch = batcher.take(new, len(new.data), clock.now)
        assert batch is not None
        handles.append((batch, len(batch.tasks) - 1))
    assert batcher.answer(first.batch, ok_result(first.batch)) == [first.batch]
    return send(batcher, clock), handles


def broker_answers(
    batcher: Batcher[Signal], clock: FakeClock, batch: Batch[Signal], refuses: object, error: errors.KittiwakeError
) -> list[list[int]]:
    """Answer the parts of the refused `batch` the batcher sends, one at a time (never two at once),
    as a broker that refuses a request whole when `refuses(task)` holds for one of its tasks; the
    parts' task numbers, in the order sent, until `batch` is settled."""
    sent: list[list[int]] = []
    while batch.tasks:
        due = batcher.next_send(clock.now)
        assert isinstance(due, Send)
        batcher.sent(due)
        assert due.batch.parent is not None and batcher.next_send(clock.now) is None  # one part at a time
        sent.append(numbers(due.batch))
        if any(refuses(new) for new in due.batch.tasks):  # type: ignore[operator]
            batcher.answer(due.batch, error=error)
        else:
            batcher.answer(due.batch, ok_result(due.batch))
    return sent


def test_a_batch_refused_for_what_it_holds_goes_again_in_halves_until_the_refused_task_is_alone() -> None:
    batcher, clock = make(max_batch_tasks=100, linger_ms=60_000)
    refused, handles = refused_batch(batcher, clock, [task(n)[0] for n in range(1, 9)])
    later = take(batcher, clock, 9)  # gathers while the split goes on
    assert batcher.answer(refused.batch, error=errors.BadRequest("a token needs a pid")) == []
    no_pid = errors.BadRequest("a token needs a pid")
    parts = broker_answers(batcher, clock, refused.batch, lambda new: new.data == b"5", no_pid)
    # depth first, left to right: the accepted parts apply in the order of their tasks
    assert parts == [[1, 2, 3, 4], [5, 6, 7, 8], [5, 6], [5], [6], [7, 8]]
    assert refused.batch.signal is handles[0][0].signal and batcher.held == 1
    with pytest.raises(errors.BadRequest, match="needs a pid"):
        handles[4][0].outcome(handles[4][1])
    pids = [batch.outcome(index).pid for batch, index in handles if index != 4]
    assert pids == ["p1", "p2", "p3", "p4", "p6", "p7", "p8"]
    report = batcher.failure_report()
    assert isinstance(report, errors.BadRequest) and report.message.startswith("1 task(s) were not enqueued")
    stats = batcher.stats
    assert (stats.batches_sent, stats.tasks_sent, stats.split_sends) == (2, 9, 6)
    assert (stats.batches_failed, stats.tasks_failed) == (1, 1)
    assert numbers(send(batcher, clock).batch) == [9] and later[0].tasks  # the later batch goes only now


def test_a_refused_batch_is_split_by_queue_first_and_a_forbidden_queue_of_plain_tasks_no_further() -> None:
    batcher, clock = make(max_batch_tasks=100, linger_ms=60_000)
    tasks = [NewTask("x" if n % 3 == 0 else "q", b"%d" % n) for n in range(1, 10)]
    refused, handles = refused_batch(batcher, clock, tasks)
    batcher.answer(refused.batch, error=errors.Forbidden("may not produce into queue 'x'"))
    forbidden = errors.Forbidden("may not produce into queue 'x'")
    parts = broker_answers(batcher, clock, refused.batch, lambda new: new.queue == "x", forbidden)
    assert parts == [[1, 2, 4, 5, 7, 8], [3, 6, 9]]
    for (batch, index), new in zip(handles, tasks):
        if new.queue == "x":
            with pytest.raises(errors.Forbidden):
                batch.outcome(index)
        else:
            assert batch.outcome(index).pid == "p" + new.data.decode()
    assert (batcher.stats.tasks_failed, batcher.held) == (3, 0)


def test_the_parts_of_a_refused_batch_are_bounded() -> None:
    batcher, clock = make(max_batch_tasks=1000, max_buffer_tasks=2000, linger_ms=60_000)
    refused, handles = refused_batch(batcher, clock, [task(n)[0] for n in range(1, 1001)])
    batcher.answer(refused.batch, error=errors.BadRequest("every task is bad"))
    parts = broker_answers(batcher, clock, refused.batch, lambda new: True, errors.BadRequest("every task is bad"))
    assert len(parts) <= batching.MAX_SPLIT_SENDS == batcher.stats.split_sends
    assert batcher.stats.tasks_failed == 1000 and batcher.held == 0
    for batch, index in handles:
        with pytest.raises(errors.BadRequest):
            batch.outcome(index)


def test_an_outcome_unknown_is_never_split_and_a_broken_connection_fails_only_the_part_in_flight() -> None:
    batcher, clock = make(max_batch_tasks=100, linger_ms=60_000)
    lost, _ = refused_batch(batcher, clock, [task(n)[0] for n in range(1, 5)])
    assert batcher.answer(lost.batch, error=errors.ConnectionLost("the connection broke")) == [lost.batch]
    assert batcher.stats.split_sends == 0 and batcher.next_send(clock.now) is None
    refused, handles = refused_batch(batcher, clock, [task(n)[0] for n in range(5, 9)])
    batcher.answer(refused.batch, error=errors.BadRequest("refused"))
    first_part = send(batcher, clock)
    assert numbers(first_part.batch) == [5, 6]
    assert batcher.fail_in_flight(errors.ConnectionLost("the connection broke")) == []  # its batch still waits
    assert batcher.unsent  # the part not sent yet goes on the new connection
    parts = broker_answers(batcher, clock, refused.batch, lambda new: False, errors.BadRequest("refused"))
    assert parts == [[7, 8]]
    with pytest.raises(errors.ConnectionLost):
        handles[0][0].outcome(handles[0][1])
    assert [batch.outcome(index).pid for batch, index in handles[2:]] == ["p7", "p8"]
    assert batcher.held == 0 and batcher.flush() == []


def test_a_broken_connection_fails_the_batches_in_flight_and_the_rest_go_on() -> None:
    batcher, clock = make(max_batch_tasks=2, linger_ms=60_000)
    take(batcher, clock, 0)
    send(batcher, clock)
    take(batcher, clock, 1)
    take(batcher, clock, 2)
    send(batcher, clock)
    take(batcher, clock, 3)
    lost = batcher.fail_in_flight(errors.ConnectionLost("the connection broke"))
    assert len(lost) == 2 and batcher.held == 1
    later = send(batcher, clock)  # on a new connection: nothing in flight, the gathering batch goes alone
    assert (later.reason, numbers(later.batch)) == (SendReason.IDLE, [3])
    report = batcher.failure_report()
    assert isinstance(report, errors.ConnectionLost) and "3 task(s)" in report.message


def test_bytes_that_did_not_leave_go_again_first_keeping_their_reason_then_fail_as_not_sent() -> None:
    batcher, clock = make(linger_ms=60_000)
    take(batcher, clock, 0)
    due = batcher.next_send(clock.now)
    assert isinstance(due, Send) and due.reason == SendReason.IDLE
    take(batcher, clock, 1)
    assert batcher.not_sent(due, "broken pipe", ATTEMPTS_MAX) is None
    for _ in range(ATTEMPTS_MAX - 2):
        again = batcher.next_send(clock.now)
        assert isinstance(again, Send) and (again.batch, again.reason) == (due.batch, SendReason.IDLE)
        assert batcher.not_sent(again, "broken pipe", ATTEMPTS_MAX) is None
    last = batcher.next_send(clock.now)
    assert isinstance(last, Send) and last.batch is due.batch
    assert batcher.not_sent(last, "broken pipe", ATTEMPTS_MAX) is due.batch
    with pytest.raises(errors.BrokerUnreachable, match="could not be sent: broken pipe"):
        due.batch.outcome(0)
    assert batcher.stats.batches_sent == 0 and batcher.held == 1 and batcher.in_flight == 0
    assert numbers(send(batcher, clock).batch) == [1]  # order kept: the next one goes after it


# ------------------------------------------------------------------------------ the module


def test_the_rule_is_pure_no_clock_threads_or_sockets() -> None:
    tree = ast.parse(Path(batching.__file__).read_text())
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    forbidden = {"time", "asyncio", "socket", "select", "selectors", "threading", "kittiwake.client.pool",
                 "kittiwake.client.blocking_connection", "kittiwake.client.async_client"}
    assert not imported & forbidden


def test_one_set_of_reason_names_is_what_the_stats_report() -> None:
    assert ExportedStats is ProducerStats
    assert list(ProducerStats().sends) == [reason.value for reason in SendReason]
    assert [reason.value for reason in SendReason] == ["idle", "size", "linger", "reply", "flush"]


# ---------------------------------------------------------------- against a tiny model


@dataclass
class Handle:
    batch: Batch[Signal]
    index: int
    number: int


@dataclass
class Model:
    """What the rule must have done: the batches in the order made, why each must go, what is held."""

    max_tasks: int
    max_bytes: int
    max_held: int
    linger_secs: float
    block: bool
    unsent: list[Batch[Signal]] = field(default_factory=list)  # made, not yet sent, in order
    gathering: Batch[Signal] | None = None
    started: dict[int, float] = field(default_factory=dict)  # id(batch) -> its first task's time
    closed_by: dict[int, SendReason] = field(default_factory=dict)  # id(batch) -> why it closed
    in_flight: list[Send[Signal]] = field(default_factory=list)
    answered: bool = False
    closed: bool = False
    held: int = 0
    failed_since_report: int = 0
    outcomes: dict[int, str] = field(default_factory=dict)  # task number -> "ok" or the error code
    handles: list[Handle] = field(default_factory=list)


class BatcherMachine(RuleBasedStateMachine):
    """One batcher under a fake clock, its shell played by the rules, checked against `Model`."""

    @initialize(
        max_tasks=st.integers(1, 4), max_bytes=st.integers(1, 60), extra_held=st.integers(0, 12),
        linger_ms=st.sampled_from([0.0, 1.0, 5.0]), block=st.booleans(),
    )
    def start(self, max_tasks: int, max_bytes: int, extra_held: int, linger_ms: float, block: bool) -> None:
        self.clock = FakeClock()
        self.batcher: Batcher[Signal] = Batcher(
            ProducerSettings(linger_ms=linger_ms, max_batch_tasks=max_tasks, max_batch_bytes=max_bytes,
                             max_buffer_tasks=max_tasks + extra_held, block=block),
            Signal,
        )
        self.model = Model(max_tasks, max_bytes, max_tasks + extra_held, linger_ms / 1000.0, block)
        self.taken = 0

    # -------------------------------------------------------------------- rules

    @rule(sizes=st.lists(st.integers(1, 30), min_size=1, max_size=6))
    def take(self, sizes: list[int]) -> None:
        for size in sizes:
            self._take(size)

    def _take(self, size: int) -> None:
        model, number = self.model, self.taken
        new = NewTask("q", b"%d" % number)
        if model.closed:
            with pytest.raises(errors.ProducerClosed):
                self.batcher.take(new, size, self.clock.now)
            return
        if model.held >= model.max_held:
            if not model.block:
                with pytest.raises(errors.ProducerFull):
                    self.batcher.take(new, size, self.clock.now)
                return
            assert self.batcher.take(new, size, self.clock.now) is None
            if model.gathering is not None and not model.in_flight:
                self._close(SendReason.FLUSH)
            return
        batch = self.batcher.take(new, size, self.clock.now)
        assert batch is not None
        self.taken += 1
        if model.gathering is None:
            assert batch.tasks == [new], "a new batch starts with the task"
            model.gathering = batch
            model.unsent.append(batch)
            model.started[id(batch)] = self.clock.now
        assert batch is model.gathering and batch.tasks[-1] is new
        model.held += 1
        model.handles.append(Handle(batch, len(batch.tasks) - 1, number))
        if len(batch.tasks) >= model.max_tasks or batch.bytes >= model.max_bytes:
            self._close(SendReason.SIZE)

    @rule(ms=st.sampled_from([0.5, 1.0, 3.0, 6.0]))
    def tick(self, ms: float) -> None:
        self.clock.advance_ms(ms)

    @precondition(lambda self: bool(self.model.unsent))
    @rule(unwritten=st.lists(st.booleans(), max_size=3))
    def send_round(self, unwritten: list[bool]) -> None:
        """What a shell does: write every batch that is due, until told to wait; the i-th write
        fails if `unwritten[i]`."""
        for i in range(2 * MAX_IN_FLIGHT + len(unwritten)):  # two sends at most, and the retries
            if not self._ask(leaves=not (i < len(unwritten) and unwritten[i])):
                return
        raise AssertionError("a round of sends did not end")

    @rule(leaves=st.booleans() | st.just(True))
    def ask_what_to_send(self, leaves: bool) -> None:
        """One question to next_send, as a shell would not ask it (rounds end when told to wait)."""
        self._ask(leaves)

    def _ask(self, leaves: bool) -> bool:
        """Ask next_send and check its answer; write the batch it names (or fail to); whether it sent."""
        model, now = self.model, self.clock.now
        expected = self._expected(now)
        due = self.batcher.next_send(now)
        if not isinstance(due, Send):
            model.answered = False
            if isinstance(expected, float):
                assert isinstance(due, float) and due == pytest.approx(expected) and due > 0
            else:
                assert due is None and expected is None
            return False
        assert isinstance(expected, tuple), f"sent {due.reason} when nothing was due"
        assert (due.batch, due.reason) == expected
        model.unsent.pop(0)
        if due.batch is model.gathering:
            model.gathering = None
        model.closed_by[id(due.batch)] = due.reason
        model.in_flight.append(due)
        if leaves:
            self.batcher.sent(due)
            return True
        model.in_flight.remove(due)
        gives_up = due.batch.attempts + 1 >= ATTEMPTS_MAX
        if gives_up:
            self._settle(due.batch, errors.BrokerUnreachable.code)
        settled = self.batcher.not_sent(due, "broken pipe", ATTEMPTS_MAX)
        if gives_up:
            assert settled is due.batch
        else:
            assert settled is None
            model.unsent.insert(0, due.batch)
        return True

    @precondition(lambda self: bool(self.model.in_flight))
    @rule(which=st.integers(0, 1), ok=st.booleans())
    def answer(self, which: int, ok: bool) -> None:
        model = self.model
        send = model.in_flight.pop(which % len(model.in_flight))
        if ok:
            raw = msgspec.msgpack.encode([EnqueueOutcome("q", "p" + t.data.decode(), False) for t in send.batch.tasks])
            self._settle(send.batch, "ok")
            assert self.batcher.answer(send.batch, raw) == [send.batch]
        else:
            # an error that is not a refusal for what the batch holds: the batch fails whole (a
            # refusal that splits it is tested on its own, below the machine's model)
            self._settle(send.batch, errors.Unavailable.code)
            assert self.batcher.answer(send.batch, error=errors.Unavailable("refused")) == [send.batch]
        model.answered = True

    @rule(what=st.sampled_from(["lose connection", "flush", "flush", "report", "report", "close", "give up on unsent"]))
    def disrupt(self, what: str) -> None:
        """The rarer events, one rule for all, so that takes, sends and answers make most steps."""
        model = self.model
        if what == "lose connection":
            lost = [send.batch for send in model.in_flight]
            for batch in lost:
                self._settle(batch, errors.ConnectionLost.code)
            assert self.batcher.fail_in_flight(errors.ConnectionLost("the connection broke")) == lost
            model.in_flight.clear()
            model.answered = False
        elif what == "flush":
            if model.gathering is not None:
                self._close(SendReason.FLUSH)
            assert self.batcher.flush() == [send.batch for send in model.in_flight] + model.unsent
        elif what == "report":
            report = self.batcher.failure_report()
            if model.failed_since_report:
                assert report is not None and report.message.startswith(f"{model.failed_since_report} task(s)")
            else:
                assert report is None
            model.failed_since_report = 0
        elif what == "close":
            self.batcher.close()
            model.closed = True
        else:
            unsent = list(model.unsent)
            for batch in unsent:
                self._settle(batch, errors.ProducerClosed.code)
            assert self.batcher.fail_unsent(errors.ProducerClosed("closed")) == unsent
            model.unsent.clear()
            model.gathering = None

    # --------------------------------------------------------------- invariants

    @invariant()
    def held_and_in_flight_match(self) -> None:
        if not hasattr(self, "model"):
            return
        model, batcher = self.model, self.batcher
        assert batcher.held == model.held <= model.max_held
        assert batcher.in_flight == len(model.in_flight) <= MAX_IN_FLIGHT
        assert batcher.unsent == bool(model.unsent)
        stats = batcher.stats
        assert sum(stats.sends.values()) == stats.batches_sent

    @invariant()
    def settled_tasks_tell_their_outcome(self) -> None:
        if not hasattr(self, "model"):
            return
        for handle in self.model.handles:
            outcome = self.model.outcomes.get(handle.number)
            if outcome is None:
                continue
            if outcome == "ok":
                assert handle.batch.outcome(handle.index).pid == f"p{handle.number}"
            else:
                with pytest.raises(errors.KittiwakeError) as failed:
                    handle.batch.outcome(handle.index)
                assert failed.value.code == outcome

    # ------------------------------------------------------------------- inside

    def _expected(self, now: float) -> tuple[Batch[Signal], SendReason] | float | None:
        """The model's answer to next_send(now) (module docstring of `batching`, as a table)."""
        model = self.model
        if len(model.in_flight) >= MAX_IN_FLIGHT or not model.unsent:
            return None
        batch = model.unsent[0]
        if batch is not model.gathering:
            return batch, model.closed_by[id(batch)]  # closed (size, flush), or going again
        if model.answered:
            model.answered = False
            return batch, SendReason.REPLY
        if not model.in_flight:
            return batch, SendReason.IDLE
        deadline = model.started[id(batch)] + model.linger_secs
        if now >= deadline:
            return batch, SendReason.LINGER
        return deadline - now

    def _close(self, reason: SendReason) -> None:
        model = self.model
        assert model.gathering is not None
        model.closed_by[id(model.gathering)] = reason
        model.gathering = None

    def _settle(self, batch: Batch[Signal], outcome: str) -> None:
        model = self.model
        mine = [handle for handle in model.handles if handle.batch is batch]
        assert sorted(int(t.data) for t in batch.tasks) == sorted(handle.number for handle in mine)
        for handle in mine:
            assert handle.number not in model.outcomes, "a task settled twice"
            model.outcomes[handle.number] = outcome
        model.held -= len(mine)
        if outcome != "ok":
            model.failed_since_report += len(mine)


TestBatcherAgainstModel = BatcherMachine.TestCase
TestBatcherAgainstModel.settings = settings(
    max_examples=300, stateful_step_count=50, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)

"""The batching producer against a real broker: when batches go out, what their handles say, and
how memory stays bounded.

Why a batch went out is read from `producer.stats.sends`, never from timings. To hold batches in
flight the broker is paused with SIGSTOP (its socket still takes our bytes), and let go with SIGCONT.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import msgspec
import pytest

from kittiwake import Client, errors
from kittiwake.client import ProducerSettings, batching
from kittiwake.client.producer import Producer, Sending
from kittiwake.client.routed_producer import RoutedProducer
from kittiwake.constants import JOINS_QUEUE
from kittiwake.model import EnqueueOutcome
from support.auth_users import PRODUCER, ROOT, write_auth_file
from support.broker_process import BrokerProcess

WAIT_SECS = 30.0  # how long a condition may take to come true before the test fails (never reached when all is well)


@contextmanager
def paused(broker: BrokerProcess) -> Iterator[None]:
    """The broker stopped (SIGSTOP): requests reach its socket and get no reply until the block ends."""
    os.kill(broker.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(broker.pid, signal.SIGCONT)


def wait_for(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_SECS
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {WAIT_SECS} s: {what}")
        time.sleep(0.005)


@pytest.fixture
def client(broker: BrokerProcess) -> Iterator[Client]:
    with Client(broker.url) as made:
        yield made


def queue_values(client: Client, queue: str) -> list[bytes]:
    """The data of every task of `queue`, in pid order."""
    values: list[bytes] = []
    from_pid: str | None = None
    while True:
        page = client.peek(queue, 1000, from_pid)
        page = [task for task in page if task.pid != from_pid]
        if not page:
            return values
        values.extend(task.data for task in page)
        from_pid = page[-1].pid


# ------------------------------------------------------------------ when a batch goes out


def test_on_an_idle_broker_the_first_task_goes_out_at_once_alone(client: Client) -> None:
    with client.producer(linger_ms=60_000) as producer:
        outcome = producer.enqueue("idle", b"one").sent(timeout=WAIT_SECS)
        assert (outcome.queue, outcome.collapsed) == ("idle", False)
        assert producer.stats.sends["idle"] == 1 and producer.stats.batches_sent == 1
    assert client.get("idle", outcome.pid).data == b"one"


def test_a_full_batch_goes_out_behind_the_one_in_flight(broker: BrokerProcess, client: Client) -> None:
    producer = client.producer(linger_ms=60_000, max_batch_tasks=10)
    first = producer.enqueue("size", b"first")
    first.sent(timeout=WAIT_SECS)
    with paused(broker):
        handles = [producer.enqueue("size", b"%d" % i) for i in range(25)]
        # the first goes alone; the next 10 make a full batch, sent as the second in flight;
        # the 10 after them wait, full, for room
        assert producer.stats.sends == {"idle": 2, "size": 1, "linger": 0, "reply": 0, "flush": 0}
        assert producer.stats.tasks_sent == 12
        assert not handles[0].done()
    producer.flush(timeout=WAIT_SECS)
    assert first.sent().queue == "size" and all(handle.sent().queue == "size" for handle in handles)
    assert producer.stats.sends["size"] == 2 and producer.stats.largest_batch_tasks == 10
    producer.close()
    assert queue_values(client, "size") == [b"first", *(b"%d" % i for i in range(25))]


def test_a_batch_lingers_behind_the_one_in_flight_then_goes_out(broker: BrokerProcess, client: Client) -> None:
    producer = client.producer(linger_ms=20, max_batch_tasks=1000)
    wait_for(lambda: producer.stats.connections == 1, "connected")
    with paused(broker):
        producer.enqueue("linger", b"first")
        later = [producer.enqueue("linger", b"later-%d" % i) for i in range(3)]
        wait_for(lambda: producer.stats.sends["linger"] == 1, "the lingering batch sent")
        assert producer.stats.sends["idle"] == 1 and producer.stats.tasks_sent == 4
    assert [handle.sent(timeout=WAIT_SECS).queue for handle in later] == ["linger"] * 3
    producer.close()


def test_a_reply_sends_what_gathered_while_it_was_awaited(broker: BrokerProcess, client: Client) -> None:
    producer = client.producer(linger_ms=60_000, max_batch_tasks=1000)
    wait_for(lambda: producer.stats.connections == 1, "connected")
    with paused(broker):
        producer.enqueue("reply", b"first")
        gathered = [producer.enqueue("reply", b"g-%d" % i) for i in range(5)]
        assert producer.stats.batches_sent == 1
    # sent() does not push anything out: only the first batch's reply can send the other five
    assert gathered[-1].sent(timeout=WAIT_SECS).queue == "reply"
    assert producer.stats.sends == {"idle": 1, "size": 0, "linger": 0, "reply": 1, "flush": 0}
    assert producer.stats.largest_batch_tasks == 5
    producer.close()


def test_fifo_pids_follow_the_order_of_enqueue_across_batches(client: Client) -> None:
    with client.producer(max_batch_tasks=7) as producer:
        handles = [producer.enqueue("order", b"%04d" % i) for i in range(500)]
    pids = [handle.sent().pid for handle in handles]
    assert pids == sorted(pids) and len(set(pids)) == 500
    assert queue_values(client, "order") == [b"%04d" % i for i in range(500)]


def test_options_and_outcomes_per_task(client: Client) -> None:
    with client.producer() as producer:
        made = producer.enqueue("opts", "text", pid="p1", sender="me", headers={"k": "v"}, max_attempts=2)
        again = producer.enqueue("opts", b"other", pid="p1")
        child = producer.enqueue_task({"queue": "opts", "data": b"child", "pid": "p2", "after": [("opts", "p1")]})
    assert (made.sent().pid, made.sent().collapsed, again.sent().collapsed) == ("p1", False, True)
    view = client.get("opts", "p1")
    assert (view.data, view.sender, view.headers) == (b"text", "me", {"k": "v"})
    assert child.sent().pid == "p2" and client.get("opts", "p2").state == "blocked"


# ----------------------------------------------------------------------------- failures


def gathered_behind_one_in_flight(
    broker: BrokerProcess, producer: Producer, enqueue: Callable[[], list[Sending]], warm: str = "warm"
) -> list[Sending]:
    """What `enqueue` takes, gathered into one batch: the broker is paused with one task (into
    `warm`) in flight alone, so the rest waits for its reply and goes out as one batch."""
    wait_for(lambda: producer.stats.connections == 1, "connected")
    with paused(broker):
        producer.enqueue(warm, b"alone")
        return enqueue()


def test_a_task_the_broker_refuses_fails_alone_and_the_rest_of_its_batch_is_enqueued(
    broker: BrokerProcess, client: Client
) -> None:
    """BAD_REQUEST refuses a request whole before anything of it is applied: the batch goes again
    in parts (by queue, then halves) until the refused tasks are alone; the rest is enqueued, in order."""
    assert client.declare_join("j", "j.jobs", required={"a": "j.a", "b": "j.b"}) == "created"
    producer = client.producer(linger_ms=60_000)

    def enqueue() -> list[Sending]:
        first = [producer.enqueue("fine", b"good-%03d" % i) for i in range(50)]
        joins = producer.enqueue(JOINS_QUEUE, b"not yours")  # the broker's own queue
        tokens = [producer.enqueue("j.a", b"t", pid="k%03d" % i) for i in range(50)]
        no_pid = producer.enqueue("j.a", b"a token without its key")  # among good tokens of its queue
        tokens += [producer.enqueue("j.a", b"t", pid="k%03d" % i) for i in range(50, 100)]
        last = [producer.enqueue("fine", b"good-%03d" % i) for i in range(50, 100)]
        return [*first, *tokens, *last, joins, no_pid]

    handles = gathered_behind_one_in_flight(broker, producer, enqueue)
    *good, joins, no_pid = handles
    with pytest.raises(errors.BadRequest, match="_joins"):
        joins.sent(timeout=WAIT_SECS)
    with pytest.raises(errors.BadRequest, match="a token needs a pid"):
        no_pid.sent(timeout=WAIT_SECS)
    assert all(not handle.sent(timeout=WAIT_SECS).collapsed for handle in good)
    with pytest.raises(errors.BadRequest, match="2 task"):
        producer.flush()
    producer.flush()  # reported once
    stats = producer.stats
    assert (stats.batches_sent, stats.tasks_sent, stats.batches_failed, stats.tasks_failed) == (2, 203, 1, 2)
    assert 3 <= stats.split_sends <= batching.MAX_SPLIT_SENDS
    assert producer.enqueue("fine", b"after").sent(timeout=WAIT_SECS).queue == "fine"
    producer.close()
    assert queue_values(client, "fine") == [*(b"good-%03d" % i for i in range(100)), b"after"]
    assert [task.pid for task in client.peek("j.a", 1000)] == ["k%03d" % i for i in range(100)]


def test_a_refused_batch_with_a_child_and_its_parent_fails_whole_so_no_child_runs_early(
    broker: BrokerProcess, client: Client
) -> None:
    """Split by queue, a child's part could go ahead of its parent's and find no parent (which counts
    as finished): a batch naming other tasks (`after`, `unless`) is never split."""
    producer = client.producer(linger_ms=60_000)

    def enqueue() -> list[Sending]:
        return [producer.enqueue("qa", b"x"), producer.enqueue("qb", b"parent", pid="p1"),
                producer.enqueue("qa", b"child", pid="c1", after=[("qb", "p1")]),
                producer.enqueue(JOINS_QUEUE, b"not yours")]

    handles = gathered_behind_one_in_flight(broker, producer, enqueue)
    for handle in handles:
        with pytest.raises(errors.BadRequest):
            handle.sent(timeout=WAIT_SECS)
    with pytest.raises(errors.BadRequest):
        producer.flush()
    assert producer.stats.split_sends == 0
    producer.close()
    assert client.lease(["qa", "qb"], max_tasks=10) == []


def test_a_task_into_a_forbidden_queue_fails_alone_and_the_rest_of_its_batch_is_enqueued(tmp_path: Path) -> None:
    """FORBIDDEN refuses a request whole before anything of it runs: the one task into a queue the
    user may not produce into fails, the 100 batched with it are enqueued."""
    auth = write_auth_file(tmp_path / "users.json", {
        ROOT[0]: (ROOT[1], {"*": ["all"]}), PRODUCER[0]: (PRODUCER[1], {"tests.*": ["produce"]})})
    with BrokerProcess(tmp_path / "data", auth_file=auth) as broker, Client(broker.client_url(*PRODUCER)) as client:
        producer = client.producer(linger_ms=60_000)

        def enqueue() -> list[Sending]:
            good = [producer.enqueue("tests.good", b"good-%03d" % i) for i in range(50)]
            bad = producer.enqueue("other.queue", b"bad")
            good += [producer.enqueue("tests.good", b"good-%03d" % i) for i in range(50, 100)]
            return [*good, bad]

        *good, bad = gathered_behind_one_in_flight(broker, producer, enqueue, warm="tests.warm")
        with pytest.raises(errors.Forbidden, match="other.queue"):
            bad.sent(timeout=WAIT_SECS)
        pids = [handle.sent(timeout=WAIT_SECS).pid for handle in good]
        with pytest.raises(errors.Forbidden, match="1 task"):
            producer.flush()
        # one batch of 101, sent again as one part per queue; the forbidden one is not split further
        assert (producer.stats.batches_sent, producer.stats.split_sends, producer.stats.tasks_failed) == (2, 2, 1)
        producer.close()
        with Client(broker.client_url(*ROOT)) as root:
            assert queue_values(root, "tests.good") == [b"good-%03d" % i for i in range(100)]
            assert [task.pid for task in root.peek("tests.good", 1000)] == pids
            assert root.stats(["other.queue"])[0].size == 0


class RefusingChannel:
    """A channel as a cluster client's is to a `RoutedProducer`: it answers each enqueue whole, and
    refuses one naming `JOINS_QUEUE` as the broker does (BAD_REQUEST); the first request waits for
    `go`, so that the tasks after it gather into one batch."""

    def __init__(self) -> None:
        self.go = threading.Event()
        self.requests: list[list[bytes]] = []

    def request(self, call: Any, timeout: float | None) -> Any:
        tasks = call.request.tasks
        self.requests.append([task.data for task in tasks])
        self.go.wait(WAIT_SECS)
        if any(task.queue == JOINS_QUEUE for task in tasks):
            raise errors.BadRequest(f"{JOINS_QUEUE!r} is the broker's own queue: use declare_join")
        return msgspec.msgpack.encode([EnqueueOutcome(task.queue, task.data.decode(), False) for task in tasks])


def test_the_routed_producer_sends_a_refused_batch_again_in_parts_too() -> None:
    channel = RefusingChannel()
    producer = RoutedProducer(channel, ProducerSettings(linger_ms=60_000))  # type: ignore[arg-type]
    producer.enqueue("fine", b"alone")
    wait_for(lambda: len(channel.requests) == 1, "the first task on its way, alone")
    good = [producer.enqueue("fine", b"%d" % i) for i in range(4)]
    bad = producer.enqueue(JOINS_QUEUE, b"bad")
    good += [producer.enqueue("fine", b"%d" % i) for i in range(4, 8)]
    channel.go.set()
    with pytest.raises(errors.BadRequest, match="_joins"):
        bad.sent(timeout=WAIT_SECS)
    assert [handle.sent(timeout=WAIT_SECS).pid for handle in good] == [str(i) for i in range(8)]
    producer.close()
    assert channel.requests == [[b"alone"], [*(b"%d" % i for i in range(4)), b"bad", *(b"%d" % i for i in range(4, 8))],
                                [b"%d" % i for i in range(8)], [b"bad"]]


def test_a_broken_connection_fails_the_batches_in_flight_and_later_ones_go_on_a_new_one(
    broker: BrokerProcess, client: Client
) -> None:
    producer = client.producer(linger_ms=60_000, max_batch_tasks=5)
    wait_for(lambda: producer.stats.connections == 1, "connected")
    os.kill(broker.pid, signal.SIGSTOP)
    in_flight = [producer.enqueue("cut", b"a"), *(producer.enqueue("cut", b"b%d" % i) for i in range(5))]
    broker.kill()  # a stopped process dies of SIGKILL too
    for handle in in_flight:
        with pytest.raises(errors.ConnectionLost):
            handle.sent(timeout=WAIT_SECS)
    broker.restart()
    assert producer.enqueue("cut", b"later").sent(timeout=WAIT_SECS).queue == "cut"
    assert producer.stats.connections == 2
    producer.close()


def test_an_unreachable_broker_fails_the_tasks_as_not_sent() -> None:
    with Client("kw://127.0.0.1:9", connect_timeout=0.2) as client:
        producer = client.producer()
        handle = producer.enqueue("nowhere", b"x")
        with pytest.raises(errors.BrokerUnreachable):
            handle.sent(timeout=WAIT_SECS)
        producer.close()


# ------------------------------------------------------------------------ bounded memory


def test_a_full_buffer_refuses_without_blocking(broker: BrokerProcess, client: Client) -> None:
    producer = client.producer(max_batch_tasks=4, max_buffer_tasks=10, block=False, linger_ms=60_000)
    wait_for(lambda: producer.stats.connections == 1, "connected")
    with paused(broker):
        taken = [producer.enqueue("full", b"%d" % i) for i in range(10)]
        with pytest.raises(errors.ProducerFull) as refused:
            producer.enqueue("full", b"one too many")
        assert refused.value.code == "PRODUCER_FULL" and producer.held == 10
    assert [handle.sent(timeout=WAIT_SECS).queue for handle in taken] == ["full"] * 10
    assert producer.enqueue("full", b"room again").sent(timeout=WAIT_SECS).queue == "full"
    producer.close()


def test_a_full_buffer_blocks_until_answers_make_room(broker: BrokerProcess, client: Client) -> None:
    producer = client.producer(max_batch_tasks=4, max_buffer_tasks=8, linger_ms=60_000)
    wait_for(lambda: producer.stats.connections == 1, "connected")
    done = threading.Event()

    def enqueue_twelve() -> None:
        for i in range(12):
            producer.enqueue("blocked", b"%d" % i)
        done.set()

    with paused(broker):
        thread = threading.Thread(target=enqueue_twelve, daemon=True)
        thread.start()
        wait_for(lambda: producer.held == 8, "the buffer full")
        assert not done.is_set()  # held at 8 while nothing can be answered
    thread.join(WAIT_SECS)
    assert done.is_set()
    producer.close()
    assert len(queue_values(client, "blocked")) == 12


# ------------------------------------------------------------------ arguments and closing


@pytest.mark.parametrize(
    "settings",
    [
        {"linger_ms": -1}, {"linger_ms": "5"}, {"linger_ms": True}, {"max_batch_tasks": 0},
        {"max_batch_tasks": 10_001}, {"max_batch_bytes": 0}, {"max_batch_bytes": 1 << 30},
        {"max_buffer_tasks": 5, "max_batch_tasks": 10}, {"block": "yes"}, {"max_batch_tasks": 2.5},
    ],
)
def test_settings_are_checked_where_they_are_given(client: Client, settings: dict[str, object]) -> None:
    with pytest.raises(errors.BadRequest) as refused:
        client.producer(**settings)  # type: ignore[arg-type]
    assert refused.value.code == "BAD_REQUEST"
    with pytest.raises(errors.BadRequest):
        ProducerSettings.of(settings)


@pytest.mark.parametrize(
    "queue, data, options",
    [
        ("", b"x", {}), ("bad name!", b"x", {}), (3, b"x", {}), (["q"], b"x", {}), ("q", 3, {}), ("q", b"x" * ((1 << 20) + 1), {}),
        ("q", b"x", {"pid": 5}), ("q", b"x", {"headers": {"bad key!": "v"}}), ("q", b"x", {"max_attempts": 0}),
        ("q", b"x", {"after": "q/p"}),
    ],
)
def test_a_task_the_broker_would_refuse_is_refused_at_once(
    client: Client, queue: object, data: object, options: dict[str, object]
) -> None:
    with client.producer() as producer:
        with pytest.raises(errors.BadRequest):
            producer.enqueue(queue, data, **options)  # type: ignore[arg-type]
        assert producer.held == 0 and producer.stats.batches_sent == 0


def test_a_closed_producer_takes_nothing(client: Client) -> None:
    producer = client.producer()
    handle = producer.enqueue("closing", b"x")
    producer.close()
    assert handle.sent().queue == "closing"  # close sends what it holds first
    with pytest.raises(errors.ProducerClosed) as refused:
        producer.enqueue("closing", b"y")
    assert refused.value.code == "PRODUCER_CLOSED"
    producer.close()  # twice is fine


def test_threads_share_a_producer(client: Client) -> None:
    with client.producer(max_batch_tasks=50) as producer:
        def produce(name: str) -> None:
            for i in range(300):
                producer.enqueue("threads", f"{name}-{i}")

        threads = [threading.Thread(target=produce, args=(f"t{n}",)) for n in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    values = queue_values(client, "threads")
    assert sorted(values) == sorted(f"t{n}-{i}".encode() for n in range(4) for i in range(300))
    for n in range(4):  # each thread's tasks keep their order
        mine = [value for value in values if value.startswith(f"t{n}-".encode())]
        assert mine == [f"t{n}-{i}".encode() for i in range(300)]

"""`Client("kwu://…")`: the operations over UDP, and nothing lost or doubled through a lossy relay.

The relay (`kittiwake.bench.udp_relay`) drops, duplicates and reorders
datagrams with a seeded random generator; the queue checker
(`support.checker`) judges the run from what the clients saw and what is left
in the queue, drained over TCP.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

from kittiwake import errors
from kittiwake.bench.udp_relay import Faults, UdpRelay
from kittiwake.client import Client
from kittiwake.client.udp_channel import UdpChannel
from kittiwake.client.url import parse_url
from support.broker_process import BrokerProcess
from support.auth_users import ALICE, ROOT, standard_auth_file
from support.checker import DELIVER, DEQUEUE, ENQUEUE, History, check
from support.udp_faults import PolicyRelay, flood_sessions, is_ok_reply, request_id


@pytest.fixture
def udp_broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path / "data", extra_args=["--udp-port", "0"])
    try:
        yield process
    finally:
        process.kill()


@pytest.fixture
def client(udp_broker: BrokerProcess) -> Iterator[Client]:
    with Client(udp_broker.udp_url, timeout=10) as udp:
        yield udp


def test_kwu_urls_name_the_udp_port() -> None:
    address = parse_url("kwu://broker.example:9000")
    assert (address.udp, address.tls, address.port, address.url) == (True, False, 9000, "kwu://broker.example:9000")
    assert parse_url("kwu://h").port == 7372


def test_the_operations_round_trip(client: Client, udp_broker: BrokerProcess) -> None:
    assert "now" in client.ping()
    first = client.enqueue("udp.ops", b"one", pid="a")
    assert (first.pid, first.collapsed) == ("a", False)
    assert client.enqueue("udp.ops", b"again", pid="a").collapsed
    outcomes = client.enqueue_many([{"queue": "udp.ops", "data": f"task {n}".encode()} for n in range(100)])
    assert len(outcomes) == 100 and len({outcome.pid for outcome in outcomes}) == 100  # split over datagrams, in order
    leased = client.lease("udp.ops", max_tasks=3, lease_secs=60)
    assert [task.data for task in leased] == [b"task 0", b"task 1", b"task 2"]
    assert client.renew(leased[0], lease_secs=120).ok
    assert client.release(leased[1]).ok
    assert [outcome.ok for outcome in client.dequeue([leased[0], leased[2]])] == [True, True]
    with pytest.raises(errors.TaskNotFound):
        client.dequeue(leased[0])  # finished already: a new request, not a retransmission
    (stats,) = client.stats(["udp.ops"])
    assert stats.queue == "udp.ops"
    with Client(udp_broker.url) as tcp:
        assert len(tcp.peek("udp.ops", n=1000)) == 99  # the collapsed one, and 98 of the 100


def test_a_lease_returns_the_tasks_that_fit_and_reports_those_too_large_for_udp(
    client: Client, udp_broker: BrokerProcess, caplog: pytest.LogCaptureFixture
) -> None:
    tasks = [("1", b"small 1"), ("2", bytes(5000)), ("3", b"small 3"), ("4", b"small 4")]
    with Client(udp_broker.url) as tcp:
        tcp.enqueue_many([{"queue": "udp.mixed", "data": data, "pid": pid} for pid, data in tasks])
    with caplog.at_level(logging.WARNING, logger="kittiwake.client"):
        leased = client.lease("udp.mixed", max_tasks=10, lease_secs=60)
    assert [task.data for task in leased] == [b"small 1", b"small 3", b"small 4"]
    channel = client._channel
    assert isinstance(channel, UdpChannel) and channel.too_large_reported == 1
    assert "1 task too large for a UDP datagram" in caplog.text and "kw://" in caplog.text
    with Client(udp_broker.url) as tcp:
        huge = tcp.get("udp.mixed", "2")
        assert (huge.state, huge.attempts) == ("available", 0)
        assert [task.pid for task in tcp.lease("udp.mixed", max_tasks=10)] == ["2"]


def test_a_task_a_udp_long_poll_passed_over_goes_to_a_tcp_long_poll(client: Client, udp_broker: BrokerProcess) -> None:
    """A lease bounded by a datagram that leaves tasks behind has not drained the queue: the
    long-polls waiting behind it on the same queue are still tried."""
    got: dict[str, list[str]] = {}

    def poll(name: str, lease: Any) -> None:
        got[name] = [task.pid for task in lease("udp.poll", max_tasks=10, lease_secs=60, wait_secs=10)]

    with Client(udp_broker.url, timeout=30) as tcp:
        udp_poll = threading.Thread(target=poll, args=("udp", client.lease))
        udp_poll.start()
        time.sleep(0.3)  # parked first, so tried first
        tcp_poll = threading.Thread(target=poll, args=("tcp", tcp.lease))
        tcp_poll.start()
        time.sleep(0.3)
        with Client(udp_broker.url) as producer:
            producer.enqueue_many([{"queue": "udp.poll", "data": b"small", "pid": "1"},
                                   {"queue": "udp.poll", "data": bytes(5000), "pid": "2"}])
        udp_poll.join(15)
        tcp_poll.join(15)
    assert got == {"udp": ["1"], "tcp": ["2"]}  # not [] at the TCP long-poll's deadline


def test_an_enqueue_of_many_tiny_tasks_is_split_so_that_each_reply_fits_too(
    client: Client, udp_broker: BrokerProcess
) -> None:
    """Each outcome names a 17-digit pid the request did not carry: the replies, not the requests,
    are what the split must fit."""
    outcomes = client.enqueue_many([{"queue": "q", "data": b""} for _ in range(200)])
    assert len(outcomes) == 200 and len({outcome.pid for outcome in outcomes}) == 200
    with Client(udp_broker.url) as tcp:
        assert len(tcp.peek("q", n=1000)) == 200


def test_a_request_too_large_for_a_datagram_is_refused_before_it_is_sent(client: Client) -> None:
    with pytest.raises(errors.FrameTooLarge, match="UDP"):
        client.enqueue("udp.big", bytes(2000))
    with pytest.raises(errors.FrameTooLarge):
        client.enqueue_many([{"queue": "udp.big", "data": b"small"}, {"queue": "udp.big", "data": bytes(2000)}])


def test_no_broker_means_a_timeout_with_an_unknown_outcome() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]  # bound, never read: datagrams vanish
        with Client(f"kwu://127.0.0.1:{port}") as client:
            with pytest.raises(errors.RequestTimeout, match="may or may not"):
                client.enqueue("q", b"x", timeout=0.5)


def test_async_client_refuses_kwu() -> None:
    from kittiwake import AsyncClient

    with pytest.raises(errors.BadRequest, match="kwu"):
        AsyncClient("kwu://127.0.0.1:7372")


def test_duplicated_replies_are_ignored(udp_broker: BrokerProcess) -> None:
    assert udp_broker.udp_port is not None
    with UdpRelay(("127.0.0.1", udp_broker.udp_port), Faults(duplicate_rate=1.0, seed=3)) as relay:
        with Client(f"kwu://127.0.0.1:{relay.port}", timeout=10) as client:
            pids = [client.enqueue("udp.dup", f"{n}".encode()).pid for n in range(20)]
            channel = client._channel
            assert isinstance(channel, UdpChannel)
            ignored = channel.ignored_replies
        counts = relay.counts()
    # every request datagram went twice (a retransmit on a slow machine is one more, duplicated too)
    assert counts.upstream.duplicated == counts.upstream.received >= 20 and ignored >= 1
    with Client(udp_broker.url) as tcp:
        assert [task.pid for task in tcp.peek("udp.dup", n=100)] == pids  # each once, in order


@pytest.mark.parametrize(
    "faults",
    [
        Faults(drop_rate=0.05, seed=11),
        Faults(drop_rate=0.05, duplicate_rate=0.05, reorder_rate=0.1, reorder_delay_secs=0.01, seed=12),
    ],
    ids=["loss", "loss-duplicates-reordering"],
)
def test_nothing_is_lost_or_doubled_through_a_lossy_relay(udp_broker: BrokerProcess, faults: Faults) -> None:
    assert udp_broker.udp_port is not None
    queue = "udp.lossy"
    history = History()
    producers, batches, batch = 4, 25, 5
    with UdpRelay(("127.0.0.1", udp_broker.udp_port), faults) as relay:
        url = f"kwu://127.0.0.1:{relay.port}"
        with Client(url, timeout=10) as client:

            def produce(k: int) -> None:
                for b in range(batches):
                    values = [f"p{k}-{b}-{n}" for n in range(batch)]
                    op = history.invoke(f"producer-{k}", ENQUEUE, values)
                    try:
                        client.enqueue_many([{"queue": queue, "data": value.encode()} for value in values])
                    except (errors.RequestTimeout, errors.Unavailable) as exc:
                        history.unknown(op, exc)
                    except errors.KittiwakeError as exc:
                        history.fail(op, exc)
                    else:
                        history.ok(op)

            def consume() -> None:
                idle = 0
                while idle < 20:
                    deliver = history.invoke("consumer", DELIVER)
                    try:
                        leased = client.lease(queue, max_tasks=5, lease_secs=120)
                    except errors.KittiwakeError as exc:
                        history.unknown(deliver, exc)
                        continue
                    values = [task.data.decode() for task in leased]
                    history.ok(deliver, values, expires_at={task.data.decode(): task.expires_at for task in leased})
                    idle = idle + 1 if not leased else 0
                    if not leased:
                        continue
                    ack = history.invoke("consumer", DEQUEUE, values)
                    try:
                        outcomes = client.dequeue(leased)
                    except errors.KittiwakeError as exc:
                        history.unknown(ack, exc)
                    else:
                        history.ok(ack, [value for value, outcome in zip(values, outcomes) if outcome.ok])

            threads = [threading.Thread(target=produce, args=(k,)) for k in range(producers)]
            threads.append(threading.Thread(target=consume))
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        counts = relay.counts()
    with Client(udp_broker.url) as tcp:  # drain what the consumer left, over TCP
        drained = []
        while leased := tcp.lease(queue, max_tasks=1000, lease_secs=300):
            drained.extend(task.data.decode() for task in leased)
            tcp.dequeue(leased)
    result = check(history, drained)
    print(result.format(), counts.as_dict())
    assert counts.total("dropped") > 0
    assert result.valid, result.format()
    assert result.counts()["lost"] == 0 and result.counts()["duplicated"] == 0, result.format()
    assert result.acknowledged + result.enqueue_unknown == producers * batches * batch


def test_a_long_poll_lease_over_udp_waits_for_a_task(client: Client, udp_broker: BrokerProcess) -> None:
    assert client.lease("udp.wait", wait_secs=0.3) == []
    def enqueue_late() -> None:
        with Client(udp_broker.url) as tcp:
            tcp.enqueue("udp.wait", b"late")

    timer = threading.Timer(0.3, enqueue_late)
    timer.start()
    try:
        leased = client.lease("udp.wait", wait_secs=10)
    finally:
        timer.join()
    assert [task.data for task in leased] == [b"late"]


# ------------------------------------- sessions lost mid-call, lost long-poll replies


@pytest.fixture
def auth_broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path / "data", extra_args=["--udp-port", "0"], auth_file=standard_auth_file(
        tmp_path / "users.json"))
    try:
        yield process
    finally:
        process.kill()


def test_a_lost_enqueue_reply_is_not_enqueued_again_when_the_session_was_pushed_out(
    auth_broker: BrokerProcess,
) -> None:
    """The reply of an enqueue is lost and the producer's session pushed out before it retransmits:
    the broker answered the copy UNAUTHORIZED, the client authenticated again and sent the enqueue
    under a new id — two tasks, and the call said ok. The copy now gets the cached reply."""
    from kittiwake.broker.udp.listener import MAX_SESSIONS

    assert auth_broker.udp_port is not None
    broker = (auth_broker.host, auth_broker.udp_port)
    dropped: list[int] = []

    def policy(direction: str, data: bytes) -> list[bytes]:
        if direction == "b2c" and request_id(data) >= 2 and is_ok_reply(data) and not dropped:
            dropped.append(request_id(data))
            flood_sessions(broker, ALICE, MAX_SESSIONS + 1, ["127.0.0.1"])  # alice's churn pushes hers out
            return []
        return [data]

    with PolicyRelay(broker, policy) as relay:
        with Client(f"kwu://{ALICE[0]}:{ALICE[1]}@127.0.0.1:{relay.port}", timeout=30) as alice:
            outcome = alice.enqueue("alice.evicted", b"only once")
    assert dropped == [2]
    with Client(auth_broker.client_url(*ROOT)) as root:
        assert [task.pid for task in root.peek("alice.evicted", n=10)] == [outcome.pid]


@pytest.mark.parametrize("part_retransmitted", [False, True], ids=["part-sent-once", "part-retransmitted"])
def test_an_enqueue_many_split_over_a_restart_sends_no_part_twice(
    auth_broker: BrokerProcess, part_retransmitted: bool
) -> None:
    """The broker restarts (forgetting sessions and window) between the reply to part 1 of an
    enqueue_many and part 2: the client sent the WHOLE call again after authenticating, so part 1
    was enqueued twice and the call said ok. Now a part answered UNAUTHORIZED at its first datagram
    (it never ran) is sent again alone; one whose copies may have run fails CONNECTION_LOST, and the
    parts before it stay enqueued, once."""
    assert auth_broker.udp_port is not None
    broker = (auth_broker.host, auth_broker.udp_port)
    state = {"restarted": False, "dropped": 0}

    def policy(direction: str, data: bytes) -> list[bytes]:
        if direction == "b2c" and request_id(data) == 2 and is_ok_reply(data) and not state["restarted"]:
            auth_broker.restart()  # on the same ports
            state["restarted"] = True
        if direction == "c2b" and part_retransmitted and request_id(data) == 3 and not state["dropped"]:
            state["dropped"] += 1  # part 2's first datagram is lost: its copy reaches the new broker
            return []
        return [data]

    tasks = [{"queue": "alice.split", "data": b"task-%03d" % n + b"x" * 60} for n in range(40)]
    with PolicyRelay(broker, policy) as relay:
        with Client(f"kwu://{ALICE[0]}:{ALICE[1]}@127.0.0.1:{relay.port}", timeout=30) as alice:
            if part_retransmitted:
                with pytest.raises(errors.ConnectionLost, match="may or may not"):
                    alice.enqueue_many(tasks)
            else:
                assert len(alice.enqueue_many(tasks)) == 40
    assert state["restarted"]
    with Client(auth_broker.client_url(*ROOT)) as root:
        datas = [task.data for task in root.peek("alice.split", n=1000)]
    assert len(datas) == len(set(datas))  # nothing twice
    if part_retransmitted:
        assert 0 < len(datas) < 40 and datas == [task["data"] for task in tasks[: len(datas)]]
    else:
        assert sorted(datas) == sorted(task["data"] for task in tasks)


def test_an_enqueue_with_pids_retransmitted_over_a_restart_is_sent_again_and_collapses(
    auth_broker: BrokerProcess,
) -> None:
    """As above, part 2's first datagram lost and its copy reaching the restarted broker, but every
    task has a pid: sent again as new it collapses where a copy ran (docs/client.md: give tasks pids
    to keep them single across a restart), so the call succeeds and each task is there once."""
    assert auth_broker.udp_port is not None
    broker = (auth_broker.host, auth_broker.udp_port)
    state = {"restarted": False, "dropped": 0}

    def policy(direction: str, data: bytes) -> list[bytes]:
        if direction == "b2c" and request_id(data) == 2 and is_ok_reply(data) and not state["restarted"]:
            auth_broker.restart()
            state["restarted"] = True
        if direction == "c2b" and request_id(data) == 3 and not state["dropped"]:
            state["dropped"] += 1
            return []
        return [data]

    tasks = [{"queue": "alice.split", "pid": "p%03d" % n, "data": b"task-%03d" % n + b"x" * 60} for n in range(40)]
    with PolicyRelay(broker, policy) as relay:
        with Client(f"kwu://{ALICE[0]}:{ALICE[1]}@127.0.0.1:{relay.port}", timeout=30) as alice:
            assert len(alice.enqueue_many(tasks)) == 40
    assert state["restarted"]
    with Client(auth_broker.client_url(*ROOT)) as root:
        assert [task.pid for task in root.peek("alice.split", n=1000)] == [task["pid"] for task in tasks]


def test_a_lost_long_poll_reply_is_fetched_again_soon(udp_broker: BrokerProcess) -> None:
    """The reply of a long-poll is lost: the client sent the lease again only after wait_secs + RTO,
    so with a long wait the broker's cached reply (30 s) had gone, and the task sat leased to nobody
    while the call waited. A parked long-poll is now resent every few seconds: the broker drops the
    copies while it waits, and answers one after from its window."""
    assert udp_broker.udp_port is not None
    lost: list[float] = []

    def policy(direction: str, data: bytes) -> list[bytes]:
        if direction == "b2c" and is_ok_reply(data) and not lost:
            lost.append(time.monotonic())
            return []
        return [data]

    with PolicyRelay(("127.0.0.1", udp_broker.udp_port), policy) as relay:
        with Client(f"kwu://127.0.0.1:{relay.port}", timeout=10) as consumer:
            def enqueue_late() -> None:
                with Client(udp_broker.url) as producer:
                    producer.enqueue("udp.lost", b"x")

            timer = threading.Timer(0.5, enqueue_late)
            timer.start()
            started = time.monotonic()
            try:
                leased = consumer.lease("udp.lost", max_tasks=1, lease_secs=120, wait_secs=20)
            finally:
                timer.join()
            took = time.monotonic() - started
    assert lost and [task.data for task in leased] == [b"x"]
    assert took < 8, took  # not the 20 s wait
    with Client(udp_broker.url) as tcp:
        (stats,) = tcp.stats(["udp.lost"])
        assert (stats.leased, stats.available) == (1, 0)  # leased once, to this call

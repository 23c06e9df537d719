"""kombu on a real Kittiwake broker: the cases kombu's own integration suite runs on every transport
(publish and consume, simple queues, ack, reject, requeue, priority, TTL, purge, size, exchange
types), plus what a lease-based transport promises beyond them: a killed consumer's message
comes back, and a closed one's comes back without counting an attempt."""

from __future__ import annotations

import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from contextlib import closing

import kombu
import pytest

import kittiwake
import kittiwake.kombu  # registers kittiwake://
from kittiwake.kombu.transport import Transport

pytestmark = pytest.mark.timeout(60)


def kombu_url(broker, **options: object) -> str:
    query = "&".join(f"{key}={value}" for key, value in options.items())
    return f"kittiwake://{broker.host}:{broker.port}" + (f"?{query}" if query else "")


@pytest.fixture
def connection(broker) -> Iterator[kombu.Connection]:
    with kombu.Connection(kombu_url(broker)) as conn:
        yield conn


def drain(conn: kombu.Connection, queue: kombu.Queue, count: int, *, ack: bool = True) -> list[kombu.Message]:
    got: list[kombu.Message] = []

    def on_message(body: object, message: kombu.Message) -> None:
        got.append(message)
        if ack:
            message.ack()

    with conn.Consumer([queue], callbacks=[on_message], accept=["json", "pickle"]):
        while len(got) < count:
            conn.drain_events(timeout=5)
    return got


def test_publish_consume(connection: kombu.Connection) -> None:
    queue = kombu.Queue("test_publish", routing_key="test_publish")
    connection.Producer().publish(
        {"hello": "world"}, exchange=queue.exchange, routing_key="test_publish", declare=[queue], serializer="pickle"
    )
    [message] = drain(connection, queue, 1)
    assert message.payload == {"hello": "world"}
    assert message.content_type == "application/x-python-serialize"
    assert message.delivery_info["routing_key"] == "test_publish"


def test_simple_queue_keeps_headers_and_content_type(connection: kombu.Connection) -> None:
    with closing(connection.SimpleQueue("simple_queue")) as queue:
        queue.put({"Hello": "World"}, headers={"k1": "v1"})
        message = queue.get(timeout=5)
        assert (message.payload, message.content_type, message.content_encoding) == (
            {"Hello": "World"}, "application/json", "utf-8"
        )
        assert message.headers == {"k1": "v1"}
        message.ack()
        with pytest.raises(queue.Empty):
            queue.get(timeout=0.2)


def test_bytes_body_travels_unchanged(connection: kombu.Connection) -> None:
    with closing(connection.SimpleQueue("raw_bytes", serializer=None)) as queue:
        body = bytes(range(256))
        queue.put(body, content_type="application/octet-stream", content_encoding="binary")
        message = queue.get(timeout=5)
        assert message.body == body
        message.ack()


def test_ack_removes_the_message_from_the_broker(broker, connection: kombu.Connection) -> None:
    with closing(connection.SimpleQueue("acked")) as queue:
        queue.put({"n": 1})
        assert queue.qsize() == 1
        queue.get(timeout=5).ack()
    connection.release()  # closing the connection sends the acks still waiting
    with kittiwake.Client(broker.url) as client:
        assert client.peek("acked") == []


def test_unacked_message_is_leased_not_removed(broker, connection: kombu.Connection) -> None:
    with closing(connection.SimpleQueue("unacked")) as queue:
        queue.put({"n": 1})
        message = queue.get(timeout=5)
        with kittiwake.Client(broker.url) as client:
            [view] = client.peek("unacked")
            assert view.state == "leased"
            assert client.lease("unacked", wait_secs=0) == []  # nobody else gets it meanwhile
        message.ack()


def test_reject_without_requeue_dead_letters(broker, connection: kombu.Connection) -> None:
    with closing(connection.SimpleQueue("rejected")) as queue:
        queue.put({"n": 1})
        queue.get(timeout=5).reject()
        with pytest.raises(queue.Empty):
            queue.get(timeout=0.2)
    with kittiwake.Client(broker.url) as client:
        [dead] = client.peek("rejected.dead")
        assert dead.headers["kittiwake-dead-reason"] == "REJECTED"


def test_requeue_redelivers_and_counts_an_attempt(broker, connection: kombu.Connection) -> None:
    with closing(connection.SimpleQueue("requeued")) as queue:
        queue.put({"n": 1})
        first = queue.get(timeout=5)
        assert first.delivery_info["redelivered"] is False
        first.requeue()
        again = queue.get(timeout=5)
        assert again.payload == {"n": 1} and again.delivery_info["redelivered"] is True
        with kittiwake.Client(broker.url) as client:
            [view] = client.peek("requeued")
            assert view.attempts == 1
        again.ack()


def test_requeue_past_max_attempts_dead_letters(broker) -> None:
    with kombu.Connection(kombu_url(broker, max_attempts=2)) as conn, closing(conn.SimpleQueue("poison")) as queue:
        queue.put({"n": 1})
        queue.get(timeout=5).requeue()
        queue.get(timeout=5).requeue()
        with pytest.raises(queue.Empty):
            queue.get(timeout=0.2)
    with kittiwake.Client(broker.url) as client:
        assert len(client.peek("poison.dead")) == 1


def test_closing_gives_unacked_messages_back_without_an_attempt(broker) -> None:
    with kombu.Connection(kombu_url(broker)) as conn, closing(conn.SimpleQueue("restored")) as queue:
        queue.put({"n": 1})
        queue.get(timeout=5)  # never acked
    with kittiwake.Client(broker.url) as client:
        [view] = client.peek("restored")
        assert (view.state, view.attempts) == ("available", 0)


def test_killed_consumer_message_returns_after_its_lease(broker, tmp_path) -> None:
    script = textwrap.dedent(
        f"""
        import os, kombu, kittiwake.kombu
        conn = kombu.Connection({kombu_url(broker, lease_secs=1)!r})
        queue = conn.SimpleQueue("killed")
        message = queue.get(timeout=5)
        print("got", message.payload["n"], flush=True)
        os.kill(os.getpid(), 9)
        """
    )
    with kombu.Connection(kombu_url(broker)) as conn, closing(conn.SimpleQueue("killed")) as queue:
        queue.put({"n": 7})
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=30)
        assert done.returncode == -9 and "got 7" in done.stdout, done.stderr
        message = queue.get(timeout=10)  # back once the dead consumer's one-second lease ran out
        assert message.payload == {"n": 7} and message.delivery_info["redelivered"] is True
        message.ack()


@pytest.mark.parametrize(("order", "expected"), [("amqp", [9, 5, 5, 1, 0]), ("asc", [0, 1, 5, 5, 9])])
def test_priority_orders_delivery(broker, order: str, expected: list[int]) -> None:
    queue = kombu.Queue(f"priority_{order}", routing_key=f"priority_{order}", max_priority=10)
    with kombu.Connection(kombu_url(broker, priority_order=order)) as conn:
        producer = conn.Producer()
        for index, priority in enumerate([5, 0, 9, 1, 5]):
            producer.publish({"p": priority, "i": index}, routing_key=queue.routing_key, declare=[queue],
                             priority=priority)
        got = drain(conn, queue, 5)
    assert [message.payload["p"] for message in got] == expected
    fives = [message.payload["i"] for message in got if message.payload["p"] == 5]
    assert fives == [0, 4]  # FIFO within a priority


def test_message_expiration_drops_expired_messages(connection: kombu.Connection) -> None:
    queue = kombu.Queue("ttl_message", routing_key="ttl_message")
    producer = connection.Producer()
    producer.publish({"n": "expired"}, routing_key="ttl_message", declare=[queue], expiration=0.001)
    producer.publish({"n": "kept"}, routing_key="ttl_message", declare=[queue], expiration=60)

    time.sleep(0.05)
    [message] = drain(connection, queue, 1)
    assert message.payload == {"n": "kept"}
    with closing(connection.SimpleQueue("ttl_message")) as simple:
        with pytest.raises(simple.Empty):
            simple.get(timeout=0.2)


def test_queue_message_ttl(connection: kombu.Connection) -> None:
    queue = kombu.Queue("ttl_queue", routing_key="ttl_queue", message_ttl=0.001)
    connection.Producer().publish({"n": 1}, routing_key="ttl_queue", declare=[queue])

    time.sleep(0.05)
    with closing(connection.SimpleQueue(queue)) as simple:
        with pytest.raises(simple.Empty):
            simple.get(timeout=0.2)


def test_purge_and_size(connection: kombu.Connection) -> None:
    with closing(connection.SimpleQueue("purged")) as queue:
        for n in range(5):
            queue.put({"n": n})
        assert queue.qsize() == 5
        assert queue.clear() == 5
        assert queue.qsize() == 0


def test_topic_exchange_routes_by_pattern(connection: kombu.Connection) -> None:
    exchange = kombu.Exchange("topics", type="topic")
    eu = kombu.Queue("topic_eu", exchange, routing_key="orders.eu.*")
    everything = kombu.Queue("topic_all", exchange, routing_key="orders.#")
    producer = connection.Producer()
    producer.publish({"to": "eu"}, exchange=exchange, routing_key="orders.eu.paris", declare=[eu, everything])
    producer.publish({"to": "us"}, exchange=exchange, routing_key="orders.us.nyc", declare=[eu, everything])
    assert [message.payload["to"] for message in drain(connection, eu, 1)] == ["eu"]
    assert sorted(message.payload["to"] for message in drain(connection, everything, 2)) == ["eu", "us"]


def test_fanout_reaches_queues_bound_by_other_connections(broker) -> None:
    exchange = kombu.Exchange("broadcast", type="fanout")
    with kombu.Connection(kombu_url(broker)) as first, kombu.Connection(kombu_url(broker)) as second:
        for conn, name in ((first, "fan_a"), (second, "fan_b")):
            kombu.Queue(name, exchange)(conn.default_channel).declare()
        with kombu.Connection(kombu_url(broker)) as publisher:  # declared nothing itself
            publisher.Producer().publish({"hi": 1}, exchange="broadcast", routing_key="")
        for conn, name in ((first, "fan_a"), (second, "fan_b")):
            assert [message.payload for message in drain(conn, kombu.Queue(name, exchange), 1)] == [{"hi": 1}]


def test_deleting_a_queue_unbinds_it(broker) -> None:
    exchange = kombu.Exchange("broadcast_gone", type="fanout")
    with kombu.Connection(kombu_url(broker)) as conn:
        bound = kombu.Queue("fan_gone", exchange)(conn.default_channel)
        bound.declare()
        bound.delete()
    with kombu.Connection(kombu_url(broker)) as publisher:
        publisher.Producer().publish({"hi": 1}, exchange="broadcast_gone", routing_key="")
    with kittiwake.Client(broker.url) as client:
        assert client.peek("fan_gone") == []


def test_odd_queue_names_round_trip(connection: kombu.Connection) -> None:
    with closing(connection.SimpleQueue("a queue#with:odd chars")) as queue:
        queue.put({"n": 1})
        message = queue.get(timeout=5)
        assert message.payload == {"n": 1}
        message.ack()


def test_transport_resolves_from_the_url_alias(connection: kombu.Connection) -> None:
    assert isinstance(connection.transport, Transport)
    assert connection.transport.options.lease_secs == 60.0


def test_held_message_stays_leased_past_its_lease_while_renewed(broker) -> None:
    # renewed ten times a lease, so a loaded machine that runs the renewer late does not lose it
    with kombu.Connection(kombu_url(broker, lease_secs=1.5, renew_every_secs=0.15)) as holder, \
            kombu.Connection(kombu_url(broker)) as other, \
            closing(holder.SimpleQueue("renewed")) as mine, closing(other.SimpleQueue("renewed")) as theirs:
        mine.put({"n": 1})
        message = mine.get(timeout=5)
        deadline = time.monotonic() + 3.5  # over two leases long: only renewals keep it
        while time.monotonic() < deadline:
            with pytest.raises(theirs.Empty):
                theirs.get(timeout=0.3)
        message.ack()
    with kittiwake.Client(broker.url) as client:
        assert client.peek("renewed") == []


def test_auto_delete_queue_goes_with_its_consumer(broker) -> None:
    exchange = kombu.Exchange("broadcast_auto", type="fanout")
    queue = kombu.Queue("fan_auto", exchange, auto_delete=True)
    with kombu.Connection(kombu_url(broker)) as conn:
        with conn.Consumer([queue], callbacks=[lambda body, message: message.ack()]):
            with pytest.raises(socket.timeout):
                conn.drain_events(timeout=0.2)
        with kombu.Connection(kombu_url(broker)) as publisher:  # after the consumer went: no queue is bound
            publisher.Producer().publish({"hi": 1}, exchange="broadcast_auto", routing_key="")
    with kittiwake.Client(broker.url) as client:
        assert client.peek("fan_auto") == []


def test_messages_leased_ahead_keep_their_leases_while_a_long_callback_runs(broker) -> None:
    """Messages the transport leased ahead waited in its buffer unrenewed: a callback longer than
    lease_secs (Celery's solo pool runs it inline) let their leases run out, the broker handed them
    out again, and the consumer delivered both copies — a message ran twice with nothing failing."""
    queue = kombu.Queue("lease-ahead", routing_key="lease-ahead")
    with kombu.Connection(kombu_url(broker, lease_secs=1)) as conn:
        producer = conn.Producer()
        for n in range(4):
            producer.publish({"n": n}, exchange=queue.exchange, routing_key="lease-ahead", declare=[queue])
        runs: dict[int, int] = {}

        def on_message(body: dict[str, int], message: kombu.Message) -> None:
            runs[body["n"]] = runs.get(body["n"], 0) + 1
            if body["n"] == 0 and runs[0] == 1:
                time.sleep(3.5)  # several lease lengths
            message.ack()

        with conn.Consumer([queue], callbacks=[on_message], accept=["json"]) as consumer:
            consumer.qos(prefetch_count=4)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and (len(runs) < 4 or time.monotonic() < deadline - 4):
                try:
                    conn.drain_events(timeout=0.5)
                except socket.timeout:
                    pass
    assert runs == {0: 1, 1: 1, 2: 1, 3: 1}

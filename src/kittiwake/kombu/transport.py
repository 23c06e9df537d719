"""kombu's virtual transport on a Kittiwake broker: `Transport`, its `Channel` and `QoS`.

Theory of operation. kombu's virtual transports keep exchanges and bindings
in the client and ask the channel for four things: put a message in a queue,
get one, purge a queue, tell its size. Here a message is a Kittiwake task
(data: the kombu message, msgpack), its priority is the start of its pid
(`names.PidClock`), and getting one *leases* it — nothing is removed at
receive time, unlike kombu's simple virtual transports that pop the message
and lose it when the worker is killed. The lease is the delivery tag
(`lease_book`): `ack` dequeues it, `reject(requeue=True)` releases it (a
counted attempt, see `options`), `reject()` dead-letters it into
`<queue>.dead`, closing a channel gives its unacked messages back without
counting an attempt, and a killed worker's leases simply run out.

Consuming is a long-poll across every consumed queue of the connection in
one request (`Transport.drain_events`): a worker waiting for work waits in
the broker, not in a polling loop. Requests lease what the consumers'
prefetch allows and run ahead of the consumer (`prefetch`); the messages wait
in a local buffer and go out one per `drain_events` call, as kombu expects,
with their leases renewed meanwhile.

Exchanges: direct, topic and fanout. Bindings are kept in the client, as in
every virtual transport, and also on the broker (`bindings`), so a publisher
reaches queues that other processes bound (Celery's broadcast control). An
auto-delete queue is deleted when its consumer is cancelled.

Expiration: a message's `expiration` (per-message TTL, ms) and the queue's
`x-message-ttl` (`Queue(message_ttl=…)`, known where the queue was declared)
become a deadline header; a message found past it is dropped when it would
have been delivered (AMQP drops it too). Queue expiry (`x-expires`),
`x-max-length` and dead-letter exchanges are not supported; a message over
the broker's task limit (1 MiB by default) is refused at publish
(`BadRequest`, one of the transport's channel errors). Purging a queue drops
its leased messages too (their acks then find nothing, which is harmless).

A broker that has gone away is never waited for where nothing can come of
it. After a connection error kombu *collects* the connection (`_collect`):
the caller goes on at once (Celery reconnects) while a thread gives back what
it can and closes the client — a broker back within the client's reconnect
rounds still gets the acks; a forked child's copy is dropped without a word
(its sockets are its parent's). When a Celery worker shuts down, a transport
whose broker is gone gives up on it (`give_up`, see `shutdown`): its client is
closed, which ends every call waiting to reconnect, and it closes without
talking to the broker; its messages come back when their leases run out.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Iterable
from queue import Empty
from typing import Any

import msgspec
from kombu.transport import virtual
from kombu.transport.base import to_rabbitmq_queue_arguments

from kittiwake.client import BrokerAddress, Client, LeasedTask
from kittiwake.errors import BadRequest, KittiwakeError, Transient
from kittiwake.kombu import shutdown
from kittiwake.kombu.bindings import BindingRegistry
from kittiwake.kombu.lease_book import LeaseBook
from kittiwake.kombu.names import PidClock, broker_url, priority_rank, queue_name
from kittiwake.kombu.options import TransportOptions
from kittiwake.kombu.prefetch import Prefetch

logger = logging.getLogger(__name__)

EXPIRES_HEADER = "kombu-expires-at"
"""A message's deadline (epoch seconds), from its `expiration` or its queue's `x-message-ttl`."""

DEFAULT_PORT = 7370
CLOSE_WAIT_SECS = 1.0  # how long closing waits for a lease request in flight to bring its messages back

_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder()


class QoS(virtual.QoS):
    """kombu's prefetch accounting, with acks and rejects that go to the broker's leases."""

    def __init__(self, channel: Channel, prefetch_count: int = 0) -> None:
        super().__init__(channel, prefetch_count)
        self._book: LeaseBook = channel.connection.leases
        self._requeue_counts_attempt = channel.connection.options.requeue_counts_attempt

    def ack(self, delivery_tag: str) -> None:
        self._book.ack(delivery_tag)
        super().ack(delivery_tag)

    def reject(self, delivery_tag: str, requeue: bool = False) -> None:
        if requeue:
            self._book.release([delivery_tag], reason="REQUEUED", counted=self._requeue_counts_attempt)
        else:
            self._book.release([delivery_tag], reason="REJECTED", bury=True)
        self._quick_ack(delivery_tag)

    def restore_unacked(self) -> list[tuple[BaseException, Any]]:
        """Give every unacked message of this channel back, without counting an attempt."""
        self._flush()
        tags = list(self._delivered)  # type: ignore[call-overload]  # kombu declares it None; the QoS fills it
        self._delivered.clear()  # type: ignore[attr-defined]  # as above
        if self.channel.connection.gone:
            return []  # nobody to give them to: their leases run out
        try:
            self._book.release(tags, reason="RESTORED", counted=False)
        except KittiwakeError as exc:
            # nothing is lost: the leases run out and the messages come back then
            logger.warning("could not give back %d unacked messages (they return when their leases expire): %s",
                           len(tags), exc)
        return []


class Channel(virtual.Channel):
    """A virtual channel whose queues are Kittiwake queues."""

    QoS = QoS
    do_restore = True
    body_encoding = None  # type: ignore[assignment]  # kombu declares str, reads None as "no encoding"
    supports_fanout = True  # through the binding registry (`bindings`): one put per bound queue

    connection: Transport

    def __init__(self, connection: Transport, **kwargs: Any) -> None:
        super().__init__(connection, **kwargs)
        self._queue_ttl_secs: dict[str, float] = {}
        self._auto_delete: set[str] = set()  # queues declared auto_delete here: deleted when consuming stops

    # ------------------------------------------------------------- naming

    def _queue(self, queue: str) -> str:
        return queue_name(queue, self.connection.options.queue_group)

    # ----------------------------------------------------------- the four

    def _put(self, queue: str, message: dict[str, Any], **kwargs: Any) -> None:
        transport = self.connection
        properties = message["properties"]
        rank = priority_rank(properties.get("priority"), highest_first=transport.options.priority_order == "amqp")
        pid = transport.pids.pid(rank, properties.get("delivery_tag") or "")
        headers = None
        deadline = self._deadline(queue, properties.get("expiration"))
        if deadline is not None:
            headers = {EXPIRES_HEADER: repr(deadline)}
        transport.broker.enqueue(
            self._queue(queue),
            _encoder.encode(message),
            pid=pid,
            headers=headers,
            max_attempts=transport.options.max_attempts,
        )

    def _get(self, queue: str, timeout: float | None = None) -> dict[str, Any]:
        transport = self.connection
        transport.flush_acks()
        tasks = transport.broker.lease(self._queue(queue), max_tasks=1, lease_secs=transport.leases.lease_secs)
        for task in tasks:
            payload = transport.payload_of(task)
            if payload is not None:
                return payload
        raise Empty()

    def _purge(self, queue: str) -> int:
        # drops the queue's leased messages too; their acks then find nothing, which is harmless
        return self.connection.broker.delete_queue(self._queue(queue))

    def _size(self, queue: str) -> int:
        stats = self.connection.broker.stats([self._queue(queue)], sample=0)
        return stats[0].available if stats else 0

    def _delete(self, queue: str, *args: Any, **kwargs: Any) -> None:
        # kombu calls this once per binding of the queue: (exchange, routing key, pattern, queue)
        if args:
            self.connection.bindings.forget(args[0], args[1], queue)
        self.connection.broker.delete_queue(self._queue(queue))

    def _new_queue(self, queue: str, **kwargs: Any) -> None:
        if kwargs.get("auto_delete"):
            self._auto_delete.add(queue)
        ttl_ms = (kwargs.get("arguments") or {}).get("x-message-ttl")
        if ttl_ms is not None:
            self._queue_ttl_secs[queue] = float(ttl_ms) / 1000

    def prepare_queue_arguments(self, arguments: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        # `Queue(message_ttl=…)` arrives as AMQP's x-message-ttl, which `_new_queue` reads
        return to_rabbitmq_queue_arguments(arguments, **kwargs)

    def _has_queue(self, queue: str, **kwargs: Any) -> bool:
        return True  # Kittiwake's queues exist while they hold messages; an empty one is as good as declared

    # ------------------------------------------------------- bindings

    def queue_bind(self, queue: str, exchange: str | None = None, routing_key: str = "",
                   arguments: Any = None, **kwargs: Any) -> None:
        super().queue_bind(queue, exchange, routing_key, arguments, **kwargs)
        exchange = exchange or "amq.direct"
        kind = self.typeof(exchange).type
        self.connection.bindings.remember(exchange, kind, routing_key, queue, self._queue_ttl_secs.get(queue))

    def queue_unbind(self, queue: str, exchange: str | None = None, routing_key: str = "",
                     arguments: Any = None, **kwargs: Any) -> None:
        super().queue_unbind(queue, exchange, routing_key, arguments, **kwargs)
        self.connection.bindings.forget(exchange or "amq.direct", routing_key, queue)

    def _queue_bind(self, exchange: str, routing_key: str, pattern: str, queue: str) -> None:
        pass  # `queue_bind` writes every binding to the registry, fanout or not

    def _put_fanout(self, exchange: str, message: dict[str, Any], routing_key: str, **kwargs: Any) -> None:
        for queue in {row[2] for row in self.get_table(exchange)}:
            self._put(queue, message, **kwargs)

    def get_table(self, exchange: str) -> list[tuple[str, str, str]]:
        """Bindings of `exchange`: this connection's, and every other client's (the registry)."""
        local = self.state.exchanges.get(exchange, {}).get("table", [])

        def prepare(binding: Any) -> Any:
            kind = self.exchange_types.get(binding.type) or self.exchange_types["direct"]
            # kombu's annotation names one more argument than its exchange types take
            return kind.prepare_bind(binding.queue, exchange, binding.routing_key, None)  # type: ignore[call-arg]

        return self.connection.bindings.table(exchange, local, prepare)

    def typeof(self, exchange: str, default: str = "direct") -> Any:
        kind = self.state.exchanges.get(exchange, {}).get("type") or self.connection.bindings.type_of(exchange)
        return self.exchange_types[kind or default]

    # ------------------------------------------------------- consuming

    def basic_consume(self, queue: str, no_ack: bool, callback: Any, consumer_tag: str, **kwargs: Any) -> Any:
        result = super().basic_consume(queue, no_ack, callback, consumer_tag, **kwargs)
        self.connection.consuming[self._queue(queue)] = (queue, self, no_ack)
        return result

    def basic_cancel(self, consumer_tag: str) -> Any:
        queue = self._tag_to_queue.get(consumer_tag)
        result = super().basic_cancel(consumer_tag)
        if queue is not None and queue not in self._active_queues:
            self.connection.stop_consuming(self._queue(queue))
            if queue in self._auto_delete and not self.connection.gone:
                # AMQP deletes an auto-delete queue when its consumer goes: a stopped worker's pidbox
                # and a closed client's reply queue leave no queue, and no binding, behind
                self._auto_delete.discard(queue)
                self.queue_delete(queue)
                self.connection.broker.delete_queue(self._queue(queue))
        return result

    def basic_get(self, queue: str, no_ack: bool = False, **kwargs: Any) -> Any:
        message = super().basic_get(queue, no_ack=no_ack, **kwargs)
        if message is not None and no_ack:
            self.connection.leases.ack(message.delivery_tag)
            self.connection.flush_acks()
        return message

    # ------------------------------------------------------- internals

    def _deadline(self, queue: str, expiration: Any) -> float | None:
        ttls = [self._queue_ttl_secs.get(queue), self.connection.bindings.queue_ttl_secs(queue)]
        if expiration is not None:
            try:
                ttls.append(float(expiration) / 1000)
            except (TypeError, ValueError):
                pass
        known = [ttl for ttl in ttls if ttl is not None]
        return time.time() + min(known) if known else None


class Transport(virtual.Transport):
    """kombu transport `kittiwake://host:port` (alias registered by `import kittiwake.kombu`)."""

    Channel = Channel

    driver_type = "kittiwake"
    driver_name = "kittiwake"
    default_port = DEFAULT_PORT  # type: ignore[assignment]  # kombu declares None
    can_parse_url = True  # the URL's query carries transport options, which kombu's parser would refuse
    polling_interval = None  # type: ignore[assignment]  # kombu declares float; None: never sleep, leases long-poll

    implements = virtual.Transport.implements.extend(
        asynchronous=False,
        exchange_type=frozenset(["direct", "topic", "fanout"]),
        heartbeats=False,
    )

    # kombu annotates these as 1-tuples; every transport adds its own errors to them
    connection_errors = virtual.Transport.connection_errors + (Transient,)  # type: ignore[assignment]
    channel_errors = virtual.Transport.channel_errors + (BadRequest,)  # type: ignore[assignment]

    def __init__(self, client: Any, **kwargs: Any) -> None:
        super().__init__(client, **kwargs)
        url, url_options = self._broker_url(client)
        self.options = TransportOptions.from_mapping({**(client.transport_options or {}), **url_options})
        self.broker = Client(url, connect_timeout=float(client.connect_timeout or 10.0))
        self.leases = LeaseBook(
            self.broker,
            lease_secs=self.options.lease_secs,
            renew_every_secs=self.options.renew_interval_secs,
            ack_flush_secs=self.options.ack_flush_secs,
        )
        self.bindings = BindingRegistry(self.broker, self.options.queue_group)
        self.pids = PidClock()
        # Kittiwake queue -> (kombu queue, its channel, no_ack) for every queue consumed on this connection
        self.consuming: dict[str, tuple[str, Channel, bool]] = {}
        self.prefetch = Prefetch(self.broker, self.leases)
        self.gone = False  # given up on the broker (`give_up`): nothing more is said to it
        self._pid = os.getpid()  # a copy in a forked child is not this process's to close
        shutdown.track(self)

    # `self.client` is kombu's Connection (virtual transports read their options there);
    # `self.broker` is the Kittiwake client
    @staticmethod
    def _broker_url(client: Any) -> tuple[str, dict[str, str]]:
        hostname = client.hostname or "127.0.0.1"
        if "://" in hostname:
            return broker_url(hostname)
        credentials = f"{client.userid}:{client.password}@" if client.userid and client.password else ""
        return f"kw://{credentials}{hostname}:{client.port or DEFAULT_PORT}", {}

    def establish_connection(self) -> Transport:
        self.broker.ping()  # fail here, where kombu retries a connection, not at the first publish
        return super().establish_connection()

    @property
    def broker_address(self) -> BrokerAddress:
        return self.broker.address

    def give_up(self) -> None:
        """The broker is gone and the worker shuts down: close the client (every call waiting to
        reconnect ends at once) and say nothing more to the broker (see the module docstring)."""
        self.gone = True
        self.leases.abandon()
        self.broker.close()

    def close_connection(self, connection: Any) -> None:
        try:
            super().close_connection(connection)
            self._close_broker_side(wait_secs=0.0 if self.gone else CLOSE_WAIT_SECS)
        except Transient as exc:
            self._closing_failed(exc)
        finally:
            self.broker.close()

    def _collect(self, connection: Any) -> None:
        """kombu's close of a broken connection (after a connection error), or of a forked child's copy:
        the caller does not wait (see the module docstring)."""
        if os.getpid() != self._pid:
            return  # a forked child's copy: its sockets are the parent's; nothing to say or close
        threading.Thread(target=self._close_in_background, name="kittiwake-kombu-collect", daemon=True).start()

    def _close_in_background(self) -> None:
        try:
            self._close_broker_side(wait_secs=CLOSE_WAIT_SECS)
        except Transient as exc:
            self._closing_failed(exc)
        finally:
            self.broker.close()

    def _closing_failed(self, error: Transient) -> None:
        """The broker went away while closing: say nothing more to it; its leases run out."""
        logger.warning("closing without the broker at %s: %s", self.broker.url, error)
        self.give_up()
        self.prefetch.close(timeout=0.0)

    def _close_broker_side(self, wait_secs: float) -> None:
        """Give back what was leased and never delivered, send the acks still waiting, stop renewing
        (once given up on the broker: only stop)."""
        # a long-poll in flight is not waited out: closing the client drops it at the broker
        left = self.prefetch.close(timeout=wait_secs)
        if self.gone:
            self.leases.abandon()
            return
        self._give_back(left, reason="RESTORED")
        self.leases.close()

    # ------------------------------------------------------------ consuming

    def flush_acks(self) -> None:
        self.leases.flush_acks()

    # kombu annotates **kwargs; every caller passes `timeout` alone
    def drain_events(self, connection: Any, timeout: float | None = None) -> None:  # type: ignore[override]
        """Deliver one message to its consumer, waiting for up to `timeout` seconds (None: until one comes)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        prefetch = self.prefetch
        while True:
            if prefetch.done():
                prefetch.collect(0)
            while prefetch.ready:
                if self._deliver_ready(prefetch.ready.popleft()):
                    self._lease_ahead(wait_secs=0.0)
                    return
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                raise socket.timeout()
            if not prefetch.in_flight:
                wait = self.options.wait_secs if remaining is None else min(remaining, self.options.wait_secs)
                if not self._lease_ahead(wait_secs=wait):
                    # every consumer is at its prefetch limit (or there is none): wait for an ack
                    self.leases.acked.wait(0.1 if remaining is None else min(remaining, 0.1))
                    self.leases.acked.clear()
                    continue
            if not prefetch.collect(remaining):
                raise socket.timeout()

    def _lease_ahead(self, *, wait_secs: float) -> bool:
        """Start a lease request for what the consumers' prefetch allows; False when it allows nothing
        (or enough requests are in flight already)."""
        prefetch = self.prefetch
        if not prefetch.can_start():
            return False
        queues, limit = self._wanted()
        budget = limit - len(prefetch.ready) - prefetch.in_flight_tasks
        if not queues or budget <= 0:
            return False
        if prefetch.in_flight and budget < (limit + 1) // 2:
            return False  # a request is on its way: ask again when half the window is free, not per message
        prefetch.start(queues, budget, wait_secs)
        return True

    def _wanted(self) -> tuple[list[str], int]:
        """The queues to lease from (consumed on channels that may take more) and how many to take."""
        queues: list[str] = []
        budgets: list[int] = []
        for queue, (_, channel, _) in self.consuming.items():
            if channel.closed or not channel.qos.can_consume():
                continue
            queues.append(queue)
            budget = channel.qos.can_consume_max_estimate()
            budgets.append(self.options.prefetch_max if budget is None else budget)
        return queues, min(budgets, default=0)

    def _deliver_ready(self, task: LeasedTask) -> bool:
        if self.leases.was_lost(task):
            return False  # its lease ran out while it waited: the broker hands it to someone else
        consumer = self.consuming.get(task.queue)
        if consumer is None or consumer[1].closed:
            self._give_back([task], reason="NO_CONSUMER")
            return False
        payload = self.payload_of(task)
        if payload is None:
            return False
        kombu_queue, _, no_ack = consumer
        if no_ack:
            self.leases.ack(payload["properties"]["delivery_tag"])
        self._deliver(payload, kombu_queue)
        return True

    def payload_of(self, task: LeasedTask) -> dict[str, Any] | None:
        """The kombu message of a leased task, its delivery tag the lease; None (and the task
        dropped) when it expired or cannot be read."""
        tag = self.leases.hold(task)
        deadline = (task.headers or {}).get(EXPIRES_HEADER)
        if deadline is not None and float(deadline) < time.time():
            self.leases.ack(tag)  # AMQP drops an expired message; so do we
            return None
        try:
            payload = _decoder.decode(task.data)
            properties = payload["properties"]
        except (msgspec.DecodeError, KeyError, TypeError):
            logger.error("%s/%s is not a kombu message; dead-lettered", task.queue, task.pid)
            self.leases.release([tag], reason="NOT_A_KOMBU_MESSAGE", bury=True)
            return None
        properties["delivery_tag"] = tag
        # delivered before (a requeue, or a lease that ran out): where Celery's request reads it
        redelivered = task.deliveries > 1
        payload["redelivered"] = redelivered
        properties.setdefault("delivery_info", {})["redelivered"] = redelivered
        return payload

    def stop_consuming(self, queue: str) -> None:
        self.consuming.pop(queue, None)
        ready = self.prefetch.ready
        self._give_back([task for task in ready if task.queue == queue], reason="NO_CONSUMER")
        kept = [task for task in ready if task.queue != queue]
        ready.clear()
        ready.extend(kept)

    def _give_back(self, tasks: Iterable[LeasedTask], *, reason: str) -> None:
        """Release leased tasks nobody was given, without counting an attempt."""
        tasks = list(tasks)
        self.leases.forget(tasks)
        if tasks and not self.gone:
            try:
                self.broker.release(tasks, reason, reject=True)
            except KittiwakeError as exc:
                logger.warning("could not give back %d leased messages (they return when their leases expire): %s",
                               len(tasks), exc)

    @property
    def default_connection_params(self) -> dict[str, Any]:
        return {"port": self.default_port, "hostname": "127.0.0.1"}

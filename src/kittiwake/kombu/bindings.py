"""Exchange bindings that every client sees: the queue `_kombu.bindings` on the broker.

kombu's virtual transports keep bindings in the client that declared them, so
a publisher routes only to queues it bound itself. That is enough for a task
queue (a Celery producer declares its queue before it publishes) but not for a
fanout exchange, whose queues are bound by other processes: `celery inspect`
broadcasts to every worker's `<host>.celery.pidbox` queue, which only that
worker declared. So each binding is also written to the broker, as a task of
`_kombu.bindings` whose pid is `<exchange> <routing key> <queue>` (each part
escaped as a queue name, so the space separates them) and whose data names
the exchange type and the queue's message TTL. A publisher reads an
exchange's bindings with one `peek` and keeps them for `REFRESH_SECS`.

Unbinding (and deleting a queue) cancels the binding's task and purges its
dead letter. A queue whose consumer died without deleting it stays bound, as
on Redis: broadcasts keep landing in it (they carry the TTL of the queue as a
deadline, so a later consumer drops them unread).
"""

from __future__ import annotations

import threading
import time
from typing import Any

import msgspec

from kittiwake.client.interfaces import QueueClient
from kittiwake.errors import KittiwakeError
from kittiwake.kombu.names import queue_name

REGISTRY = "_kombu.bindings"
REFRESH_SECS = 1.0
_PAGE = 1000


class Binding(msgspec.Struct, frozen=True):
    exchange: str
    type: str
    routing_key: str
    queue: str
    queue_ttl_secs: float | None = None


class BindingRegistry:
    """Reads and writes the broker's record of bindings; caches reads for `REFRESH_SECS`."""

    def __init__(self, broker: QueueClient, group: str | None) -> None:
        self._broker = broker
        self._queue = queue_name(REGISTRY, group)
        self._lock = threading.Lock()
        self._written: set[str] = set()
        self._cache: dict[str, tuple[float, list[Binding]]] = {}
        self._ttl_by_queue: dict[str, float] = {}

    @staticmethod
    def _pid(exchange: str, routing_key: str, queue: str) -> str:
        return " ".join(queue_name(part) if part else "-" for part in (exchange, routing_key, queue))

    @staticmethod
    def _prefix(exchange: str) -> str:
        return (queue_name(exchange) if exchange else "-") + " "

    def remember(self, exchange: str, kind: str, routing_key: str, queue: str, queue_ttl_secs: float | None) -> None:
        pid = self._pid(exchange, routing_key, queue)
        if not exchange or pid in self._written:
            return
        binding = Binding(exchange, kind, routing_key, queue, queue_ttl_secs)
        self._broker.enqueue(self._queue, msgspec.msgpack.encode(binding), pid=pid)
        with self._lock:
            self._written.add(pid)
            self._cache.pop(exchange, None)

    def forget(self, exchange: str, routing_key: str, queue: str) -> None:
        pid = self._pid(exchange, routing_key, queue)
        with self._lock:
            self._written.discard(pid)
            self._cache.pop(exchange, None)
        try:
            self._broker.cancel((self._queue, pid), "UNBOUND")
        except KittiwakeError:
            return  # not bound (or bound by nobody but this process's memory)
        after: str | None = None
        while True:  # a page at a time: the broker bounds each request
            page = self._broker.purge_dead(self._queue, [pid], after_pid=after)
            if page.next_pid is None:
                break
            after = page.next_pid

    def bindings(self, exchange: str) -> list[Binding]:
        """Every binding of `exchange` on the broker (at most `REFRESH_SECS` old)."""
        now = time.monotonic()
        with self._lock:
            cached = self._cache.get(exchange)
        if cached is not None and now - cached[0] < REFRESH_SECS:
            return cached[1]
        prefix = self._prefix(exchange)
        found: list[Binding] = []
        from_pid = prefix
        while True:
            page = self._broker.peek(self._queue, _PAGE, from_pid)
            fresh = [view for view in page if view.pid.startswith(prefix) and view.pid != from_pid]
            found.extend(msgspec.msgpack.decode(view.data, type=Binding) for view in fresh)
            if len(page) < _PAGE or not fresh or not page[-1].pid.startswith(prefix):
                break
            from_pid = page[-1].pid
        with self._lock:
            self._cache[exchange] = (now, found)
            for binding in found:
                if binding.queue_ttl_secs is not None:
                    self._ttl_by_queue[binding.queue] = binding.queue_ttl_secs
        return found

    def type_of(self, exchange: str) -> str | None:
        if not exchange:
            return None
        found = self.bindings(exchange)
        return found[0].type if found else None

    def queue_ttl_secs(self, queue: str) -> float | None:
        """The message TTL its declarer gave `queue`, as far as bindings read so far tell."""
        return self._ttl_by_queue.get(queue)

    def table(self, exchange: str, local: list[Any], prepare: Any) -> list[Any]:
        """kombu's routing table of `exchange`: `local` rows plus the broker's, each once."""
        rows = list(local)
        if not exchange:
            return rows
        seen = {(row[0], row[2]) for row in rows}
        for binding in self.bindings(exchange):
            if (binding.routing_key, binding.queue) not in seen:
                seen.add((binding.routing_key, binding.queue))
                rows.append(prepare(binding))
        return rows

"""`RoutedProducer`: the blocking batching producer over a cluster (`kw://a,b,c`).

`Producer` pipelines its batches on a TCP connection of its own to one broker: the hot path of
one broker, left as it is. A cluster client has no one connection to pipeline on — each batch
must be split by node (keyed tasks to their owner, FIFO tasks spread) — so `Client.producer()`
on a cluster returns this subclass instead, which keeps everything of `Producer` that is not
I/O (`enqueue`, `enqueue_task`, `flush`, `close`, `held`, the context manager, `Sending`, the
rule of `batching.Batcher`) and sends each batch through the client's channel as one `enqueue` call:
the cluster router splits it by node, one request per node in one step, and merges the outcomes
back in task order (`kittiwake.client.cluster_router`); a node that refuses with WRONG_SHARD,
or FIFO tasks whose node is down, are routed again there.

What it chose: one sender thread and one batch in flight at a time (the batcher allows two: a
blocking `request` has no second to overlap with), so batches apply in the order they were made
and the FIFO tasks of one node keep their `enqueue` order there; a batch gathers while the one
before it is on its way and goes out when that one's answer arrives, as on one broker. A batch
whose `request` raises is answered with that error (every task of it fails with it; after
CONNECTION_LOST or a timeout the outcome is unknown, as `Producer` says), except a refusal of the
whole batch for what it holds (FORBIDDEN, BAD_REQUEST: raised by the router only when no node
applied its part), which the batcher sends again in parts as on one broker; the channel already
retried what never left. The client's timeout bounds each batch's request.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from typing import Any

from kittiwake import errors
from kittiwake.client.batching import Batch, Batcher, ProducerStats, Send
from kittiwake.client.calls import Call
from kittiwake.client.channel import Channel
from kittiwake.client.producer import Producer, Sending
from kittiwake.client.producer_settings import ProducerSettings
from kittiwake.client.producer_tasks import TaskMaker
from kittiwake.model import NewTask
from kittiwake.protocol import messages as m

_Batch = Batch[threading.Event]


def _raw(result: Any) -> Any:
    return result  # decoded on first demand, by the batch


class RoutedProducer(Producer):
    """Batches enqueues through a routing channel; thread-safe. Made by `Client.producer(...)` on a
    cluster; see the module docstring."""

    def __init__(self, channel: Channel, settings: ProducerSettings, timeout_secs: float | None = None) -> None:
        # not Producer.__init__: no connection of its own, no wake-up socket; the attributes below
        # are all the inherited methods (enqueue, flush, held, _wait_for_room's callers) use
        self.settings = settings
        self._channel = channel
        self._timeout_secs = timeout_secs
        self.stats = ProducerStats()
        self._batcher: Batcher[threading.Event] = Batcher(settings, threading.Event, self.stats)
        self._tasks = TaskMaker()
        self._lock = threading.Lock()
        self._room = threading.Condition(self._lock)  # enqueuers waiting for buffer room
        self._work = threading.Condition(self._lock)  # the sender waiting for a batch to send
        self._waiting_for_room = 0
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="kittiwake-routed-producer", daemon=True)
        self._thread.start()

    def __repr__(self) -> str:
        return f"<RoutedProducer {self._channel.address.url} held={self.held}>"

    # ------------------------------------------------- what Producer does by I/O

    def _take(self, task: NewTask, size: int) -> Sending:
        with self._lock:
            batch = self._batcher.take(task, size, time.monotonic())
            if batch is None:
                batch = self._wait_for_room(task, size)
            index = len(batch.tasks) - 1
            if index == 0 or batch.reason is not None:
                self._work.notify()
        return Sending(self, batch, index)

    def _wake(self) -> None:
        # called with the lock held (Producer._wait_for_room): the sender looks again
        self._work.notify()

    def _settle_all(self, timeout: float | None) -> None:
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            batches = self._batcher.flush()
            self._work.notify()
        for batch in batches:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not batch.signal.wait(remaining):
                raise errors.RequestTimeout(f"the producer's tasks were not all answered within {timeout} s")

    def _stop_sending(self) -> None:
        # `close`: the batch in flight is the sender's own blocking request; it ends with it
        self._work.notify()

    def _release(self) -> None:
        pass  # no connection or wake-up socket of its own

    # ------------------------------------------------------------ the sender

    def _run(self) -> None:
        while True:
            with self._lock:
                send = self._next_send()
                if send is None:
                    return
                self._batcher.sent(send)
            self._send(send.batch)

    def _next_send(self) -> Send[threading.Event] | None:
        """The next batch due (lock held), waiting for one; None once stopped."""
        while not self._stopped:
            due = self._batcher.next_send(time.monotonic())
            if isinstance(due, Send):
                return due
            self._work.wait(due)
        return None

    def _send(self, batch: _Batch) -> None:
        call: Call[Any] = Call(m.Enqueue(id=0, op="enqueue", tasks=batch.tasks), _raw)
        raw: Any = None
        error: errors.KittiwakeError | None = None
        try:
            raw = self._channel.request(call, self._timeout_secs)
        except errors.KittiwakeError as exc:
            error = exc
        with self._lock:
            self._settled(self._batcher.answer(batch, raw, error))

    def _settled(self, batches: Iterable[_Batch]) -> None:
        for batch in batches:
            batch.signal.set()
        if self._waiting_for_room:
            self._room.notify_all()

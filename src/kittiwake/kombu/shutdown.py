"""A Celery worker's warm shutdown when its Kittiwake broker has gone away: give up on the broker.

On SIGTERM Celery stops consuming, lets running tasks end, acks them and
closes its connection — all through the transport, so with a broker that has
gone away each step, and the reconnect already under way, would wait out the
Kittiwake client's reconnect rounds (`connect_timeout`) one after another
(the same worker on a Redis that has gone away exits within seconds).

So in a ``celery`` command (`kittiwake.kombu.celery_command`, which every
one loads, calls `connect_to_celery`) the transports of the process are
tracked (`track`), and when Celery says the worker is shutting down (its
``worker_shutting_down`` signal) a thread of this module asks each of their
brokers whether it is there (`kittiwake.client.probe.broker_answers`), then
again every `PROBE_EVERY_SECS` until the process exits (a broker may go away
during a long warm shutdown, and Celery may open a new connection
meanwhile). A transport whose broker is not there gives up on it
(`Transport.give_up`): its client is closed, which ends every call waiting
to reconnect at once, and it closes without talking to the broker; its
messages come back when their leases run out. A broker that answers is left
alone: the warm shutdown is the usual one.

The thread is started with the first transport, not in the signal handler
(a handler only sets an event: it must not start threads or wait for locks);
a process that is no ``celery`` command (a producer) tracks nothing and gets
no thread.
"""

from __future__ import annotations

import logging
import threading
import weakref
from typing import Protocol

from kittiwake.client.probe import broker_answers
from kittiwake.client.url import BrokerAddress

logger = logging.getLogger(__name__)


class GivesUp(Protocol):
    """What this module needs of a transport."""

    @property
    def broker_address(self) -> BrokerAddress: ...

    def give_up(self) -> None: ...


PROBE_EVERY_SECS = 1.0

_transports: weakref.WeakSet[GivesUp] = weakref.WeakSet()
_shutting_down = threading.Event()
_finished = threading.Event()  # never set in a worker: the thread ends with the process
_connected = False  # to Celery's signal: only then are transports tracked
_lock = threading.Lock()
_thread: threading.Thread | None = None


def connect_to_celery() -> None:
    """Have Celery's ``worker_shutting_down`` signal start the watch (see the module docstring)."""
    global _connected
    from celery.signals import worker_shutting_down

    worker_shutting_down.connect(shutting_down, weak=False)
    _connected = True


def track(transport: GivesUp) -> None:
    """Give up on `transport`'s broker if it is gone when the worker shuts down (in a process
    connected to Celery's signal; elsewhere nothing)."""
    global _thread
    if not _connected:
        return
    with _lock:
        _transports.add(transport)
        if _thread is None or not _thread.is_alive():  # (a forked child has no thread: start one)
            _thread = threading.Thread(target=_wait_for_shutdown, name="kittiwake-kombu-shutdown", daemon=True)
            _thread.start()


def shutting_down(**_: object) -> None:
    """Celery's ``worker_shutting_down`` receiver (runs in its signal handler: only sets an event)."""
    _shutting_down.set()


def _wait_for_shutdown() -> None:
    _shutting_down.wait()
    while not _finished.is_set():
        try:
            give_up_on_gone_brokers()
        except Exception:  # a bug here must not end the watch
            logger.exception("probing the brokers of a worker shutting down")
        _finished.wait(PROBE_EVERY_SECS)


def give_up_on_gone_brokers() -> None:
    """Probe each tracked transport's broker once; the transports of one that is gone give up
    (and are tracked no more)."""
    with _lock:
        transports = list(_transports)
    answers: dict[BrokerAddress, bool] = {}
    for transport in transports:
        address = transport.broker_address
        if address not in answers:
            answers[address] = broker_answers(address)
            if not answers[address]:
                logger.warning("the broker at %s is unreachable while the worker shuts down: not waiting for it "
                               "(the messages it leased come back when their leases run out)", address)
        if not answers[address]:
            with _lock:
                _transports.discard(transport)
            transport.give_up()

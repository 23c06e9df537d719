"""Stopping without a broker: while a worker process stops, watch whether its broker is still there.

A graceful stop (`WorkerLoop.stop`, SIGTERM) talks to the broker at every
step: tasks not started are handed back, running ones renewed until they
end and then settled, the registry record removed. When the broker has gone
away, each of those calls — and every thread already waiting to reconnect
(the leasers, the heartbeat, the registry's beat) — would wait out the
client's reconnect rounds (`connect_timeout`, 10 s) before the process could
exit. A stop must not wait for a broker that is not coming back in time.

So from the moment a stop begins until it is over, a `BrokerWatch` thread
asks whether the broker is there (`kittiwake.client.probe.broker_answers`:
a fresh connection, a second to make it), at once and then every
`PROBE_EVERY_SECS`. The first time it is not, the watch calls `on_gone` once
and ends. The worker loop then gives up on the broker: it closes its client,
which ends every call waiting to reconnect at once and fails every later call
at once, and finishes the stop without it — running tasks are not waited for
(their outcomes could not be posted), and whatever the process held comes
back to its queues when the leases run out, as after a crash. With the broker
there, the watch never fires and the stop is the graceful one.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from kittiwake.client.probe import broker_answers
from kittiwake.client.url import BrokerAddress

log = logging.getLogger("kittiwake.worker.stopping")

PROBE_EVERY_SECS = 1.0


class BrokerWatch:
    """Once `stopping` is set, asks whether the broker is there until `finish()`; calls `on_gone` the
    first time it is not. Its thread starts with the process (`start`), not in a signal handler:
    setting `stopping` is all a handler does."""

    def __init__(
        self,
        address: BrokerAddress,
        stopping: threading.Event,
        on_gone: Callable[[], None],
        *,
        every_secs: float = PROBE_EVERY_SECS,
        answers: Callable[[BrokerAddress], bool] = broker_answers,
    ) -> None:
        self.address = address
        self.stopping = stopping
        self.on_gone = on_gone
        self.every_secs = every_secs
        self.answers = answers
        self.gone = threading.Event()
        self._finished = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="kittiwake-broker-watch", daemon=True)
        self._thread.start()

    def finish(self) -> None:
        """The stop is over (or never began): watch no more (a probe on its way is not waited for)."""
        self._finished.set()

    def _run(self) -> None:
        while not self.stopping.wait(self.every_secs):  # (a process recycled never stops: look now and then)
            if self._finished.is_set():
                return
        while not self._finished.is_set():
            try:
                there = self.answers(self.address)
            except Exception:  # a bug in probing must not end the stop: take the broker as there
                log.exception("probing the broker at %s", self.address)
                there = True
            if not there and not self._finished.is_set():
                self.gone.set()
                self.on_gone()
                return
            self._finished.wait(self.every_secs)

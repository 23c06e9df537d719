"""Keeping a stream's leases alive while Spark works on its batch, in a thread of the driver.

Spark dequeues nothing itself: the stream's tasks stay leased from the moment
a batch is planned until the stream learns that Spark has written it, which
is when Spark asks for the next batch — a batch can take longer than any
lease. The `LeaseRenewer` thread renews every lease the stream holds each
third of `lease_secs` (as the worker's heartbeat does), so two renewals can
fail before a lease runs out. A lease whose renewal is refused
(LEASE_EXPIRED, TASK_NOT_LEASED, TASK_NOT_FOUND) is reported once and not
renewed again: the driver was away longer than the lease. A failure of the
broker itself (`Transient`) is retried at the next round, one second later.

It lives in the Python process that Spark starts on the driver to run the
stream's reader, and dies with it (a daemon thread): when the driver dies,
its leases run out after `lease_secs`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from kittiwake import errors
from kittiwake.client.interfaces import QueueClient
from kittiwake.model import ItemOutcome, LeaseRef, Limits

log = logging.getLogger("kittiwake.spark.lease_renewer")

RENEW_FRACTION = 1 / 3
RETRY_SECS = 1.0
MAX_ITEMS = Limits().max_batch


class LeaseRenewer:
    """Renews the leases `held()` returns every `lease_secs / 3`; refused ones go to `lost()`."""

    def __init__(
        self,
        client: QueueClient,
        lease_secs: float,
        held: Callable[[], list[LeaseRef]],
        lost: Callable[[list[ItemOutcome]], None],
    ) -> None:
        self.client = client
        self.lease_secs = lease_secs
        self.held = held
        self.lost = lost
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="kittiwake-stream-leases", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=self.lease_secs)

    def renew_now(self) -> None:
        """One round: renew every held lease, report the refused ones."""
        leases = self.held()
        refused: list[ItemOutcome] = []
        for start in range(0, len(leases), MAX_ITEMS):
            outcomes = self.client.renew(leases[start : start + MAX_ITEMS], self.lease_secs)
            refused.extend(outcome for outcome in outcomes if not outcome.ok)
        if refused:
            self.lost(refused)

    def _run(self) -> None:
        pause = self.lease_secs * RENEW_FRACTION
        while not self._stop.wait(pause):
            try:
                self.renew_now()
                pause = self.lease_secs * RENEW_FRACTION
            except errors.Transient as exc:
                log.warning("renewing the stream's leases failed, retrying in %.0f s: %s", RETRY_SECS, exc)
                pause = RETRY_SECS
            except Exception:  # a bug must not end the renewals: the leases would run out silently
                log.exception("renewing the stream's leases failed")
                pause = RETRY_SECS

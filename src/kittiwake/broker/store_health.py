"""Store health: during a storage outage, when the broker tries to write again and what it logs.

A failing disk fails every pass that writes: a full disk until space returns,
a dead one until an operator acts. After each failed pass the engine must be
rebuilt from what is durable (its memory may hold the pass's changes), and a
rebuild reads the store's summary, whose cost grows with the data on disk.
Trying every write at once would rebuild the engine after nearly every pass
and spend the event loop on rebuilds; logging every failed pass (ten a second
from the ticks alone) would fill the log, often on the same full disk. So,
during an outage:

* after its first failure the broker tries again at once (a single I/O error
  costs one pass); after any later one it *pauses writes* for
  `WRITE_RETRY_SECS`: requests that would change something are answered
  `UNAVAILABLE` without running, parked long-polls wait, housekeeping waits;
  requests that only read (`dispatch.READ_ONLY_REQUESTS`) are still served
  from the rebuilt engine. Then the next pass tries writing again, so the
  engine is rebuilt about once a second at most, and service resumes within
  about a second of the fault clearing;
* when the rebuild itself fails (the store cannot be read) there is no
  engine: every request is answered `UNAVAILABLE`, and the rebuild is tried
  again at most once per `WRITE_RETRY_SECS`; the first pass after a rebuild
  that succeeds tries writing at once;
* the first failure is logged with its cause; then one line per
  `LOG_EVERY_SECS` says how long it has lasted and how many passes failed;
  one more line says when it is over.

The outage ends when a pass that ran a write request commits (a pass that
only reads commits even while the disk is full, so it proves nothing).

Pure policy: the monotonic clock is passed in, and the pass (`passes`) says
what happened; only the log lines leave.
"""

from __future__ import annotations

import logging
from typing import Callable

from kittiwake.errors import StorageFault

log = logging.getLogger("kittiwake.broker")

WRITE_RETRY_SECS = 1.0
LOG_EVERY_SECS = 10.0


class StoreHealth:
    """The state of one broker's store: healthy, or failing since when and how often."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock  # monotonic seconds
        self.fault: StorageFault | None = None  # the last failure's kind, None while healthy
        self.failing_since: float | None = None
        self.failed_passes = 0  # in the current outage
        self.failed_rebuilds = 0  # in the current outage
        self.rebuilds = 0  # engines built after a failure or a bug, ever
        self.outages = 0
        self._next_log_at = 0.0
        self._logged_passes = 0
        self._writes_paused_until = 0.0
        self._next_rebuild_at = 0.0

    @property
    def failing(self) -> bool:
        return self.failing_since is not None

    def writes_paused(self) -> bool:
        """Whether a pass must leave writing alone now (see the module docstring)."""
        return self.failing_since is not None and self.clock() < self._writes_paused_until

    def may_rebuild(self) -> bool:
        """Whether to try rebuilding the engine now: not within WRITE_RETRY_SECS of a failed rebuild."""
        return self.clock() >= self._next_rebuild_at

    def rebuilt(self) -> None:
        self.rebuilds += 1

    def rebuild_failed(self, error: BaseException, fault: StorageFault | None) -> None:
        """The rollback or the recovery of a new engine failed: no engine until the next try."""
        now = self.clock()
        self._next_rebuild_at = now + WRITE_RETRY_SECS
        self._begin(now, fault)
        self.failed_rebuilds += 1
        if self.failed_rebuilds == 1:
            log.error(
                "rebuilding the engine from the store failed (%s), retrying every %.0f s: %r",
                (fault or StorageFault.OTHER).value, WRITE_RETRY_SECS, error,
            )

    def pass_failed(self, error: BaseException, fault: StorageFault | None, requests: int, tried: bool = True) -> None:
        """A pass was answered UNAVAILABLE; unless it starts the outage, or did not even try (there
        was no engine), writes pause."""
        now = self.clock()
        first = self._begin(now, fault)
        self.failed_passes += 1
        if first:
            log.error(
                "storage failure (%s): a pass of %d requests was not made durable; answering UNAVAILABLE "
                "until it clears: %r",
                (fault or StorageFault.OTHER).value, requests, error,
            )
            self._logged_passes = 1
            return
        if tried:
            self._writes_paused_until = now + WRITE_RETRY_SECS
        if now >= self._next_log_at:
            assert self.failing_since is not None
            log.error(
                "storage still failing after %.0f s (%s): %d passes answered UNAVAILABLE since the last report; "
                "last error: %r",
                now - self.failing_since, (self.fault or StorageFault.OTHER).value,
                self.failed_passes - self._logged_passes, error,
            )
            self._next_log_at = now + LOG_EVERY_SECS
            self._logged_passes = self.failed_passes

    def pass_committed(self, wrote: bool) -> None:
        """A pass committed; if it ran a write request, the outage is over."""
        if self.failing_since is None or not wrote:
            return
        log.warning(
            "storage recovered: writes commit again after %.1f s of failures (%s); %d passes were answered "
            "UNAVAILABLE, %d rebuilds of the engine failed",
            self.clock() - self.failing_since, (self.fault or StorageFault.OTHER).value,
            self.failed_passes, self.failed_rebuilds,
        )
        self.failing_since = None
        self.fault = None
        self._writes_paused_until = self._next_rebuild_at = 0.0

    def _begin(self, now: float, fault: StorageFault | None) -> bool:
        """Note a failure at `now`; True when it starts an outage."""
        if fault is not None:
            self.fault = fault
        if self.failing_since is not None:
            return False
        self.failing_since = now
        self.failed_passes = self.failed_rebuilds = self._logged_passes = 0
        self._next_log_at = now + LOG_EVERY_SECS
        self.outages += 1
        return True

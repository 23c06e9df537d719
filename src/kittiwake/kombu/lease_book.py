"""The leases one kombu connection holds: delivery tags, acks on their way, and the thread that renews them.

A delivered message is a task this connection leased; its delivery tag is the
lease id (a fencing token that never repeats), and nothing is dequeued when it
is received. `ack` finishes it, `release` gives it back; until then the lease
is renewed every `renew_every_secs`, so a task that runs for an hour keeps it,
and a worker killed with `kill -9` stops renewing and its tasks come back when
their leases run out (TESTING.md, "worker crash"). Messages leased ahead and
not yet delivered (`expect`: waiting in the prefetch's `ready`) are renewed
the same way, so a consumer busy longer than `lease_secs` does not lose them
to another consumer and then run them too; one whose lease was lost
meanwhile is not delivered (`was_lost`).

Acks are sent in batches, as AMQP's basic.ack is: `ack` only notes the lease,
and one dequeue request from the keeper thread carries every noted ack — as
the connection sends its next lease request (`flush_soon`: both reach the
broker together and share its group commit), or `ack_flush_secs` after the
first of them when no lease request comes (a pool thread acked while the
consumer waits). An ack is
therefore durable a moment after `basic_ack` returns; a worker that dies in
that moment runs the task again, which acks_late promises anyway.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable

from kittiwake.client import ItemOutcome, LeasedTask
from kittiwake.client.interfaces import QueueClient
from kittiwake.errors import Transient

logger = logging.getLogger(__name__)


class LeaseBook:
    """Delivery tag → lease, for one connection; thread-safe (pool threads ack, the consumer leases)."""

    def __init__(
        self,
        client: QueueClient,
        *,
        lease_secs: float,
        renew_every_secs: float,
        ack_flush_secs: float,
    ) -> None:
        self._client = client
        self.lease_secs = lease_secs
        self._renew_every_secs = renew_every_secs
        self._ack_flush_secs = ack_flush_secs
        self._lock = threading.Lock()
        self._held: dict[str, LeasedTask] = {}
        self._waiting: dict[str, LeasedTask] = {}  # leased ahead, not delivered yet: renewed too
        self._lost_waiting: set[str] = set()  # tags of waiting ones whose lease was lost
        self._acks: list[LeasedTask] = []
        self._first_ack_at: float | None = None
        self._wake = threading.Event()
        self.acked = threading.Event()  # set by every ack: a consumer at its prefetch limit may take more
        self._closed = threading.Event()
        self._keeper: threading.Thread | None = None

    # --------------------------------------------------------------- holding

    def expect(self, tasks: Iterable[LeasedTask]) -> None:
        """Note tasks leased ahead, to be delivered later: their leases are renewed meanwhile."""
        with self._lock:
            for task in tasks:
                self._waiting[str(task.lease_id)] = task
            self._start_keeper()

    def was_lost(self, task: LeasedTask) -> bool:
        """Whether the lease of a task leased ahead was lost while it waited (then it is not ours)."""
        tag = str(task.lease_id)
        with self._lock:
            if tag in self._lost_waiting:
                self._lost_waiting.discard(tag)
                return True
            return False

    def forget(self, tasks: Iterable[LeasedTask]) -> None:
        """Stop renewing tasks leased ahead that are given back undelivered."""
        with self._lock:
            for task in tasks:
                tag = str(task.lease_id)
                self._waiting.pop(tag, None)
                self._lost_waiting.discard(tag)

    def hold(self, task: LeasedTask) -> str:
        """Note a leased task as delivered; returns its delivery tag."""
        tag = str(task.lease_id)
        with self._lock:
            self._waiting.pop(tag, None)
            self._held[tag] = task
            self._start_keeper()
        return tag

    def _start_keeper(self) -> None:  # with the lock held
        if self._keeper is None and not self._closed.is_set():
            self._keeper = threading.Thread(target=self._keep, name="kittiwake-kombu-leases", daemon=True)
            self._keeper.start()

    def held_count(self) -> int:
        with self._lock:
            return len(self._held)

    # ------------------------------------------------------------ finishing

    def ack(self, tag: str) -> None:
        """Finish the task under `tag`: dequeued with the next batch of acks."""
        with self._lock:
            task = self._held.pop(tag, None)
            if task is None:
                return
            self._acks.append(task)
            self.acked.set()
            if self._first_ack_at is None:
                self._first_ack_at = time.monotonic()
                self._wake.set()

    def flush_soon(self) -> None:
        """Have the keeper thread send the waiting acks now (beside the caller's next request,
        so the broker commits both together)."""
        with self._lock:
            if not self._acks:
                return
            self._first_ack_at = float("-inf")
        self._wake.set()

    def flush_acks(self) -> None:
        """Dequeue every acked task now, in one request."""
        with self._lock:
            acks, self._acks = self._acks, []
            self._first_ack_at = None
        if not acks:
            return
        try:
            outcomes = self._client.dequeue(acks)
        except Transient:
            # outcome unknown: dequeue again later (a task already gone just reports so)
            with self._lock:
                self._acks[:0] = acks
                self._first_ack_at = self._first_ack_at or time.monotonic()
            raise
        self._log_failures("ack", acks, outcomes)

    def release(
        self, tags: Iterable[str], *, reason: str | None = None, bury: bool = False, counted: bool = True
    ) -> None:
        """Give the tasks under `tags` back: counted as a failed attempt, not counted
        (`counted=False`: a shutdown, not a failure), or dead-lettered at once (`bury`)."""
        with self._lock:
            tasks = [task for task in (self._held.pop(tag, None) for tag in tags) if task is not None]
        self.acked.set()
        if not tasks:
            return
        outcomes = self._client.release(tasks, reason, bury=bury, reject=not counted)
        self._log_failures("release", tasks, outcomes)

    def release_all(self, *, reason: str | None = None) -> None:
        """Give back every held task without counting an attempt (the connection is closing)."""
        with self._lock:
            tags = list(self._held)
        self.release(tags, reason=reason, counted=False)

    # ------------------------------------------------------------- keeping

    def renew_held(self) -> None:
        """Extend every held lease, and those of tasks leased ahead, by `lease_secs`; a lease that is
        lost is forgotten (a task leased ahead is then not delivered)."""
        with self._lock:
            held = list(self._held.items())
            waiting = list(self._waiting.items())
        if not held and not waiting:
            return
        everything = held + waiting
        outcomes = self._client.renew([task for _, task in everything], self.lease_secs)
        lost = [(tag, task, outcome) for (tag, task), outcome in zip(everything, outcomes) if not outcome.ok]
        if lost:
            with self._lock:
                for tag, _, _ in lost:
                    self._held.pop(tag, None)
                    if self._waiting.pop(tag, None) is not None:
                        self._lost_waiting.add(tag)
            for _, task, outcome in lost:
                logger.warning("lost the lease of %s/%s: %s (it may run again elsewhere)", task.queue, task.pid, outcome.code)

    def _keep(self) -> None:
        next_renew_at = time.monotonic() + self._renew_every_secs
        while not self._closed.is_set():
            now = time.monotonic()
            with self._lock:
                ack_due_at = None if self._first_ack_at is None else self._first_ack_at + self._ack_flush_secs
            wake_at = next_renew_at if ack_due_at is None else min(next_renew_at, ack_due_at)
            if wake_at > now:
                self._wake.wait(wake_at - now)
                self._wake.clear()
                continue
            try:
                if ack_due_at is not None and ack_due_at <= now:
                    self.flush_acks()
                if next_renew_at <= now:
                    next_renew_at = now + self._renew_every_secs
                    self.renew_held()
            except Exception as exc:  # the broker is away: try again on the next tick, never die
                if self._closed.is_set():
                    return  # closed meanwhile (its client too, perhaps): nothing more to send
                logger.warning("could not reach the broker to renew leases or send acks: %s", exc)
                self._closed.wait(min(1.0, self._renew_every_secs))

    def close(self) -> None:
        """Stop renewing; send the acks still waiting (best effort: an unsent ack only means a re-run)."""
        self._closed.set()
        self._wake.set()
        try:
            self.flush_acks()
        except Exception as exc:
            logger.warning("could not send the last acks: %s", exc)
        keeper = self._keeper
        if keeper is not None and keeper is not threading.current_thread():
            keeper.join(timeout=5)

    def abandon(self) -> None:
        """Stop renewing and send nothing more (the broker is gone: the leases run out)."""
        self._closed.set()
        self._wake.set()
        with self._lock:
            self._acks.clear()

    @staticmethod
    def _log_failures(what: str, tasks: list[LeasedTask], outcomes: list[ItemOutcome]) -> None:
        for task, outcome in zip(tasks, outcomes):
            if not outcome.ok:
                logger.warning("%s of %s/%s failed: %s %s", what, task.queue, task.pid, outcome.code, outcome.message)

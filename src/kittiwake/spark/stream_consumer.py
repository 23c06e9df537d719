"""The stream's consumer on the Spark driver: which batch Spark gets next, and when a batch is done.

Spark drives a micro-batch source with four calls, all from one thread of the
driver (`stream_reader` turns them into these methods; offsets are batch
numbers):

* `latest()` — "what is there now?": Spark runs a new batch when the answer
  differs from the end of the last one;
* `plan(start, end)` — "the tasks of batches start+1 … end": a new batch, or a
  replay of one Spark had not finished before a restart; with start == end
  Spark only tells where its checkpoint stands (`setLatestSeenOffset` at a
  restart);
* `commit(end)` — Spark has finished everything up to `end` (it says so only
  once it plans the batch after, and not at all after a restart);
* `initial()` — where a query with a fresh checkpoint starts.

Spark (default, synchronous progress tracking) runs one batch at a time and
asks `latest()` again only after the batch it planned last has been written
to its sink and to its commit log. So when `latest()` is called, every batch
up to the last `plan` end it saw in this process is done, and `latest()`
dequeues them first (`stream_log.commit`) — without waiting for Spark's
`commit`, which would leave the last batch leased for as long as no new task
arrives. After a restart the `plan(X, X)` call says which batch X is the
checkpoint's last: if Spark had not finished it, it replays it with
`plan(W, X)` before anything else; either way, by the next `latest()` it is
done.

`latest()` then answers, in this order:

1. a batch recorded in the log that Spark was never offered (the driver died
   between recording it and Spark writing its offset): offered now, as is;
2. while a batch offered to Spark is not done, the same answer (nothing is
   leased while the stream still holds a batch, so it never takes its own
   tasks twice, even after their leases ran out);
3. otherwise up to `max_tasks_per_batch` tasks leased for `lease_secs`,
   recorded in the log as the next batch (`stream_log.append`) before the
   answer names it; nothing leased, the same answer as before.

Two ways of running a query break the rule that `latest()` follows a finished
batch, and are not supported: asynchronous progress tracking (Spark may ask
before its commit log is written) and `Trigger.AvailableNow` (PySpark 4.0
wraps a Python stream so that it is asked once, before the restart state is
known: the run takes one batch, and later runs find nothing new).

While a batch is held, the `LeaseRenewer` keeps its leases alive. A
restarted driver loads the log (`stream_log.load`), renews the leases of the
pending batches at once, and serves replays from the log's records, so a
replayed batch has exactly the rows it had.
"""

from __future__ import annotations

import logging
import threading

from kittiwake import errors
from kittiwake.client import Client
from kittiwake.client.interfaces import QueueClient
from kittiwake.model import ItemOutcome, LeaseRef
from kittiwake.spark import stream_log
from kittiwake.spark.lease_renewer import LeaseRenewer
from kittiwake.spark.options import StreamOptions
from kittiwake.client.retries import retrying
from kittiwake.spark.rows import LoggedTask, logged
from kittiwake.spark.stream_log import LoggedBatch

log = logging.getLogger("kittiwake.spark.stream_consumer")


class StreamConsumer:
    """One stream's batches on the driver: the log loaded once, pending batches and their leases."""

    def __init__(self, options: StreamOptions, client: QueueClient | None = None) -> None:
        self.options = options
        self.log_queue = options.log_queue
        self.client: QueueClient = client or Client(options.url, timeout=options.timeout, worker=self.worker)
        self._lock = threading.Lock()  # pending batches: this thread and the renewer's
        state = retrying(lambda: stream_log.load(self.client, self.log_queue))
        self.committed = state.committed
        self.kept = state.kept
        self.pending: dict[int, LoggedBatch] = state.pending
        self.lost: set[tuple[str, int]] = set()  # (pid, lease id) whose renewal was refused
        self.offered = state.committed  # the highest batch number Spark was given or told us about
        self.seen: int | None = None  # the highest end Spark planned in this process
        self.renewer = LeaseRenewer(self.client, options.lease_secs, self.held_leases, self.leases_lost)
        if self.pending:
            log.info(
                "stream %s resumes with batches %s pending (committed up to %d)",
                self.log_queue,
                sorted(self.pending),
                self.committed,
            )
            retrying(self.renewer.renew_now)
        self.renewer.start()

    @property
    def worker(self) -> str:
        """How the stream's leases name their holder (stats show it)."""
        return f"spark-stream:{self.options.name}"

    # -------------------------------------------------------------- Spark's calls

    def initial(self) -> int:
        return self.committed

    def latest(self) -> int:
        if self.seen is not None:
            self.finish_through(self.seen)
        unoffered = [number for number in self.pending if number > self.offered]
        if unoffered:
            self.offered = max(unoffered)
            return self.offered
        if self.pending:
            return self.offered
        tasks = retrying(
            lambda: self.client.lease(
                self.options.queue,
                max_tasks=self.options.max_tasks_per_batch,
                lease_secs=self.options.lease_secs,
                receiver=self.options.receiver,
            )
        )
        if not tasks:
            return self.offered
        batch = LoggedBatch(max(self.offered, self.committed) + 1, [logged(task) for task in tasks])
        retrying(lambda: stream_log.append(self.client, self.log_queue, batch))  # the same pids collapse
        with self._lock:
            self.pending[batch.number] = batch
        self.offered = batch.number
        return batch.number

    def plan(self, start: int, end: int) -> list[LoggedTask]:
        if end < start:
            raise errors.BadRequest(f"Spark asked stream {self.log_queue} for batches {start + 1}..{end}, backwards")
        self.seen = end if self.seen is None else max(self.seen, end)
        self.offered = max(self.offered, end)
        tasks: list[LoggedTask] = []
        for number in range(start + 1, end + 1):
            batch = self.pending.get(number)
            if batch is None and self.kept is not None and self.kept.number == number:
                batch = self.kept
            if batch is None:
                raise errors.BadRequest(
                    f"Spark's checkpoint asks stream {self.log_queue} for batch {number}, which "
                    + (
                        f"was finished and dropped from the log (the log is at batch {self.committed}): the checkpoint "
                        f"is older than the stream, or another query uses the name {self.options.name!r}"
                        if number <= self.committed
                        else "was never recorded: the checkpoint does not belong to this stream"
                    )
                )
            tasks.extend(batch.tasks)
        return tasks

    def commit(self, end: int) -> None:
        self.finish_through(end)

    def close(self) -> None:
        """Stop renewing (the leases run out unless a restarted driver renews them) and disconnect."""
        self.renewer.stop()
        self.client.close()

    # -------------------------------------------------------------- batches done

    def finish_through(self, end: int) -> None:
        """Dequeue the tasks of every pending batch up to `end`, oldest first, each in one update."""
        for number in sorted(number for number in self.pending if number <= end):
            batch = self.pending[number]
            report = retrying(lambda: stream_log.commit(self.client, self.log_queue, batch))
            if report.taken:
                log.warning(
                    "stream %s, batch %d: %d tasks were taken by another consumer after this stream's leases ran "
                    "out; they are in the batch, and that consumer may process them too",
                    self.log_queue,
                    number,
                    report.taken,
                )
            with self._lock:
                del self.pending[number]
                self.lost.difference_update((task.pid, task.lease_id) for task in batch.tasks)
            self.committed, self.kept = number, batch

    # ------------------------------------------------------------ the renewer's

    def held_leases(self) -> list[LeaseRef]:
        with self._lock:
            return [
                lease
                for batch in self.pending.values()
                for lease in batch.leases()
                if (lease.pid, lease.lease_id) not in self.lost
            ]

    def leases_lost(self, outcomes: list[ItemOutcome]) -> None:
        with self._lock:
            leases = {lease.pid: lease.lease_id for batch in self.pending.values() for lease in batch.leases()}
            # a renewal that crossed the batch's commit finds its task gone: that is no loss
            outcomes = [outcome for outcome in outcomes if outcome.pid in leases]
            self.lost.update((outcome.pid, leases[outcome.pid]) for outcome in outcomes)
        if not outcomes:
            return
        log.warning(
            "stream %s: %d leases could not be renewed (%s): the driver was away longer than lease_secs; the batch "
            "is still finished with them unless another consumer took the tasks",
            self.log_queue,
            len(outcomes),
            ", ".join(sorted({outcome.code or "" for outcome in outcomes})),
        )


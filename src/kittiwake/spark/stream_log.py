"""A stream's batch log: the broker queue `<queue>.stream.<name>` that makes its batches durable.

Spark writes a micro-batch's offsets to its checkpoint and, after a crash,
asks the source for the same batch again by those offsets. An offset here is a
batch number; the tasks behind it live in this log, in the broker, beside the
queue the stream consumes (and so in its consistency group):

| pid | data | written |
| --- | --- | --- |
| `<batch>.a<piece>.<pieces>` | the batch's tasks (`rows.LoggedTask`, msgpack), cut into pieces of at most `PIECE_BYTES` | once, in one request, before Spark sees the batch's offset |
| `<batch>.z` | empty: the commit marker | in the update that dequeues the batch's tasks |

`<batch>` is the batch number in 20 digits, so pids sort by batch, and within
a batch the pieces before the marker.

* `append` writes a batch with one `enqueue` request: all of it is in the log
  or none (a request is applied whole). Repeating it collapses (same pids).
* `commit` dequeues the batch's tasks with the leases recorded for them,
  writes its marker and drops the log's garbage — the records and markers of
  earlier batches, leased for the purpose — in one atomic `update`. If a
  lease no longer holds (it ran out and another consumer took the task), the
  update is refused whole; then each task is dequeued on its own, those that
  fail are reported, and the marker is written. Dequeueing with a lease that
  ran out still succeeds while nobody leased the task since.
* The last committed batch's record is kept until the next commit, so Spark
  may still replay it (its checkpoint may have lost the batch's commit); the
  tasks are already gone from the queue, the record alone holds them.
* `load` reads the whole log with `peek`: the highest marker is the last
  committed batch; records above it are the batches still pending.

The log changes only through the calls of this module, all made by the
stream's reader on the Spark driver.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import msgspec

from kittiwake import errors
from kittiwake.client.interfaces import QueueClient
from kittiwake.model import LeaseRef
from kittiwake.spark.rows import LoggedTask

log = logging.getLogger("kittiwake.spark.stream_log")

BATCH_DIGITS = 20
PIECE_BYTES = 1_000_000  # under the broker's 1 MiB of data per task
RECORD = "a"
MARKER = "z"
PEEK_PAGE = 1000
GARBAGE_LEASE_SECS = 30.0
MAX_UPDATE_ITEMS = 10_000
# Dropping garbage leases it first; a driver killed in between lets those leases run out, which
# counts failed attempts. Log entries must never be dead-lettered for that.
LOG_MAX_ATTEMPTS = 1_000_000

_encode = msgspec.msgpack.Encoder().encode
_decode_tasks = msgspec.msgpack.Decoder(list[LoggedTask]).decode


@dataclass
class LoggedBatch:
    """One batch of the log: its number and tasks, each with the lease it was taken under."""

    number: int
    tasks: list[LoggedTask]

    def leases(self) -> list[LeaseRef]:
        return [LeaseRef(task.queue, task.pid, task.lease_id) for task in self.tasks]


@dataclass
class LogState:
    """What `load` found: the last committed batch, its record if kept, and the pending batches."""

    committed: int = 0
    kept: LoggedBatch | None = None  # the record of batch `committed`, while it is kept
    pending: dict[int, LoggedBatch] = field(default_factory=dict)  # number -> batch, above `committed`


@dataclass(frozen=True)
class CommitReport:
    """What committing one batch did to its tasks."""

    dequeued: int
    gone: int = 0  # already finished, by this stream or another consumer
    taken: int = 0  # held under another lease: another consumer took it after this stream's lease ran out


def batch_prefix(number: int) -> str:
    return f"{number:0{BATCH_DIGITS}d}."


def record_pid(number: int, piece: int, pieces: int) -> str:
    return f"{batch_prefix(number)}{RECORD}{piece:04d}.{pieces:04d}"


def marker_pid(number: int) -> str:
    return batch_prefix(number) + MARKER


def garbage_bound(number: int) -> str:
    """The largest pid that belongs to batches up to `number` (`~` sorts after every kind)."""
    return batch_prefix(number) + "~"


def pieces_of(tasks: list[LoggedTask]) -> list[bytes]:
    """The batch's tasks encoded and cut into pieces that fit in a task each."""
    body = _encode(tasks)
    return [body[start : start + PIECE_BYTES] for start in range(0, len(body), PIECE_BYTES)] or [b""]


def append(client: QueueClient, log_queue: str, batch: LoggedBatch) -> None:
    """Write a batch's record, whole, in one request."""
    pieces = pieces_of(batch.tasks)
    client.enqueue_many(
        [
            {
                "queue": log_queue,
                "pid": record_pid(batch.number, index, len(pieces)),
                "data": piece,
                "max_attempts": LOG_MAX_ATTEMPTS,
            }
            for index, piece in enumerate(pieces)
        ]
    )


def load(client: QueueClient, log_queue: str) -> LogState:
    """The log as it stands (see the module docstring)."""
    records: dict[int, dict[int, bytes]] = {}
    counts: dict[int, int] = {}
    markers: list[int] = []
    from_pid: str | None = None
    while True:
        page = client.peek(log_queue, PEEK_PAGE, from_pid)
        if from_pid is not None and page and page[0].pid == from_pid:
            page = page[1:]
        if not page:
            break
        for task in page:
            parsed = _parse(task.pid)
            if parsed is None:
                log.warning("ignoring %r in the stream log %s: not a pid the log writes", task.pid, log_queue)
            elif parsed[1] == MARKER:
                markers.append(parsed[0])
            else:
                number, _, piece, piece_count = parsed
                records.setdefault(number, {})[piece] = task.data
                counts[number] = piece_count
        from_pid = page[-1].pid
    state = LogState(committed=max(markers, default=0))
    for number, pieces in sorted(records.items()):
        if number < state.committed:
            continue  # garbage, dropped by the next commit
        if sorted(pieces) != list(range(counts[number])):
            raise errors.InternalError(
                f"the record of batch {number} in the stream log {log_queue} is incomplete "
                f"({len(pieces)} of {counts[number]} pieces): it was written in one request, so the log was "
                "changed by something else"
            )
        batch = LoggedBatch(number, _decode_tasks(b"".join(pieces[index] for index in range(counts[number]))))
        if number == state.committed:
            state.kept = batch
        else:
            state.pending[number] = batch
    return state


def _parse(pid: str) -> tuple[int, str, int, int] | None:
    """(batch, kind, piece, pieces) of a log pid, or None."""
    number, dot, rest = pid[:BATCH_DIGITS], pid[BATCH_DIGITS : BATCH_DIGITS + 1], pid[BATCH_DIGITS + 1 :]
    if dot != "." or not number.isdigit():
        return None
    if rest == MARKER:
        return int(number), MARKER, 0, 0
    if rest[:1] == RECORD and len(rest) == 10 and rest[5] == "." and rest[1:5].isdigit() and rest[6:].isdigit():
        return int(number), RECORD, int(rest[1:5]), int(rest[6:])
    return None


def commit(client: QueueClient, log_queue: str, batch: LoggedBatch) -> CommitReport:
    """Dequeue a batch's tasks and write its marker (see the module docstring); safe to repeat."""
    leases = batch.leases()
    marker = {"queue": log_queue, "pid": marker_pid(batch.number), "data": b"", "max_attempts": LOG_MAX_ATTEMPTS}
    garbage = _lease_garbage(client, log_queue, batch.number, MAX_UPDATE_ITEMS - 1 - len(leases))
    try:
        client.update(dequeue=[*leases, *garbage], enqueue=[marker])
        return CommitReport(dequeued=len(leases))
    except (errors.TaskNotLeased, errors.TaskNotFound, errors.LeaseExpired):
        pass  # some lease no longer holds: finish task by task
    outcomes = client.dequeue(leases) if leases else []
    report = CommitReport(
        dequeued=sum(1 for outcome in outcomes if outcome.ok),
        gone=sum(1 for outcome in outcomes if outcome.code == errors.TaskNotFound.code),
        taken=sum(1 for outcome in outcomes if not outcome.ok and outcome.code != errors.TaskNotFound.code),
    )
    try:
        client.update(dequeue=garbage, enqueue=[marker])
    except (errors.TaskNotLeased, errors.TaskNotFound, errors.LeaseExpired):
        client.enqueue_many([marker])  # the garbage waits for the next commit
    return report


def _lease_garbage(client: QueueClient, log_queue: str, number: int, room: int) -> list[LeaseRef]:
    """Leases on the log's entries of batches before `number`, which its commit drops."""
    if number <= 1 or room <= 0:
        return []
    taken = client.lease(
        log_queue, max_tasks=min(room, MAX_UPDATE_ITEMS), lease_secs=GARBAGE_LEASE_SECS, max_pid=garbage_bound(number - 1)
    )
    return [task.lease_ref() for task in taken]

"""The one error tree of Kittiwake and the stable codes that cross the wire.

Every error a broker, client, app or worker raises is a `KittiwakeError`
carrying a stable string `code`. The code, not the class or the message, is the
contract: clients in any language match on it. `error_for_code` maps a code
received on the wire back to its class.

`Transient` is the parent of the errors that passing time can fix: the broker
could not take or answer the request now (`Unavailable`, `TooManyConnections`,
`IdleTimeout`) or could not be reached or heard (`ConnectionLost`,
`BrokerUnreachable`, `RequestTimeout`). Retrying later may succeed, so
`except errors.Transient:` is how a loop waits out a broker restart. Some of
them leave the outcome unknown (`ConnectionLost`, `RequestTimeout`, and
`Unavailable` when its message says so): the request may have been applied, so
repeat only what is idempotent. Every other error says something about the
request itself, and the same request would fail again.
"""

from __future__ import annotations

import enum
from typing import Any, Protocol


class KittiwakeError(Exception):
    """Root of every Kittiwake error; `code` is stable, `message` is for people."""

    code = "INTERNAL"

    def __init__(self, message: str = "", **details: Any) -> None:
        super().__init__(message or self.code)
        self.message = message or self.code
        self.details = details

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"

    def to_wire(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message}


class InternalError(KittiwakeError):
    """The broker hit a bug; the request had no effect. Code INTERNAL."""

    code = "INTERNAL"


class BadRequest(KittiwakeError):
    """An argument is missing, of the wrong type or outside its limits. Code BAD_REQUEST."""

    code = "BAD_REQUEST"


class UnknownOperation(BadRequest):
    """The request names an operation the broker does not have. Code UNKNOWN_OP."""

    code = "UNKNOWN_OP"


class FrameTooLarge(KittiwakeError):
    """A frame's length prefix is above the broker's max frame. Code FRAME_TOO_LARGE."""

    code = "FRAME_TOO_LARGE"


class MalformedFrame(KittiwakeError):
    """A frame could not be decoded at all. Code MALFORMED_FRAME."""

    code = "MALFORMED_FRAME"


class QueueNotFound(KittiwakeError):
    """The named queue holds no task (queues exist while they hold tasks). Code QUEUE_NOT_FOUND."""

    code = "QUEUE_NOT_FOUND"


class TaskNotFound(KittiwakeError):
    """No task with that (queue, pid) exists. Code TASK_NOT_FOUND."""

    code = "TASK_NOT_FOUND"


class TaskNotLeased(KittiwakeError):
    """The task is not held under the given lease id (another lease holds it, or none). Code TASK_NOT_LEASED."""

    code = "TASK_NOT_LEASED"


class LeaseExpired(KittiwakeError):
    """The lease id matches but its time ran out; renew and release are refused. Code LEASE_EXPIRED."""

    code = "LEASE_EXPIRED"


class TaskLeased(KittiwakeError):
    """The task is held by a lease, so this operation leaves it alone."""

    code = "TASK_LEASED"


class TaskExists(KittiwakeError):
    """A task with that pid exists already (a requeued dead letter would collapse into it)."""

    code = "TASK_EXISTS"


class BadDeadLetter(KittiwakeError):
    """A dead letter a requeue reaches cannot go back into its queue as it is stored: its
    `kittiwake-dead-pid` header is not a pid, or its data, headers, sender or receiver are outside
    the broker's limits. It is a per-letter outcome of the requeue, not a failure of it: that
    dead letter stays where it is (purge it), the others go back. Code BAD_DEAD_LETTER."""

    code = "BAD_DEAD_LETTER"


class CrossGroupUpdate(KittiwakeError):
    """An update names queues of more than one consistency group. Code CROSS_GROUP_UPDATE."""

    code = "CROSS_GROUP_UPDATE"


class WrongShard(KittiwakeError):
    """The node does not own the key's slot in its cluster map, whose `epoch` it names. Code WRONG_SHARD."""

    code = "WRONG_SHARD"

    def __init__(self, message: str = "", *, epoch: str = "") -> None:
        super().__init__(message, epoch=epoch)
        self.epoch = epoch

    def to_wire(self) -> dict[str, Any]:
        """Code, message and the refusing node's map `epoch`: a client whose map differs fetches
        the map (`cluster_map`) and routes again."""
        return {"code": self.code, "message": self.message, "epoch": self.epoch}


class Transient(KittiwakeError):
    """Parent of the errors that passing time can fix, so a later retry may succeed (see the module
    docstring); never raised itself."""


class Unavailable(Transient):
    """The broker cannot make the change durable now (disk full, read-only, shutting down). Code UNAVAILABLE."""

    code = "UNAVAILABLE"


class StorageFault(enum.Enum):
    """A kind of storage failure (`kittiwake.store.faults` tells them apart); the value is how a
    reply or the log says it."""

    FULL = "the disk is full"  # ENOSPC, EDQUOT, EFBIG: frees up when space returns
    IO_ERROR = "the disk reported an I/O error"  # EIO on a write, an fsync or a read
    READ_ONLY = "the data directory is read-only"  # EROFS, or the files' permissions
    CORRUPT = "the database file cannot be read"  # a damaged page, or a disk returning garbage
    CONFLICT = "another broker holds the rows"  # a deadlock or a lock wait too long between brokers
    OTHER = "the store failed"  # any other error of the database or the file system


class StorageFailure(Unavailable):
    """A store could not read, write or commit: raised by every store for its own disk's errors,
    naming the `fault`; `outcome_known` is False when a commit failed in a way that may still
    have made it durable (a failed fsync). Code UNAVAILABLE."""

    code = "UNAVAILABLE"

    def __init__(self, message: str = "", *, fault: StorageFault = StorageFault.OTHER, outcome_known: bool = True) -> None:
        super().__init__(message, fault=fault, outcome_known=outcome_known)
        self.fault = fault
        self.outcome_known = outcome_known


class StoreInUse(KittiwakeError):
    """Another process has the store open (an SQLite data directory holds one broker, copy or migrate
    at a time), so this one was refused at start and changed nothing; the message names the holder's
    pid. Raised by `kittiwake.store.location.open_store`. Code STORE_IN_USE."""

    code = "STORE_IN_USE"


class SchemaTooNew(KittiwakeError):
    """The store's schema was written by a newer Kittiwake than this one (its version is above the
    one this code knows), so opening it was refused and nothing was changed: upgrade Kittiwake.
    Raised when the SQLite or PostgreSQL store opens (a broker starting, `kittiwake migrate`,
    `kittiwake copy`); the message names the store and both versions. Code SCHEMA_TOO_NEW."""

    code = "SCHEMA_TOO_NEW"


class CopyUnfinished(KittiwakeError):
    """A `kittiwake copy` into the store started and has not finished (it was killed or failed
    half-way, or is still running), so the store holds part of a copy — tasks without their queue
    sizes, counters or generations — and opening it was refused, nothing changed: a broker does not
    start on it, `kittiwake migrate` and a copy from it are refused. Run the same copy again (a copy
    into such a store empties it and starts over) or empty it (a fresh directory, DROP SCHEMA …
    CASCADE). Raised when the SQLite or PostgreSQL store opens; the message names the store, the
    copy's source and when it started. Code COPY_UNFINISHED."""

    code = "COPY_UNFINISHED"


class ClusterIdentity(KittiwakeError):
    """The store belongs to another cluster node than the broker starting on it (or to a node while
    the broker is none, or to no node while it holds tasks whose ids name no node), so the broker
    refused to start and changed nothing; the message names both. Raised at start by a cluster
    node (`kittiwake.engine.identity`). Code CLUSTER_IDENTITY."""

    code = "CLUSTER_IDENTITY"


class TooManyConnections(Transient):
    """The broker is at its connection limit. Code TOO_MANY_CONNECTIONS."""

    code = "TOO_MANY_CONNECTIONS"


class FrameTimeout(KittiwakeError):
    """A frame was started and not finished within the broker's frame timeout; the connection
    is closed after this error. Code FRAME_TIMEOUT."""

    code = "FRAME_TIMEOUT"


class IdleTimeout(Transient):
    """The connection had nothing in flight for the broker's idle timeout and is closed
    after this error; no request was lost (connect again). Code IDLE_TIMEOUT."""

    code = "IDLE_TIMEOUT"


class Unauthorized(KittiwakeError):
    """Missing or wrong credentials on a broker run with an auth file; the broker closes the
    connection after this reply. Code UNAUTHORIZED."""

    code = "UNAUTHORIZED"


class Forbidden(KittiwakeError):
    """The authenticated user lacks the permission this request needs on a queue it names;
    nothing of the request was applied. Code FORBIDDEN."""

    code = "FORBIDDEN"


class ConnectionLost(Transient):
    """Client side: the connection broke before the request was answered; its outcome is unknown. Code CONNECTION_LOST."""

    code = "CONNECTION_LOST"


class BrokerUnreachable(Transient):
    """Client side: no connection to the broker could be made within the retry budget. Code BROKER_UNREACHABLE."""

    code = "BROKER_UNREACHABLE"


class RequestTimeout(Transient):
    """Client side: no reply within the request timeout; the outcome is unknown unless the
    message says the request could not be sent (then it had no effect). Code TIMEOUT."""

    code = "TIMEOUT"


class ProducerFull(Transient):
    """Client side: a batching producer made with `block=False` already holds `max_buffer_tasks`
    tasks not yet answered, so this one was refused (nothing was sent). Code PRODUCER_FULL."""

    code = "PRODUCER_FULL"


class ProducerClosed(KittiwakeError):
    """Client side: the batching producer was closed, so the task was refused, or was never
    sent (then it was not enqueued). Code PRODUCER_CLOSED."""

    code = "PRODUCER_CLOSED"


class RemoteFailure(Protocol):
    """An error as it comes back from a worker (`app.serialization.RemoteError`)."""

    @property
    def type(self) -> str: ...
    @property
    def message(self) -> str: ...
    @property
    def traceback(self) -> str: ...
    @property
    def reason(self) -> str: ...


class TaskFailed(KittiwakeError):
    """App side: a submitted task failed on its worker, or never ran (dead-lettered, cancelled,
    a parent failed). Code TASK_FAILED.

    `reason` says why: ERROR (an exception), TIMEOUT, WORKER_LOST,
    RESULT_UNSERIALISABLE, RESULT_TOO_LARGE, UNKNOWN_TASK, BAD_PAYLOAD,
    REPLY_TO_REFUSED (its reply-to was not a reply queue of the worker's app),
    CANCELLED, LEASE_EXPIRED, or PARENT_FAILED <queue>/<pid>. `type`,
    `remote_message` and `traceback` describe the remote exception when there
    was one; `task_id` names the task.
    """

    code = "TASK_FAILED"

    def __init__(
        self,
        message: str = "",
        *,
        task_id: str = "",
        reason: str = "ERROR",
        type: str = "",
        remote_message: str = "",
        traceback: str = "",
    ) -> None:
        super().__init__(message)
        self.task_id = task_id
        self.reason = reason
        self.type = type
        self.remote_message = remote_message
        self.traceback = traceback

    @classmethod
    def for_task(cls, task_id: str, failure: RemoteFailure) -> TaskFailed:
        """The error for task `task_id` that failed with `failure`."""
        text = f"task {task_id} failed ({failure.reason})"
        if failure.type or failure.message:
            text += f": {failure.type}: {failure.message}"
        return cls(
            text, task_id=task_id, reason=failure.reason, type=failure.type,
            remote_message=failure.message, traceback=failure.traceback,
        )


class ResultUnavailable(KittiwakeError):
    """App side: the task finished but its result does not come to this app (an identical key
    submitted by another app got it). Code RESULT_UNAVAILABLE."""

    code = "RESULT_UNAVAILABLE"


LEASE_LOST_CODES = frozenset({TaskNotFound.code, TaskNotLeased.code, LeaseExpired.code})
"""Codes that refuse a renew, release or dequeue because the lease is no longer the caller's."""

_ABSTRACT = (KittiwakeError, Transient)  # parents that are never raised, so never decoded

_BY_CODE: dict[str, type[KittiwakeError]] = {}
for _cls in list(globals().values()):
    if isinstance(_cls, type) and issubclass(_cls, KittiwakeError) and _cls not in _ABSTRACT:
        _BY_CODE.setdefault(_cls.code, _cls)


def error_for_code(code: str, message: str = "") -> KittiwakeError:
    """The error instance for a wire code; unknown codes keep their code on a base error."""
    cls = _BY_CODE.get(code)
    if cls is not None:
        return cls(message)
    error = KittiwakeError(message or code)
    error.code = code
    return error


ALL_CODES = frozenset(_BY_CODE)

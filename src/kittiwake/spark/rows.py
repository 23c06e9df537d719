"""The rows of the `kittiwake` data source: its one schema, and tasks turned into rows.

Spark asks a Python data source for its schema once, for every use, so batch
reads and streams share it:

    queue string, pid string, data binary, sender string, receiver string,
    headers map<string,string>, enqueued_at timestamp, state string

* `enqueued_at` is a timestamp (microseconds; the broker's clock when the task
  was enqueued), not the broker's float of epoch seconds: Spark compares,
  windows and displays timestamps natively.
* `headers` and `sender` / `receiver` are null when the task has none.
* `state` is the task's state when it was read: `available`, `leased` or
  `blocked` in a batch read, as `peek` reports it; always `leased` in a
  stream, which holds every task it emits.

A stream's batch log keeps each task as a `LoggedTask` (the broker's values
as they came, the float time included), so a replayed batch turns into the
very same rows.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import msgspec

from kittiwake.errors import BadRequest

SCHEMA_DDL = (
    "queue string, pid string, data binary, sender string, receiver string, "
    "headers map<string,string>, enqueued_at timestamp, state string"
)
COLUMNS = ("queue", "pid", "data", "sender", "receiver", "headers", "enqueued_at", "state")
STREAM_STATE = "leased"

Row = tuple[Any, ...]


class LoggedTask(msgspec.Struct, array_like=True, frozen=True):
    """A task a stream leased, as its batch log keeps it: what the rows need, and the lease."""

    queue: str
    pid: str
    data: bytes
    sender: str | None
    receiver: str | None
    headers: dict[str, str] | None
    enqueued_at: float
    lease_id: int


def timestamp(epoch_secs: float) -> datetime:
    """The broker's epoch seconds as an aware UTC datetime (Spark stores the instant)."""
    return datetime.fromtimestamp(epoch_secs, tz=timezone.utc)


def _row(task: Any, state: str) -> Row:
    return (
        task.queue,
        task.pid,
        task.data,
        task.sender,
        task.receiver,
        task.headers,
        timestamp(task.enqueued_at),
        state,
    )


def view_row(task: Any) -> Row:
    """A row from a `TaskView` (peek)."""
    return _row(task, task.state)


def logged_row(task: LoggedTask) -> Row:
    """A row from a task of a stream's batch log."""
    return _row(task, STREAM_STATE)


def logged(task: Any) -> LoggedTask:
    """A `LeasedTask` as the batch log keeps it."""
    return LoggedTask(
        task.queue, task.pid, task.data, task.sender, task.receiver, task.headers, task.enqueued_at, task.lease_id
    )


def check_schema(schema: Any) -> None:
    """Refuse a schema given with `.schema(...)` that is not this source's (the rows are fixed)."""
    names = tuple(field.name for field in schema.fields)
    if names != COLUMNS:
        raise BadRequest(
            f"the kittiwake source has a fixed schema ({SCHEMA_DDL}); got columns {', '.join(names)}"
        )

"""`df.write.format("kittiwake").mode("append").save()`: rows enqueued as tasks.

Each Spark task enqueues its rows with `enqueue_many`, `batch_size` rows per
request and at most `MAX_REQUEST_BYTES` (half the broker's frame limit,
`protocol.DEFAULT_MAX_FRAME`: a larger request frame is refused and its
connection closed, which a client can only see as a lost connection), and
reports how many tasks it added and how many collapsed into a task already
there (`WriteReport`); the driver logs the totals. A row too large for a
request on its own fails the write with `BadRequest` naming the limit (the
broker would refuse its data anyway: `Limits.max_data_bytes`).

Columns, by name (any order): `data` (binary or string; a string is sent as
UTF-8) and `queue` (string; may be left out when the option `queue` names
it, and a null falls back to that option) are needed; `pid`, `receiver`,
`sender` (strings) and `headers` (map<string,string>) are optional, a null
meaning none. Any other column is refused, so a typo does not silently drop
what it was meant to carry.

Idempotence: a row with a pid is deduplicated by the broker — writing it
again while the task exists collapses into it — so a retried Spark task, or
the same DataFrame saved twice, adds nothing twice. A row without a pid gets a
FIFO pid from the broker and is a new task every time it is written: such
rows are not idempotent when Spark retries a task. For the same reason a
request whose outcome is unknown (`Transient`: the connection broke after it
was sent, the broker was restarting) is repeated here only when every row of
it has a pid.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import DataSourceWriter, WriterCommitMessage
from pyspark.sql.types import BinaryType, MapType, StringType, StructType

from kittiwake import errors
from kittiwake.client import Client
from kittiwake.client.interfaces import QueueClient
from kittiwake.model import Limits
from kittiwake.protocol import DEFAULT_MAX_FRAME
from kittiwake.spark.options import WriteOptions
from kittiwake.client.retries import retrying

log = logging.getLogger("kittiwake.spark.writer")

RETRY_DEADLINE_SECS = 30.0
MAX_REQUEST_BYTES = DEFAULT_MAX_FRAME // 2  # room for the request's own encoding around the tasks
TASK_OVERHEAD_BYTES = 64  # msgpack keys and lengths of one task, more than enough
HEADER_OVERHEAD_BYTES = 8  # and of one header

STRING_COLUMNS = ("queue", "pid", "receiver", "sender")
OPTIONAL_COLUMNS = frozenset({"queue", "pid", "receiver", "sender", "headers"})


@dataclass
class WriteReport(WriterCommitMessage):
    """What one Spark task of a write did: tasks added, and rows that collapsed into existing ones."""

    enqueued: int = 0
    collapsed: int = 0


def check_columns(schema: StructType, options: WriteOptions) -> tuple[str, ...]:
    """The DataFrame's column names, once their names and types are known to make tasks."""
    types = {field.name: field.dataType for field in schema.fields}
    unknown = sorted(set(types) - OPTIONAL_COLUMNS - {"data"})
    if unknown:
        raise errors.BadRequest(
            f"the kittiwake sink does not know the column{'s' if len(unknown) > 1 else ''} {', '.join(unknown)}; "
            "it writes data, queue, pid, receiver, sender and headers (select or drop the others)"
        )
    if "data" not in types:
        raise errors.BadRequest("the kittiwake sink needs a column 'data' (binary or string): each row's task data")
    if not isinstance(types["data"], (BinaryType, StringType)):
        raise errors.BadRequest(f"column 'data' must be binary or string, not {types['data'].simpleString()}")
    if "queue" not in types and options.queue is None:
        raise errors.BadRequest("the kittiwake sink needs a column 'queue' or the option 'queue'")
    for name in STRING_COLUMNS:
        if name in types and not isinstance(types[name], StringType):
            raise errors.BadRequest(f"column {name!r} must be a string, not {types[name].simpleString()}")
    headers = types.get("headers")
    if headers is not None and not (
        isinstance(headers, MapType) and isinstance(headers.keyType, StringType) and isinstance(headers.valueType, StringType)
    ):
        raise errors.BadRequest(f"column 'headers' must be map<string,string>, not {headers.simpleString()}")
    return tuple(types)


class Writer(DataSourceWriter):
    """Enqueues each Spark task's rows in batches; the driver sums the reports."""

    def __init__(self, options: WriteOptions, columns: tuple[str, ...]) -> None:
        self.options = options
        self.columns = columns

    def write(self, iterator: Iterator[Any]) -> WriteReport:
        report = WriteReport()
        with Client(self.options.url, timeout=self.options.timeout) as client:
            batch: list[dict[str, Any]] = []
            size = 0
            for row in iterator:
                task = self.task_of(row)
                task_size = request_bytes(task)
                if batch and size + task_size > MAX_REQUEST_BYTES:
                    enqueue(client, batch, report)
                    batch, size = [], 0
                batch.append(task)
                size += task_size
                if len(batch) >= self.options.batch_size:
                    enqueue(client, batch, report)
                    batch, size = [], 0
            if batch:
                enqueue(client, batch, report)
        return report

    def task_of(self, row: Any) -> dict[str, Any]:
        """The task a row describes, as `enqueue_many` takes it."""
        values = row.asDict() if hasattr(row, "asDict") else dict(zip(self.columns, row))
        queue = values.get("queue") or self.options.queue
        if queue is None:
            raise errors.BadRequest(f"a row has no queue and there is no option 'queue' (pid {values.get('pid')!r})")
        data = values.get("data")
        if data is None:
            raise errors.BadRequest(f"a row for {queue!r} has no data (pid {values.get('pid')!r})")
        task: dict[str, Any] = {
            "queue": queue,
            "data": data.encode() if isinstance(data, str) else bytes(data),
        }
        for name in ("pid", "receiver", "sender"):
            if values.get(name) is not None:
                task[name] = values[name]
        if values.get("headers"):
            task["headers"] = dict(values["headers"])
        return task

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        total = totals(messages)
        log.info("kittiwake write: %d tasks enqueued, %d collapsed into existing tasks", total.enqueued, total.collapsed)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        total = totals(messages)
        log.warning(
            "kittiwake write failed; the Spark tasks that finished had enqueued %d tasks (%d collapsed), which stay",
            total.enqueued,
            total.collapsed,
        )


def request_bytes(task: dict[str, Any]) -> int:
    """About what `task` adds to an enqueue request's frame (never less); `BadRequest` if that
    alone is over `MAX_REQUEST_BYTES`."""
    size = TASK_OVERHEAD_BYTES + len(task["data"])
    size += sum(len(task[name].encode()) for name in STRING_COLUMNS if name in task)
    for key, value in (task.get("headers") or {}).items():
        size += len(str(key).encode()) + len(str(value).encode()) + HEADER_OVERHEAD_BYTES
    if size > MAX_REQUEST_BYTES:
        raise errors.BadRequest(
            f"a row for {task['queue']!r} (pid {task.get('pid')!r}) is {size} bytes, over the {MAX_REQUEST_BYTES} bytes "
            f"one request may carry (half the broker's frame limit of {DEFAULT_MAX_FRAME}); a task's data may be "
            f"at most {Limits().max_data_bytes} bytes"
        )
    return size


def totals(messages: list[WriterCommitMessage | None]) -> WriteReport:
    """The sum of the reports of the Spark tasks that sent one."""
    total = WriteReport()
    for message in messages:
        if isinstance(message, WriteReport):
            total.enqueued += message.enqueued
            total.collapsed += message.collapsed
    return total


def enqueue(client: QueueClient, batch: list[dict[str, Any]], report: WriteReport) -> None:
    """One `enqueue_many`, repeated after a transient failure only when every task has a pid."""
    if all("pid" in task for task in batch):
        outcomes = retrying(lambda: client.enqueue_many(batch), RETRY_DEADLINE_SECS)
    else:
        outcomes = client.enqueue_many(batch)
    collapsed = sum(1 for outcome in outcomes if outcome.collapsed)
    report.collapsed += collapsed
    report.enqueued += len(outcomes) - collapsed

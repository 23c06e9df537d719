"""`spark.readStream.format("kittiwake")`: PySpark's stream reader over a `StreamConsumer`.

Spark creates this reader more than once: in the Python process that runs
the stream on the driver (which calls `initialOffset`, `latestOffset`,
`partitions` and `commit`, one call at a time), and again to ship `read` to
the executors, pickled. So construction does nothing; the driver's
`StreamConsumer` — the broker connection, the loaded batch log, the lease
renewer — is made at the first driver call and never pickled.

An offset is `{"log": "<queue>.stream.<name>", "batch": n}`. A checkpoint
that names another log is refused, so a query cannot silently switch
streams. `partitions` hands each Spark task its share of the batch's rows
(`partitions` per batch, default 1): the rows travel with the plan, from the
log or from the lease that made the batch, so executors never call the
broker and a replayed batch has exactly the rows it had.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition

from kittiwake import errors
from kittiwake.spark.options import StreamOptions
from kittiwake.spark.rows import Row, logged_row
from kittiwake.spark.stream_consumer import StreamConsumer


class RowsPartition(InputPartition):
    """One Spark task's rows of a micro-batch."""

    def __init__(self, rows: list[Row]) -> None:
        super().__init__(len(rows))
        self.rows = rows


class StreamReader(DataSourceStreamReader):
    """Offsets are batch numbers of the stream's log; see `stream_consumer` for what each call does."""

    def __init__(self, options: StreamOptions) -> None:
        self.options = options
        self._consumer: StreamConsumer | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"options": self.options, "_consumer": None}

    @property
    def consumer(self) -> StreamConsumer:
        if self._consumer is None:
            self._consumer = StreamConsumer(self.options)
        return self._consumer

    def offset(self, number: int) -> dict[str, Any]:
        return {"log": self.options.log_queue, "batch": number}

    def number(self, offset: dict[str, Any]) -> int:
        """The batch number of an offset from Spark's checkpoint, once it is known to be this stream's."""
        if not isinstance(offset, dict) or not isinstance(offset.get("batch"), int):
            raise errors.BadRequest(f"not an offset of a kittiwake stream: {offset!r}")
        if offset.get("log") != self.options.log_queue:
            raise errors.BadRequest(
                f"the checkpoint belongs to the stream log {offset.get('log')!r}, but this query reads "
                f"{self.options.log_queue!r}: keep the queue and the option 'name' of a checkpointed query"
            )
        return offset["batch"]

    def initialOffset(self) -> dict[str, Any]:
        return self.offset(self.consumer.initial())

    def latestOffset(self) -> dict[str, Any]:
        return self.offset(self.consumer.latest())

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[RowsPartition]:
        rows = [logged_row(task) for task in self.consumer.plan(self.number(start), self.number(end))]
        if not rows:
            return []
        parts = min(self.options.partitions, len(rows))
        size, extra = divmod(len(rows), parts)
        cuts = [0]
        for index in range(parts):
            cuts.append(cuts[-1] + size + (1 if index < extra else 0))
        return [RowsPartition(rows[cuts[index] : cuts[index + 1]]) for index in range(parts)]

    def read(self, partition: InputPartition) -> Iterator[Row]:
        assert isinstance(partition, RowsPartition)
        return iter(partition.rows)

    def commit(self, end: dict[str, Any]) -> None:
        self.consumer.commit(self.number(end))

    def stop(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None

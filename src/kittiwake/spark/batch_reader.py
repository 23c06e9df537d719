"""`spark.read.format("kittiwake")`: tasks as rows, read with `peek`, never leased.

Planning (on the driver) lists the queues to read with their sizes — the one
`queue` (`stats`), or every non-empty queue matching `pattern` (`list_queues`)
— and makes about `partitions` Spark partitions of about equal size: a queue
larger than its share is cut into pid ranges (`pid_ranges`, a few `peek`
probes), and small queues share a partition. By default there is one
partition per queue (at most `DEFAULT_QUEUE_PARTITIONS`), or one per
`DEFAULT_TASKS_PER_PARTITION` tasks where that gives more. Sizes need the
admin right on a queue (`stats`, `list_queues`); a user with only consume
reads a named queue in `partitions` ranges (default one), whatever its size.

Reading (in each Spark task) pages through its ranges with `peek`, `page_size`
tasks per request, from the range's first pid to the next range's. The read
changes nothing in the broker — no lease, no attempt counted — and is not a
snapshot: a task enqueued or finished while the read runs may or may not be
seen, but no pid is read twice, since the ranges do not overlap and each is
read forward.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

from pyspark.sql.datasource import DataSourceReader, InputPartition

from kittiwake import errors
from kittiwake.client import Client
from kittiwake.client.interfaces import QueueClient
from kittiwake.model import Limits
from kittiwake.spark import pid_ranges
from kittiwake.spark.options import ReadOptions
from kittiwake.spark.rows import Row, view_row

DEFAULT_QUEUE_PARTITIONS = 200
DEFAULT_TASKS_PER_PARTITION = 100_000
LIST_QUEUES_LIMIT = 1_000_000
MAX_PID_BYTES = Limits().max_pid_bytes


@dataclass(frozen=True, slots=True)
class PidRange:
    """The tasks of `queue` with `start` <= pid < `stop` (None: unbounded)."""

    queue: str
    start: str | None = None
    stop: str | None = None


class RangesPartition(InputPartition):
    """One Spark partition of a batch read: the pid ranges it reads, in order."""

    def __init__(self, ranges: list[PidRange]) -> None:
        super().__init__(tuple(ranges))
        self.ranges = tuple(ranges)


class BatchReader(DataSourceReader):
    """Plans the partitions of a read on the driver and reads each in a Spark task."""

    def __init__(self, options: ReadOptions) -> None:
        self.options = options

    def partitions(self) -> list[RangesPartition]:
        with self._client() as client:
            return [RangesPartition(part) for part in plan(client, self.options)]

    def read(self, partition: InputPartition | None) -> Iterator[Row]:
        if not isinstance(partition, RangesPartition):
            return  # Spark reads one partition of None when there is nothing to read
        with self._client() as client:
            for pid_range in partition.ranges:
                yield from read_range(client, pid_range, self.options.page_size)

    def _client(self) -> Client:
        return Client(self.options.url, timeout=self.options.timeout, worker="spark-read")


def plan(client: QueueClient, options: ReadOptions) -> list[list[PidRange]]:
    """The pid ranges of each partition (empty when there is nothing to read)."""
    if options.queue is not None:
        try:
            sizes = [(stats.queue, stats.size) for stats in client.stats([options.queue], sample=0)]
        except errors.Forbidden:
            # stats needs admin on the queue, peek only consume: read it without knowing its size
            return [[PidRange(options.queue, start, stop)] for start, stop in _unsized_ranges(client, options)]
    else:
        sizes = [(info.queue, info.size) for info in client.list_queues(options.pattern, limit=LIST_QUEUES_LIMIT)]
    sizes = [(name, size) for name, size in sizes if size > 0]
    if not sizes:
        return []
    total = sum(size for _, size in sizes)
    target = options.partitions or default_partitions(len(sizes), total)
    share = max(1, math.ceil(total / target))
    partitions: list[list[PidRange]] = []
    whole: list[tuple[PidRange, int]] = []  # queues read whole, with their sizes
    for name, size in sizes:
        parts = math.ceil(size / share)
        if parts > 1:
            cuts = pid_ranges.boundaries(_prober(client, name), parts)
            partitions.extend([PidRange(name, start, stop)] for start, stop in pid_ranges.ranges(cuts))
        else:
            whole.append((PidRange(name), size))
    return partitions + pack(whole, share)


def _unsized_ranges(client: QueueClient, options: ReadOptions) -> list[tuple[str | None, str | None]]:
    assert options.queue is not None
    parts = options.partitions or 1
    return pid_ranges.ranges(pid_ranges.boundaries(_prober(client, options.queue), parts))


def default_partitions(queues: int, total: int) -> int:
    """One partition per queue (at most 200), or one per 100,000 tasks if that is more."""
    return max(min(queues, DEFAULT_QUEUE_PARTITIONS), math.ceil(total / DEFAULT_TASKS_PER_PARTITION))


def pack(queues: list[tuple[PidRange, int]], share: int) -> list[list[PidRange]]:
    """Queues read whole, grouped in name order until each group holds about `share` tasks."""
    groups: list[list[PidRange]] = []
    current: list[PidRange] = []
    held = 0
    for pid_range, size in queues:
        current.append(pid_range)
        held += size
        if held >= share:
            groups.append(current)
            current, held = [], 0
    if current:
        groups.append(current)
    return groups


def _prober(client: QueueClient, queue: str) -> pid_ranges.Probe:
    def probe(from_pid: str | None) -> str | None:
        found = client.peek(queue, 1, from_pid)
        return found[0].pid if found else None

    return probe


def read_range(client: QueueClient, pid_range: PidRange, page_size: int) -> Iterator[Row]:
    """Rows of the tasks in `pid_range`, in pid order, `page_size` per peek."""
    from_pid, skip = pid_range.start, None
    while True:
        page = client.peek(pid_range.queue, page_size, from_pid)
        if skip is not None and page and page[0].pid == skip:
            page = page[1:]
        if not page:
            return
        for task in page:
            if pid_range.stop is not None and task.pid >= pid_range.stop:
                return
            yield view_row(task)
        from_pid, skip = after(page[-1].pid)


def after(pid: str) -> tuple[str, str | None]:
    """Where the next page starts: the smallest string after `pid` (pid + the smallest printable
    character) when that is still a valid pid, else `pid` itself, to be skipped."""
    following = pid + pid_ranges.SMALLEST
    if len(following.encode()) <= MAX_PID_BYTES:
        return following, None
    return pid, pid

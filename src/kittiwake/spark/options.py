"""The options of the `kittiwake` Spark data source, read and checked once per use.

Spark hands a data source its options as strings in a case-insensitive map
(`.option("url", ...)`). Each use — a batch read, a write, a stream — reads
the options it understands into a frozen record here, and refuses what it
cannot use with `BadRequest` naming the option: a missing `url`, both `queue`
and `pattern`, a number that does not parse or is out of range, an option
that belongs to another use. Nothing here talks to a broker; a bad queue name
is refused by the same rules the broker applies (`kittiwake.model`).

| option | read | write | stream | meaning |
| --- | --- | --- | --- | --- |
| `url` | required | required | required | the broker, `kw://host:port` (credentials and TLS as for `Client`) |
| `queue` | one of | default | required | the queue to read / write when a row names none / consume |
| `pattern` | one of | — | — | read every queue whose name matches this regex |
| `partitions` | ✓ | — | ✓ | Spark partitions in all (read) or per batch (stream) |
| `page_size` | ✓ | — | — | tasks per peek request |
| `batch_size` | — | ✓ | — | tasks per enqueue request (which also stops at `writer.MAX_REQUEST_BYTES`) |
| `name` | — | — | required | the stream's identity: its batch log is `<queue>.stream.<name>` |
| `lease_secs` | — | — | ✓ | how long the stream's leases last between renewals |
| `max_tasks_per_batch` | — | — | ✓ | tasks leased for one micro-batch |
| `receiver` | — | — | ✓ | also lease the tasks directed at this receiver |
| `timeout` | ✓ | ✓ | ✓ | seconds to wait for each broker reply (default: no limit) |
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import overload

from kittiwake.client.url import parse_url
from kittiwake.constants import STREAM_LOG_INFIX
from kittiwake.errors import BadRequest
from kittiwake.model import Limits, validate_name, validate_queue

LIMITS = Limits()

DEFAULT_PAGE_SIZE = 1000
DEFAULT_BATCH_SIZE = 1000
DEFAULT_STREAM_LEASE_SECS = 60.0
DEFAULT_MAX_TASKS_PER_BATCH = 1000
# A batch is dequeued in one update together with its commit marker and a page of the log's
# garbage: the batch may take at most half of the update's items.
MAX_TASKS_PER_BATCH = LIMITS.max_batch // 2
DEFAULT_STREAM_PARTITIONS = 1
MAX_PARTITIONS = 100_000
# A stream's name becomes part of a queue name, so it keeps to queue-name characters
# (without `#`: the log stays in its queue's consistency group).
_STREAM_NAME_RE = re.compile(r"[A-Za-z0-9_.:@/\-]+")

READ_OPTIONS = frozenset({"url", "queue", "pattern", "partitions", "page_size", "timeout"})
WRITE_OPTIONS = frozenset({"url", "queue", "batch_size", "timeout"})
STREAM_OPTIONS = frozenset(
    {"url", "queue", "name", "lease_secs", "max_tasks_per_batch", "partitions", "receiver", "timeout"}
)


@dataclass(frozen=True, slots=True)
class ReadOptions:
    """A batch read: one queue or the queues matching a pattern, looked at without leasing."""

    url: str
    queue: str | None
    pattern: str | None
    partitions: int | None  # None: one per queue, more for large queues
    page_size: int
    timeout: float | None


@dataclass(frozen=True, slots=True)
class WriteOptions:
    """A write: rows enqueued in batches; `queue` is used for rows without a queue column."""

    url: str
    queue: str | None
    batch_size: int
    timeout: float | None


@dataclass(frozen=True, slots=True)
class StreamOptions:
    """A stream: tasks of one queue leased batch by batch, dequeued once Spark has written them."""

    url: str
    queue: str
    name: str
    lease_secs: float
    max_tasks_per_batch: int
    partitions: int
    receiver: str | None
    timeout: float | None

    @property
    def log_queue(self) -> str:
        """The queue that holds this stream's batch log, beside its source queue."""
        return stream_log_queue(self.queue, self.name)


def stream_log_queue(queue: str, name: str) -> str:
    """`<queue>.stream.<name>`: in the same consistency group as `queue`, so that one update
    can dequeue a batch's tasks and record its commit."""
    return f"{queue}{STREAM_LOG_INFIX}{name}"


def url_of(options: Mapping[str, str]) -> str:
    """The broker URL option, required by every use of the source."""
    url = options.get("url")
    if url is None or not str(url).strip():
        raise BadRequest("option 'url' is required: the broker, e.g. .option(\"url\", \"kw://host:7370\")")
    parse_url(str(url))  # refuses a malformed URL now, not in every Spark task
    return str(url).strip()


def read_options(options: Mapping[str, str]) -> ReadOptions:
    _known(options, READ_OPTIONS, "a batch read")
    queue, pattern = _text(options, "queue"), _text(options, "pattern")
    if queue is not None and pattern is not None:
        raise BadRequest("options 'queue' and 'pattern' exclude each other: read one queue, or the queues a pattern matches")
    if queue is None and pattern is None:
        raise BadRequest("a read needs option 'queue' (one queue) or 'pattern' (a regex over queue names)")
    if queue is not None:
        validate_queue(queue, LIMITS)
    return ReadOptions(
        url=url_of(options),
        queue=queue,
        pattern=pattern,
        partitions=_integer(options, "partitions", None, 1, MAX_PARTITIONS),
        page_size=_integer(options, "page_size", DEFAULT_PAGE_SIZE, 1, LIMITS.max_batch),
        timeout=_seconds(options, "timeout", None),
    )


def write_options(options: Mapping[str, str]) -> WriteOptions:
    _known(options, WRITE_OPTIONS, "a write")
    queue = _text(options, "queue")
    if queue is not None:
        validate_queue(queue, LIMITS)
    return WriteOptions(
        url=url_of(options),
        queue=queue,
        batch_size=_integer(options, "batch_size", DEFAULT_BATCH_SIZE, 1, LIMITS.max_batch),
        timeout=_seconds(options, "timeout", None),
    )


def stream_options(options: Mapping[str, str]) -> StreamOptions:
    if _text(options, "pattern") is not None:
        raise BadRequest("a stream consumes one queue: give option 'queue', not 'pattern'")
    _known(options, STREAM_OPTIONS, "a stream")
    queue = _text(options, "queue")
    if queue is None:
        raise BadRequest("a stream needs option 'queue': the queue it consumes")
    validate_queue(queue, LIMITS)
    name = _text(options, "name")
    if name is None:
        raise BadRequest(
            "a stream needs option 'name': its identity, kept with its checkpoint; "
            f"its batch log is the queue '{stream_log_queue(queue, '<name>')}'"
        )
    if not _STREAM_NAME_RE.fullmatch(name):
        raise BadRequest(f"option 'name' {name!r} may hold only the characters A-Z a-z 0-9 _ . : @ / -")
    log_queue = stream_log_queue(queue, name)
    if len(log_queue.encode()) > LIMITS.max_queue_name_bytes:
        raise BadRequest(
            f"the stream's batch log '{log_queue}' is over {LIMITS.max_queue_name_bytes} bytes: choose a shorter 'name'"
        )
    lease_secs = _seconds(options, "lease_secs", DEFAULT_STREAM_LEASE_SECS)
    assert lease_secs is not None
    if not 1.0 <= lease_secs <= LIMITS.max_lease_secs:
        raise BadRequest(f"option 'lease_secs' must be between 1 and {LIMITS.max_lease_secs:g}, got {lease_secs:g}")
    receiver = _text(options, "receiver")
    validate_name(receiver, LIMITS, "option 'receiver'")
    return StreamOptions(
        url=url_of(options),
        queue=queue,
        name=name,
        lease_secs=lease_secs,
        max_tasks_per_batch=_integer(
            options, "max_tasks_per_batch", DEFAULT_MAX_TASKS_PER_BATCH, 1, MAX_TASKS_PER_BATCH
        ),
        partitions=_integer(options, "partitions", DEFAULT_STREAM_PARTITIONS, 1, MAX_PARTITIONS),
        receiver=receiver,
        timeout=_seconds(options, "timeout", None),
    )


def _known(options: Mapping[str, str], known: frozenset[str], use: str) -> None:
    unknown = sorted(str(key).lower() for key in options if str(key).lower() not in known)
    if unknown:
        raise BadRequest(
            f"{use} does not take option{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))}; "
            f"it takes {', '.join(sorted(known))}"
        )


def _text(options: Mapping[str, str], key: str) -> str | None:
    value = options.get(key)
    if value is None:
        return None
    text = str(value).strip()
    if not text:
        raise BadRequest(f"option {key!r} is empty")
    return text


@overload
def _integer(options: Mapping[str, str], key: str, default: int, low: int, high: int) -> int: ...
@overload
def _integer(options: Mapping[str, str], key: str, default: None, low: int, high: int) -> int | None: ...
def _integer(options: Mapping[str, str], key: str, default: int | None, low: int, high: int) -> int | None:
    text = _text(options, key)
    if text is None:
        return default
    try:
        value = int(text)
    except ValueError:
        raise BadRequest(f"option {key!r} must be a whole number, got {text!r}") from None
    if not low <= value <= high:
        raise BadRequest(f"option {key!r} must be between {low} and {high}, got {value}")
    return value


def _seconds(options: Mapping[str, str], key: str, default: float | None) -> float | None:
    text = _text(options, key)
    if text is None:
        return default
    try:
        value = float(text)
    except ValueError:
        raise BadRequest(f"option {key!r} must be a number of seconds, got {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise BadRequest(f"option {key!r} must be a positive number of seconds, got {text!r}")
    return value

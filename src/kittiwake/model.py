"""Plain data shared by every layer: tasks, lease references, limits and name rules.

Owns the vocabulary of the model (docs/model.md: task, queue name, consistency group, pid,
lease) as frozen or slotted dataclasses, the published hard limits, and the
validation of names and pids. Nothing here does I/O.

Names and limits (documented in docs/operations.md, "Limits"):

* queue name: `group#name`, 1..250 bytes of `[A-Za-z0-9_.:@/-]` plus at most
  one `#`; no `#` means the default group `""`. 250 leaves room for the
  dead-letter suffix `.dead` under the 255-byte ceiling.
* pid: 1..`max_pid_bytes` (default 512) bytes of printable UTF-8, no NUL or
  control characters; compared bytewise (lexicographically). FIFO pids are the
  broker's clock in microseconds, zero-padded to 17 digits (see `fifo_pid`), so
  "pid = due time" delayed tasks and FIFO tasks sort together and
  `max_pid=pid_at(now)` leases everything that is due.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum

import msgspec

from kittiwake.constants import (  # re-exported: the broker's layers import them from here
    DEAD_PID_EXTRA_BYTES,
    DEAD_PID_HEADER,
    DEAD_PID_SEPARATOR,
    DEAD_REASON_HEADER,
    DEAD_SUFFIX,
    DEFAULT_GROUP,
    DEFAULT_LEASE_SECS,
    FIFO_PID_DIGITS,
    GROUP_SEPARATOR,
)
from kittiwake.errors import BadRequest

_QUEUE_RE = re.compile(r"(?:[A-Za-z0-9_.:@/\-]+#)?[A-Za-z0-9_.:@/\-]+")  # used with fullmatch
_HEADER_KEY_RE = re.compile(r"[A-Za-z0-9_.\-]{1,64}")  # used with fullmatch


@dataclass(frozen=True, slots=True)
class Limits:
    """Published hard limits; a request over any of them gets BAD_REQUEST with the reason."""

    max_queue_name_bytes: int = 250
    max_pid_bytes: int = 512
    max_data_bytes: int = 1 << 20
    max_name_bytes: int = 255  # sender, receiver, worker ids
    max_headers: int = 32
    max_header_value_bytes: int = 4096
    max_batch: int = 10_000  # items in one request
    max_reply_data_bytes: int = 8 << 20  # task data in one lease/peek reply (at least one task is always returned)
    max_lease_secs: float = 12 * 3600.0
    default_lease_secs: float = DEFAULT_LEASE_SECS
    max_wait_secs: float = 300.0
    default_max_attempts: int = 10
    max_attempts_ceiling: int = 1_000_000


class TaskState(str, Enum):
    """Where a task stands; a task is in exactly one state (the moves: `kittiwake.engine.transitions`)."""

    AVAILABLE = "available"  # in its queue, may be leased
    LEASED = "leased"  # held by one worker until lease_expires_at
    BLOCKED = "blocked"  # waits for its parents to finish (dependencies)
    DEAD = "dead"  # left its queue as a dead letter in `<queue>.dead`; a live task is never shown dead
    GONE = "gone"  # no such task: never enqueued, finished, or its queue deleted


def split_queue(queue: str) -> tuple[str, str]:
    """(group, name) of a queue name; the default group is ``""``."""
    group, sep, name = queue.rpartition(GROUP_SEPARATOR)
    return (group, name) if sep else (DEFAULT_GROUP, queue)


def group_of(queue: str) -> str:
    """The consistency group of a queue name."""
    index = queue.rfind(GROUP_SEPARATOR)
    return queue[:index] if index >= 0 else DEFAULT_GROUP


def dead_queue_of(queue: str) -> str:
    """The dead-letter queue of a queue: `group#name.dead`, same group."""
    return queue + DEAD_SUFFIX


# Every dead letter is kept: it sits in `<queue>.dead` at `<pid>~<death time>`
# (a FIFO pid from the broker's clock, so a pid's dead letters are adjacent and
# in the order they died), with the reason and the original pid in headers.
def dead_letter_pid(pid: str, death_pid: str) -> str:
    """The pid of a dead letter of `pid`, given a FIFO pid of its death."""
    return pid + DEAD_PID_SEPARATOR + death_pid


def dead_letter_prefix(pid: str) -> str:
    """Every dead letter of `pid` has a pid that starts with this (others may too: check DEAD_PID_HEADER)."""
    return pid + DEAD_PID_SEPARATOR


def task_key(item: object, what: str = "after") -> tuple[str, str]:
    """(queue, pid) of a task named by a pair, a map with "queue" and "pid", or anything with
    `.queue` and `.pid` (a handle, a job node, a leased task); BAD_REQUEST otherwise."""
    if isinstance(item, Mapping):
        queue, pid = item.get("queue"), item.get("pid")
    elif isinstance(item, (tuple, list)) and len(item) == 2:
        queue, pid = item
    else:
        queue, pid = getattr(item, "queue", None), getattr(item, "pid", None)
    if queue is None or pid is None:
        raise BadRequest(f"each entry of {what} names a task: (queue, pid) or an object with queue and pid")
    for value, part in ((queue, "queue"), (pid, "pid")):
        if not isinstance(value, str):
            raise BadRequest(f"{what} {part} must be a string, got {type(value).__name__}")
    return (queue, pid)


def fifo_pid(micros: int) -> str:
    """The FIFO pid for a clock reading in microseconds."""
    return str(micros).zfill(FIFO_PID_DIGITS)


def pid_at(epoch_secs: float) -> str:
    """The pid that sorts at a wall-clock time: use it as `pid` for a delayed task
    (due time) and as `max_pid` to lease only what is due."""
    return fifo_pid(int(epoch_secs * 1_000_000))


def validate_queue(queue: object, limits: Limits, what: str = "queue") -> str:
    if not isinstance(queue, str):
        raise BadRequest(f"{what} must be a string, got {type(queue).__name__}")
    if not queue:
        raise BadRequest(f"{what} name is empty")
    # a dead-letter queue may carry its suffix on top of the longest name
    most = limits.max_queue_name_bytes + (len(DEAD_SUFFIX) if queue.endswith(DEAD_SUFFIX) else 0)
    if len(queue.encode("utf-8", "surrogatepass")) > most:
        raise BadRequest(f"{what} name is over {most} bytes")
    if not _QUEUE_RE.fullmatch(queue):
        raise BadRequest(
            f"{what} name {queue[:64]!r} has characters outside [A-Za-z0-9_.:@/-] "
            "or more than one '#'"
        )
    return queue


def validate_pid(pid: object, limits: Limits, what: str = "pid", queue: str | None = None) -> str:
    """A pid as a client may send it; naming a task of a dead-letter `queue`
    it may be longer by the dead-letter suffix."""
    if not isinstance(pid, str):
        raise BadRequest(f"{what} must be a string, got {type(pid).__name__}")
    if not pid:
        raise BadRequest(f"{what} is empty")
    try:
        size = len(pid.encode("utf-8"))
    except UnicodeEncodeError:
        raise BadRequest(f"{what} is not valid UTF-8") from None
    most = limits.max_pid_bytes
    if queue is not None and queue.endswith(DEAD_SUFFIX):
        most += DEAD_PID_EXTRA_BYTES
    if size > most:
        raise BadRequest(f"{what} is over {most} bytes")
    if not pid.isprintable():
        raise BadRequest(f"{what} has NUL or control characters")
    return pid


def validate_name(value: object, limits: Limits, what: str) -> str | None:
    """Optional identifiers: sender, receiver, worker."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise BadRequest(f"{what} must be a string, got {type(value).__name__}")
    if not value:
        raise BadRequest(f"{what} is empty")
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        raise BadRequest(f"{what} is not valid UTF-8") from None
    if size > limits.max_name_bytes:
        raise BadRequest(f"{what} is over {limits.max_name_bytes} bytes")
    if not value.isprintable():
        raise BadRequest(f"{what} has NUL or control characters")
    return value


def validate_headers(headers: object, limits: Limits) -> dict[str, str] | None:
    if headers is None:
        return None
    if not isinstance(headers, dict):
        raise BadRequest("headers must be a map of string to string")
    if len(headers) > limits.max_headers:
        raise BadRequest(f"more than {limits.max_headers} headers")
    for key, value in headers.items():
        if not isinstance(key, str) or not _HEADER_KEY_RE.fullmatch(key):
            raise BadRequest(f"header name {str(key)[:64]!r} must match [A-Za-z0-9_.-]{{1,64}}")
        if not isinstance(value, str):
            raise BadRequest(f"header {key!r} must be a string")
        try:
            size = len(value.encode("utf-8"))
        except UnicodeEncodeError:
            raise BadRequest(f"header {key!r} is not valid UTF-8") from None
        if size > limits.max_header_value_bytes:
            raise BadRequest(f"header {key!r} is over {limits.max_header_value_bytes} bytes")
    return headers or None


def validate_lease_secs(value: object, limits: Limits) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BadRequest("lease_secs must be a number")
    if not (0 < value <= limits.max_lease_secs) or value != value:
        raise BadRequest(f"lease_secs must be in (0, {limits.max_lease_secs}]")
    return float(value)


def validate_count(value: object, what: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadRequest(f"{what} must be an integer")
    if not (low <= value <= high):
        raise BadRequest(f"{what} must be in [{low}, {high}]")
    return value


class NewTask(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    """A task as a producer hands it in: `pid=None` asks for a FIFO pid. Also the wire
    form of a task to enqueue (`protocol.messages.TaskIn`), so the broker hands the
    engine what it decoded."""

    queue: str
    data: bytes
    pid: str | None = None
    sender: str | None = None
    receiver: str | None = None
    headers: dict[str, str] | None = None
    max_attempts: int | None = None
    after: list[tuple[str, str]] | None = None  # parents (queue, pid): leasable once all finished
    unless: list[tuple[str, str]] | None = None  # collapse instead if any of these tasks exists

    def validate(self, limits: Limits) -> NewTask:
        validate_queue(self.queue, limits)
        if self.pid is not None:
            validate_pid(self.pid, limits)
        if not isinstance(self.data, (bytes, bytearray, memoryview)):
            raise BadRequest("data must be bytes")
        if len(self.data) > limits.max_data_bytes:
            raise BadRequest(f"data is {len(self.data)} bytes, over the limit of {limits.max_data_bytes}")
        validate_name(self.sender, limits, "sender")
        validate_name(self.receiver, limits, "receiver")
        validate_headers(self.headers, limits)
        if self.max_attempts is not None:
            validate_count(self.max_attempts, "max_attempts", 1, limits.max_attempts_ceiling)
        if self.after is not None:
            self.after = validate_keys(self.after, limits, "after")
            if self.pid is not None and (self.queue, self.pid) in self.after:
                raise BadRequest(f"task {self.queue}/{self.pid} cannot wait for itself")
        if self.unless is not None:
            self.unless = validate_keys(self.unless, limits, "unless")
        return self


def validate_keys(keys: object, limits: Limits, what: str) -> list[tuple[str, str]]:
    """A list of (queue, pid) task keys, duplicates dropped."""
    if not isinstance(keys, (list, tuple)):
        raise BadRequest(f"{what} must be a list of [queue, pid] pairs")
    if len(keys) > limits.max_batch:
        raise BadRequest(f"more than {limits.max_batch} entries in {what}")
    found: dict[tuple[str, str], None] = {}
    for key in keys:
        if not isinstance(key, (list, tuple)) or len(key) != 2:
            raise BadRequest(f"each entry of {what} must be a [queue, pid] pair")
        queue, pid = key
        found[(validate_queue(queue, limits, f"{what} queue"), validate_pid(pid, limits, f"{what} pid", queue))] = None
    return list(found)


@dataclass(slots=True)
class Task:
    """A stored task and its metadata. `lease_id` is the last lease granted (0:
    never leased); the task is leased iff `lease_expires_at` is set and in the future."""

    queue: str
    pid: str
    data: bytes
    enqueued_at: float
    sender: str | None = None
    receiver: str | None = None
    headers: dict[str, str] | None = None
    max_attempts: int | None = None
    attempts: int = 0  # failed attempts: releases and expired leases
    deliveries: int = 0  # times leased
    lease_id: int = 0
    lease_owner: str | None = None
    lease_peer: str | None = None
    leased_at: float | None = None
    lease_expires_at: float | None = None
    waiting_on: int = 0  # unfinished parents (Albatross §5.2.2); leasable only at 0
    children: int = 0  # tasks waiting on this one
    progress: float | None = None  # reported by the worker holding the lease, 0..1
    note: str | None = None  # the worker's message with its progress

    def state_at(self, now: float) -> TaskState:
        if self.waiting_on > 0:
            return TaskState.BLOCKED
        if self.lease_expires_at is not None and self.lease_expires_at > now:
            return TaskState.LEASED
        return TaskState.AVAILABLE

    def size_bytes(self) -> int:
        return len(self.data) + len(self.pid) + 96


class LeaseRef(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """What a worker hands back to renew, release or dequeue: the lease id is the fencing token.
    Also its wire form (`protocol.messages.LeaseRefIn`)."""

    queue: str
    pid: str
    lease_id: int


@dataclass(slots=True)
class LeaseRequest:
    """Arguments of a lease call (TaskMaster LeaseTasks plus Paštas receivers)."""

    queues: list[str]
    max_tasks: int = 1
    lease_secs: float = DEFAULT_LEASE_SECS
    max_pid: str | None = None
    receiver: str | None = None
    worker: str | None = None
    peer: str | None = None
    rate_per_sec: float | None = None  # broker-wide limit of leases per second from these queues
    rate_burst: float | None = None  # tokens the limit may save up (default: one second's worth)
    # a bound on the reply (a UDP datagram): stop before a task that would not fit in what is left;
    # pass over, without leasing, a task that alone would not fit (counted in `LeasedTasks.too_large`)
    max_reply_bytes: int | None = None


class LeasedTasks(list[Task]):
    """The tasks a lease took, in pid order: a list, and `too_large`, how many tasks it passed over
    because alone they would not fit the request's `max_reply_bytes` (left available, no attempt
    counted: lease them where replies are larger). The reply says it beside the list."""

    __slots__ = ("too_large",)

    def __init__(self, tasks: Iterable[Task] = ()) -> None:
        super().__init__(tasks)
        self.too_large = 0


@dataclass(slots=True)
class EnqueueOutcome:
    """Per task of an enqueue: where it landed and whether it collapsed into an existing task."""

    queue: str
    pid: str
    collapsed: bool


@dataclass(slots=True)
class ItemOutcome:
    """Per item of a batched renew / dequeue / release: ok, or the error code and reason."""

    queue: str
    pid: str
    ok: bool
    code: str | None = None
    message: str | None = None
    expires_at: float | None = None
    dead: bool = False  # release moved the task to the dead-letter queue


@dataclass(slots=True)
class QueueInfo:
    """One row of list_queues."""

    queue: str
    size: int
    leased: int


@dataclass(slots=True)
class LeaseSample:
    queue: str
    pid: str
    worker: str | None
    peer: str | None
    leased_at: float | None
    expires_at: float | None


@dataclass(slots=True)
class QueueStats:
    """TaskMaster §3.5 introspection for one queue."""

    queue: str
    size: int
    available: int
    leased: int
    dead: int
    enqueue_rate_1m: float
    enqueue_rate_5m: float
    lease_rate_1m: float
    lease_rate_5m: float
    dequeue_rate_1m: float
    dequeue_rate_5m: float
    avg_lease_secs: float | None
    oldest_task_age_secs: float | None
    leased_sample: list[LeaseSample] = field(default_factory=list)
    blocked: int = 0  # tasks waiting for parents (counted in size, not in available)

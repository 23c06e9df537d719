"""Every protocol operation as a client call: arguments in, request fields and a result decoder out.

Both clients (`Client`, blocking, and `AsyncClient`, asyncio) build their
requests here, so they accept the same arguments, check them the same way and
return the same types; they differ only in how bytes reach the broker.

Checks here are the cheap ones — types, and shapes such as "a lease ref needs
queue, pid and lease_id" — raised as `BadRequest` before anything is sent. The
broker remains the authority on limits and names and answers BAD_REQUEST for
the rest.

Single item or batch (renew, dequeue, release): one task-like argument (a
`LeasedTask`, a `model.LeaseRef` or a mapping with queue, pid and lease_id) is
a single call: it returns that item's `ItemOutcome` or raises the
`kittiwake.errors` error the broker gave for it. Any other iterable is a
batch: it returns one outcome per item, in order, and never raises for an
item's failure (only for a failure of the whole request). A successful renew
moves `expires_at` of the `LeasedTask` objects it was given forward.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Callable, Generic, TypeVar, Union

import msgspec

from kittiwake import errors, model
from kittiwake.client.results import (
    DeadLetterPage,
    EnqueueOutcome,
    ItemOutcome,
    LeasedTask,
    QueueInfo,
    QueueStats,
    TaskView,
    UpdateResult,
)
from kittiwake.model import LeaseRef, NewTask

T = TypeVar("T")

# Anything that names a lease: what lease returned, a model.LeaseRef, or a map.
LeaseLike = Union[LeasedTask, LeaseRef, Mapping[str, Any]]
# Anything that describes a task to enqueue: a model.NewTask (or any object
# with the same attributes), or a map with the same keys.
TaskLike = Union[NewTask, Mapping[str, Any]]

TASK_FIELDS = ("queue", "data", "pid", "sender", "receiver", "headers", "max_attempts", "after", "unless")
LEASE_FIELDS = ("queue", "pid", "lease_id")
DEFAULT_LEASE_SECS = 30.0
DEFAULT_STATS_SAMPLE = 10


@dataclass(frozen=True, slots=True)
class Call(Generic[T]):
    """One request ready to send: its op, its fields, and how to read its result."""

    op: str
    fields: dict[str, Any]
    decode: Callable[[bytes], T]  # msgpack bytes of the reply's `result`
    wait_secs: float = 0.0  # a long-poll: the broker may hold the reply this long


_decode_enqueued: Callable[[bytes], list[EnqueueOutcome]] = msgspec.msgpack.Decoder(list[EnqueueOutcome]).decode
_decode_leased: Callable[[bytes], list[LeasedTask]] = msgspec.msgpack.Decoder(list[LeasedTask]).decode
_decode_items: Callable[[bytes], list[ItemOutcome]] = msgspec.msgpack.Decoder(list[ItemOutcome]).decode
_decode_update: Callable[[bytes], UpdateResult] = msgspec.msgpack.Decoder(UpdateResult).decode
_decode_views: Callable[[bytes], list[TaskView]] = msgspec.msgpack.Decoder(list[TaskView]).decode
_decode_view: Callable[[bytes], TaskView] = msgspec.msgpack.Decoder(TaskView).decode
_decode_names: Callable[[bytes], list[str]] = msgspec.msgpack.Decoder(list[str]).decode
_decode_queue_infos: Callable[[bytes], list[QueueInfo]] = msgspec.msgpack.Decoder(list[QueueInfo]).decode
_decode_stats: Callable[[bytes], list[QueueStats]] = msgspec.msgpack.Decoder(list[QueueStats]).decode
_decode_int: Callable[[bytes], int] = msgspec.msgpack.Decoder(int).decode
_decode_dead_page: Callable[[bytes], DeadLetterPage] = msgspec.msgpack.Decoder(DeadLetterPage).decode
_decode_any: Callable[[bytes], Any] = msgspec.msgpack.Decoder().decode


# ------------------------------------------------------------------ checks


def _string(value: object, what: str) -> str:
    if not isinstance(value, str):
        raise errors.BadRequest(f"{what} must be a string, got {type(value).__name__}")
    return value


def _optional_string(value: object, what: str) -> str | None:
    return None if value is None else _string(value, what)


def _integer(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise errors.BadRequest(f"{what} must be an integer, got {type(value).__name__}")
    return value


def _number(value: object, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise errors.BadRequest(f"{what} must be a number, got {type(value).__name__}")
    return float(value)


def _data(value: object) -> bytes:
    """Task data is bytes; a str is accepted as a convenience and sent as UTF-8."""
    if isinstance(value, bytes):
        return value
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, str):
        return value.encode("utf-8")
    raise errors.BadRequest(f"data must be bytes or str, got {type(value).__name__}")


def _headers(value: object) -> dict[str, str] | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise errors.BadRequest(f"headers must be a map of str to str, got {type(value).__name__}")
    headers = dict(value)
    for key, item in headers.items():
        if not isinstance(key, str) or not isinstance(item, str):
            raise errors.BadRequest("headers must be a map of str to str")
    return headers


def _names(value: object, what: str) -> list[str]:
    """A queue name or a list of them."""
    if isinstance(value, str):
        return [value]
    if not isinstance(value, Iterable) or isinstance(value, (bytes, Mapping)):
        raise errors.BadRequest(f"{what} must be a name or a list of names")
    names = list(value)
    for name in names:
        _string(name, f"each of {what}")
    return names


def task_fields(
    queue: object,
    data: object,
    *,
    pid: object = None,
    sender: object = None,
    receiver: object = None,
    headers: object = None,
    max_attempts: object = None,
    after: object = None,
    unless: object = None,
) -> dict[str, Any]:
    """The wire form of one task to enqueue; unset optional fields are left out."""
    fields: dict[str, Any] = {"queue": _string(queue, "queue"), "data": _data(data)}
    optional = {
        "pid": _optional_string(pid, "pid"),
        "sender": _optional_string(sender, "sender"),
        "receiver": _optional_string(receiver, "receiver"),
        "headers": _headers(headers),
        "max_attempts": None if max_attempts is None else _integer(max_attempts, "max_attempts"),
        "after": _keys(after, "after"),
        "unless": _keys(unless, "unless"),
    }
    fields.update((key, value) for key, value in optional.items() if value is not None)
    return fields


def task_fields_of(task: object) -> dict[str, Any]:
    """The wire form of a task given as a map or as an object with NewTask's attributes."""
    if isinstance(task, Mapping):
        unknown = set(task) - set(TASK_FIELDS)
        if unknown:
            raise errors.BadRequest(f"unknown task fields: {', '.join(sorted(map(str, unknown)))}")
        values = dict(task)
    else:
        values = {name: getattr(task, name, None) for name in TASK_FIELDS}
    if values.get("queue") is None or values.get("data") is None:
        raise errors.BadRequest("every task needs a queue and data")
    queue, data = values.pop("queue"), values.pop("data")
    return task_fields(queue, data, **values)


def task_key(item: object, what: str) -> list[str]:
    """The wire form of a task named as `model.task_key` reads it (a pair, a map, a handle, a leased task)."""
    return list(model.task_key(item, what))


def _keys(value: object, what: str) -> list[list[str]] | None:
    if value is None:
        return None
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Iterable):
        raise errors.BadRequest(f"{what} takes a list of tasks named by (queue, pid)")
    return [task_key(item, what) for item in value]


def is_single_lease(value: object) -> bool:
    """Whether renew / dequeue / release got one lease (not a batch of them)."""
    return isinstance(value, (LeasedTask, LeaseRef, Mapping)) or hasattr(value, "lease_id")


def lease_fields(item: object) -> dict[str, Any]:
    """The wire form of a lease ref given as a LeasedTask, a LeaseRef, a map or a lookalike."""
    if isinstance(item, Mapping):
        values = {name: item.get(name) for name in LEASE_FIELDS}
    else:
        values = {name: getattr(item, name, None) for name in LEASE_FIELDS}
    if any(value is None for value in values.values()):
        raise errors.BadRequest(
            f"a lease needs queue, pid and lease_id (pass what lease returned), got {type(item).__name__}"
        )
    return {
        "queue": _string(values["queue"], "queue"),
        "pid": _string(values["pid"], "pid"),
        "lease_id": _integer(values["lease_id"], "lease_id"),
    }


def _leases(value: object, what: str) -> list[object]:
    """One lease or an iterable of them, as a list."""
    if is_single_lease(value):
        return [value]
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise errors.BadRequest(f"{what} takes a leased task or a list of them, got {type(value).__name__}")
    return list(value)


def _advance_expiry(items: list[object], outcomes: list[ItemOutcome]) -> None:
    """Move the expiry of renewed LeasedTasks forward, matching outcomes by (queue, pid)."""
    renewed = {(o.queue, o.pid): o.expires_at for o in outcomes if o.ok and o.expires_at is not None}
    for item in items:
        if isinstance(item, LeasedTask):
            expires_at = renewed.get((item.queue, item.pid))
            if expires_at is not None:
                item.expires_at = expires_at


def _single_or_batch(single: bool, outcomes: list[ItemOutcome]) -> ItemOutcome | list[ItemOutcome]:
    if not single:
        return outcomes
    if len(outcomes) != 1:
        raise errors.InternalError(f"expected one outcome, the broker sent {len(outcomes)}")
    outcome = outcomes[0]
    if not outcome.ok:
        raise errors.error_for_code(outcome.code or "INTERNAL", outcome.message or "")
    return outcome


# -------------------------------------------------------------- operations


def ping() -> Call[Any]:
    return Call("ping", {}, _decode_any)


def cancel_wait(request_id: int) -> Call[Any]:
    """Withdraw a parked long-poll sent earlier on the same connection."""
    return Call("cancel_wait", {"request_id": request_id}, _decode_any)


def enqueue_many(tasks: Iterable[TaskLike]) -> Call[list[EnqueueOutcome]]:
    if isinstance(tasks, (str, bytes, Mapping)) or not isinstance(tasks, Iterable):
        raise errors.BadRequest("enqueue_many takes an iterable of tasks (maps or NewTask)")
    return Call("enqueue", {"tasks": [task_fields_of(task) for task in tasks]}, _decode_enqueued)


def enqueue(queue: str, data: bytes | str, **options: Any) -> Call[EnqueueOutcome]:
    fields = task_fields(queue, data, **options)

    def decode(raw: bytes) -> EnqueueOutcome:
        outcomes = _decode_enqueued(raw)
        if len(outcomes) != 1:
            raise errors.InternalError(f"expected one enqueue outcome, the broker sent {len(outcomes)}")
        return outcomes[0]

    return Call("enqueue", {"tasks": [fields]}, decode)


def lease(
    queues: str | Iterable[str],
    *,
    max_tasks: int = 1,
    lease_secs: float = DEFAULT_LEASE_SECS,
    max_pid: str | None = None,
    receiver: str | None = None,
    wait_secs: float = 0.0,
    worker: str | None = None,
    rate_per_sec: float | None = None,
    rate_burst: float | None = None,
) -> Call[list[LeasedTask]]:
    wait = _number(wait_secs, "wait_secs")
    if wait < 0:
        raise errors.BadRequest("wait_secs must not be negative")
    fields: dict[str, Any] = {
        "queues": _names(queues, "queues"),
        "max_tasks": _integer(max_tasks, "max_tasks"),
        "lease_secs": _number(lease_secs, "lease_secs"),
        "wait_secs": wait,
    }
    optional = {
        "max_pid": _optional_string(max_pid, "max_pid"),
        "receiver": _optional_string(receiver, "receiver"),
        "worker": _optional_string(worker, "worker"),
        "rate_per_sec": None if rate_per_sec is None else _number(rate_per_sec, "rate_per_sec"),
        "rate_burst": None if rate_burst is None else _number(rate_burst, "rate_burst"),
    }
    fields.update((key, value) for key, value in optional.items() if value is not None)
    return Call("lease", fields, _decode_leased, wait_secs=wait)


def renew(
    tasks: object, lease_secs: float = DEFAULT_LEASE_SECS, progress: float | None = None, note: str | None = None
) -> Call[Any]:
    single = is_single_lease(tasks)
    items = _leases(tasks, "renew")
    fields: dict[str, Any] = {
        "leases": [lease_fields(item) for item in items],
        "lease_secs": _number(lease_secs, "lease_secs"),
    }
    if progress is not None:
        fields["progress"] = _number(progress, "progress")
    if note is not None:
        fields["note"] = _string(note, "note")

    def decode(raw: bytes) -> ItemOutcome | list[ItemOutcome]:
        outcomes = _decode_items(raw)
        _advance_expiry(items, outcomes)
        return _single_or_batch(single, outcomes)

    return Call("renew", fields, decode)


def dequeue(tasks: object) -> Call[Any]:
    single = is_single_lease(tasks)
    fields = {"leases": [lease_fields(item) for item in _leases(tasks, "dequeue")]}
    return Call("dequeue", fields, lambda raw: _single_or_batch(single, _decode_items(raw)))


def release(tasks: object, reason: str | None = None, bury: bool = False) -> Call[Any]:
    single = is_single_lease(tasks)
    fields: dict[str, Any] = {"leases": [lease_fields(item) for item in _leases(tasks, "release")]}
    if reason is not None:
        fields["reason"] = _string(reason, "reason")
    if bury:
        fields["bury"] = True
    return Call("release", fields, lambda raw: _single_or_batch(single, _decode_items(raw)))


def cancel(tasks: object, reason: str | None = None) -> Call[Any]:
    """Withdraw tasks named by (queue, pid) — or handles/leased tasks — into their dead-letter queues."""
    single = not isinstance(tasks, (list, tuple, set)) or (
        isinstance(tasks, tuple) and len(tasks) == 2 and all(isinstance(part, str) for part in tasks)
    )
    keys = _keys([tasks] if single else tasks, "cancel")
    fields: dict[str, Any] = {"tasks": keys}
    if reason is not None:
        fields["reason"] = _string(reason, "reason")
    return Call("cancel", fields, lambda raw: _single_or_batch(single, _decode_items(raw)))


def update(
    *,
    enqueue: Iterable[TaskLike] = (),
    dequeue: object = (),
    renew: object = (),
    release: object = (),
    lease_secs: float = DEFAULT_LEASE_SECS,
    reason: str | None = None,
) -> Call[UpdateResult]:
    if isinstance(enqueue, Mapping) or not isinstance(enqueue, Iterable):
        raise errors.BadRequest("update(enqueue=...) takes an iterable of tasks")
    renewing = _leases(renew, "update(renew=...)")
    fields: dict[str, Any] = {
        "enqueue": [task_fields_of(task) for task in enqueue],
        "dequeue": [lease_fields(item) for item in _leases(dequeue, "update(dequeue=...)")],
        "renew": [lease_fields(item) for item in renewing],
        "release": [lease_fields(item) for item in _leases(release, "update(release=...)")],
        "lease_secs": _number(lease_secs, "lease_secs"),
    }
    if reason is not None:
        fields["reason"] = _string(reason, "reason")

    def decode(raw: bytes) -> UpdateResult:
        result = _decode_update(raw)
        _advance_expiry(renewing, result.renewed)
        return result

    return Call("update", fields, decode)


def peek(queue: str, n: int = 10, from_pid: str | None = None) -> Call[list[TaskView]]:
    fields: dict[str, Any] = {"queue": _string(queue, "queue"), "n": _integer(n, "n")}
    if from_pid is not None:
        fields["from_pid"] = _string(from_pid, "from_pid")
    return Call("peek", fields, _decode_views)


def get(queue: str, pid: str) -> Call[TaskView]:
    return Call("get", {"queue": _string(queue, "queue"), "pid": _string(pid, "pid")}, _decode_view)


def find_by_sender(sender: str, queue: str | None = None, limit: int = 100) -> Call[list[TaskView]]:
    fields: dict[str, Any] = {"sender": _string(sender, "sender"), "limit": _integer(limit, "limit")}
    if queue is not None:
        fields["queue"] = _string(queue, "queue")
    return Call("find_by_sender", fields, _decode_views)


def queues_for_receiver(receiver: str) -> Call[list[str]]:
    return Call("queues_for_receiver", {"receiver": _string(receiver, "receiver")}, _decode_names)


def list_queues(pattern: str | None = None, min_tasks: int = 0, limit: int = 1000) -> Call[list[QueueInfo]]:
    fields: dict[str, Any] = {"min_tasks": _integer(min_tasks, "min_tasks"), "limit": _integer(limit, "limit")}
    if pattern is not None:
        fields["pattern"] = _string(pattern, "pattern")
    return Call("list_queues", fields, _decode_queue_infos)


def delete_queue(queue: str) -> Call[int]:
    return Call("delete_queue", {"queue": _string(queue, "queue")}, _decode_int)


def dead_letters(op: str, queue: str, pids: Iterable[str] | None, after_pid: str | None, limit: int) -> Call[DeadLetterPage]:
    """`requeue_dead` or `purge_dead`: the named dead letters, or a page of them after a cursor."""
    fields: dict[str, Any] = {"queue": _string(queue, "queue"), "limit": _integer(limit, "limit")}
    if pids is not None:
        fields["pids"] = _names(pids, "pids")
    if after_pid is not None:
        fields["after_pid"] = _string(after_pid, "after_pid")
    return Call(op, fields, _decode_dead_page)


def stats(
    queues: str | Iterable[str] | None = None,
    pattern: str | None = None,
    sample: int = DEFAULT_STATS_SAMPLE,
) -> Call[list[QueueStats]]:
    fields: dict[str, Any] = {"sample": _integer(sample, "sample")}
    if queues is not None:
        fields["queues"] = _names(queues, "queues")
    if pattern is not None:
        fields["pattern"] = _string(pattern, "pattern")
    return Call("stats", fields, _decode_stats)

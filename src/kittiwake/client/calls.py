"""Every protocol operation as a client call: the op's request and how to read its reply.

Both clients (`Client`, blocking, and `AsyncClient`, asyncio) build their
requests here, so they accept the same arguments, check them the same way and
return the same types; they differ only in how bytes reach the broker.

Requests and results are the protocol's own declarations: a call's arguments
become the op's Struct of `kittiwake.protocol.messages` through
`msgspec.convert`, which checks every field against the very types the broker
decodes with and raises `BadRequest` before anything is sent; the reply's
result is decoded into its type of `kittiwake.protocol.replies`. The broker
remains the authority on limits and names and answers BAD_REQUEST for the rest.

What this module adds are the conveniences of a Python caller:

* task data given as a str is sent as UTF-8;
* a queue name where a list of names is expected is a list of one;
* a task to enqueue is a `model.NewTask` (or any object with its
  attributes) or a map with the same keys;
* a task named by (queue, pid) is a pair, a map, or anything with `.queue`
  and `.pid` (a handle, a leased task);
* single item or batch (renew, dequeue, release, cancel): one task-like
  argument (a `LeasedTask`, a `model.LeaseRef` or a mapping with queue, pid
  and lease_id) is a single call: it returns that item's `ItemOutcome` or
  raises the `kittiwake.errors` error the broker gave for it. Any other
  iterable is a batch: it returns one outcome per item, in order, and never
  raises for an item's failure (only for a failure of the whole request);
* a successful renew moves `expires_at` of the `LeasedTask` objects it was
  given forward.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Callable, Generic, TypeVar, Union

import msgspec

from kittiwake import errors, model
from kittiwake.model import LeaseRef, NewTask
from kittiwake.protocol import messages as m
from kittiwake.protocol import replies
from kittiwake.constants import DEFAULT_LEASE_SECS
from kittiwake.protocol.messages import DEFAULT_STATS_SAMPLE
from kittiwake.protocol.replies import EnqueueOutcome, ItemOutcome, LeasedTask, result_decoder

T = TypeVar("T")

# Anything that names a lease: what lease returned, a model.LeaseRef, or a map.
LeaseLike = Union[LeasedTask, LeaseRef, Mapping[str, Any]]
# Anything that describes a task to enqueue: a model.NewTask (or any object
# with the same attributes), or a map with the same keys.
TaskLike = Union[NewTask, Mapping[str, Any]]

TASK_FIELDS: tuple[str, ...] = m.TaskIn.__struct_fields__


@dataclass(frozen=True, slots=True)
class Call(Generic[T]):
    """One request ready to send, and how to read its result."""

    request: m.Request  # its `id` is set as it is sent
    decode: Callable[[Any], T]  # the reply's raw `result` (msgpack bytes or a msgspec.Raw) to the result
    wait_secs: float = 0.0  # a long-poll: the broker may hold the reply this long

    @property
    def op(self) -> str:
        return self.request.op


def request(op: str, fields: dict[str, Any]) -> Any:
    """The request Struct of `op` with these fields, every one type-checked; BadRequest if one is off."""
    fields["id"] = 0
    fields["op"] = op
    try:
        return msgspec.convert(fields, m.REQUEST_TYPES[op])
    except msgspec.ValidationError as exc:
        raise errors.BadRequest(f"{op}: {exc}") from None


_decode_enqueued: Callable[[Any], list[EnqueueOutcome]] = result_decoder("enqueue")
_decode_leased: Callable[[Any], list[LeasedTask]] = result_decoder("lease")
_decode_items: Callable[[Any], list[ItemOutcome]] = result_decoder("dequeue")


# ------------------------------------------------------------- conveniences


def _data(value: object) -> bytes:
    """Task data is bytes; a str is accepted as a convenience and sent as UTF-8."""
    if isinstance(value, bytes):
        return value
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, str):
        return value.encode("utf-8")
    # said here, not by the schema: data of another type is the likeliest mistake (an object not serialized)
    raise errors.BadRequest(f"data must be bytes or str, got {type(value).__name__}")


def _headers(value: object) -> object:
    return dict(value) if isinstance(value, Mapping) and not isinstance(value, dict) else value


def _names(value: object, what: str) -> object:
    """A queue name or a list of them."""
    if isinstance(value, str):
        return [value]
    if not isinstance(value, Iterable) or isinstance(value, (bytes, Mapping)):
        raise errors.BadRequest(f"{what} must be a name or a list of names")
    return list(value)


def task_key(item: object, what: str) -> tuple[str, str]:
    """A task named by (queue, pid): a pair, a map, or anything with .queue and .pid (`model.task_key`)."""
    return model.task_key(item, what)


def _keys(value: object, what: str) -> list[tuple[object, object]] | None:
    if value is None:
        return None
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Iterable):
        raise errors.BadRequest(f"{what} takes a list of tasks named by (queue, pid)")
    return [task_key(item, what) for item in value]


def task_fields(queue: object, data: object, **options: Any) -> dict[str, Any]:
    """The fields of one task to enqueue (the keywords are those of `messages.TaskIn`), conveniences applied."""
    return _task_conveniences({"queue": queue, "data": data, **options})


def task_fields_of(task: object) -> dict[str, Any]:
    """The fields of a task given as a map or as an object with NewTask's attributes."""
    if isinstance(task, Mapping):
        return _task_conveniences(dict(task))
    return _task_conveniences({name: getattr(task, name, None) for name in TASK_FIELDS})


def _task_conveniences(fields: dict[str, Any]) -> dict[str, Any]:
    if fields.get("data") is not None:
        fields["data"] = _data(fields["data"])
    if fields.get("headers") is not None:
        fields["headers"] = _headers(fields["headers"])
    for name in ("after", "unless"):
        if fields.get(name) is not None:
            fields[name] = _keys(fields[name], name)
    return fields


def is_single_lease(value: object) -> bool:
    """Whether renew / dequeue / release got one lease (not a batch of them)."""
    return isinstance(value, (LeasedTask, LeaseRef, Mapping)) or hasattr(value, "lease_id")


def lease_fields(item: object) -> dict[str, Any]:
    """The fields of a lease ref (`messages.LeaseRefIn`) given as a LeasedTask, a LeaseRef, a map or a lookalike."""
    if isinstance(item, (LeasedTask, LeaseRef)):  # what lease returned: no ABC check (a batch runs this per task)
        return {"queue": item.queue, "pid": item.pid, "lease_id": item.lease_id}
    if isinstance(item, Mapping):
        fields = {"queue": item.get("queue"), "pid": item.get("pid"), "lease_id": item.get("lease_id")}
    else:
        fields = {
            "queue": getattr(item, "queue", None),
            "pid": getattr(item, "pid", None),
            "lease_id": getattr(item, "lease_id", None),
        }
    if fields["queue"] is None or fields["pid"] is None or fields["lease_id"] is None:
        raise errors.BadRequest(
            f"a lease needs queue, pid and lease_id (pass what lease returned), got {type(item).__name__}"
        )
    return fields


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


def _decode_single_or_batch(single: bool) -> Callable[[Any], Any]:
    return lambda raw: _single_or_batch(single, _decode_items(raw))


# -------------------------------------------------------------- operations


def ping() -> Call[dict[str, Any]]:
    """The broker's answer as a map (`now`: its clock)."""
    decode = result_decoder("ping")
    return Call(request("ping", {}), lambda raw: msgspec.structs.asdict(decode(raw)))


def auth(user: str, token: str) -> Call[Any]:
    """Credentials: the first request on a connection to a broker run with an auth file."""
    return Call(request("auth", {"user": user, "token": token}), result_decoder("auth"))


def cancel_wait(request_id: int) -> Call[Any]:
    """Withdraw a parked long-poll sent earlier on the same connection."""
    return Call(request("cancel_wait", {"request_id": request_id}), result_decoder("cancel_wait"))


def enqueue_many(tasks: Iterable[TaskLike]) -> Call[list[EnqueueOutcome]]:
    if isinstance(tasks, (str, bytes, Mapping)) or not isinstance(tasks, Iterable):
        raise errors.BadRequest("enqueue_many takes an iterable of tasks (maps or NewTask)")
    return Call(request("enqueue", {"tasks": [task_fields_of(task) for task in tasks]}), _decode_enqueued)


def _decode_one_enqueued(raw: Any) -> EnqueueOutcome:
    outcomes = _decode_enqueued(raw)
    if len(outcomes) != 1:
        raise errors.InternalError(f"expected one enqueue outcome, the broker sent {len(outcomes)}")
    return outcomes[0]


def enqueue(queue: str, data: bytes | str, **options: Any) -> Call[EnqueueOutcome]:
    return Call(request("enqueue", {"tasks": [task_fields(queue, data, **options)]}), _decode_one_enqueued)


def lease(queues: str | Iterable[str], **options: Any) -> Call[list[LeasedTask]]:
    """A lease of `queues`; the keywords are the fields of `messages.Lease`."""
    made: m.Lease = request("lease", {"queues": _names(queues, "queues"), **options})
    if made.wait_secs < 0:
        raise errors.BadRequest("wait_secs must not be negative")
    return Call(made, _decode_leased, wait_secs=made.wait_secs)


def renew(
    tasks: object, lease_secs: float = DEFAULT_LEASE_SECS, progress: float | None = None, note: str | None = None
) -> Call[Any]:
    single = is_single_lease(tasks)
    items = _leases(tasks, "renew")
    fields = {
        "leases": [lease_fields(item) for item in items], "lease_secs": lease_secs, "progress": progress, "note": note,
    }

    def decode(raw: Any) -> ItemOutcome | list[ItemOutcome]:
        outcomes = _decode_items(raw)
        _advance_expiry(items, outcomes)
        return _single_or_batch(single, outcomes)

    return Call(request("renew", fields), decode)


def dequeue(tasks: object) -> Call[Any]:
    fields = {"leases": [lease_fields(item) for item in _leases(tasks, "dequeue")]}
    return Call(request("dequeue", fields), _decode_single_or_batch(is_single_lease(tasks)))


def release(tasks: object, reason: str | None = None, bury: bool = False, reject: bool = False) -> Call[Any]:
    fields = {
        "leases": [lease_fields(item) for item in _leases(tasks, "release")],
        "reason": reason,
        "bury": bury,
        "reject": reject,
    }
    return Call(request("release", fields), _decode_single_or_batch(is_single_lease(tasks)))


def cancel(tasks: object, reason: str | None = None) -> Call[Any]:
    """Withdraw tasks named by (queue, pid) — or handles/leased tasks — into their dead-letter queues."""
    single = not isinstance(tasks, (list, tuple, set)) or (
        isinstance(tasks, tuple) and len(tasks) == 2 and all(isinstance(part, str) for part in tasks)
    )
    fields = {"tasks": _keys([tasks] if single else tasks, "cancel"), "reason": reason}
    return Call(request("cancel", fields), _decode_single_or_batch(single))


def update(
    *,
    enqueue: Iterable[TaskLike] = (),
    dequeue: object = (),
    renew: object = (),
    release: object = (),
    lease_secs: float = DEFAULT_LEASE_SECS,
    reason: str | None = None,
) -> Call[replies.UpdateResult]:
    if isinstance(enqueue, Mapping) or not isinstance(enqueue, Iterable):
        raise errors.BadRequest("update(enqueue=...) takes an iterable of tasks")
    renewing = _leases(renew, "update(renew=...)")
    fields = {
        "enqueue": [task_fields_of(task) for task in enqueue],
        "dequeue": [lease_fields(item) for item in _leases(dequeue, "update(dequeue=...)")],
        "renew": [lease_fields(item) for item in renewing],
        "release": [lease_fields(item) for item in _leases(release, "update(release=...)")],
        "lease_secs": lease_secs,
        "reason": reason,
    }
    decode_result = result_decoder("update")

    def decode(raw: Any) -> replies.UpdateResult:
        result: replies.UpdateResult = decode_result(raw)
        _advance_expiry(renewing, result.renewed)
        return result

    return Call(request("update", fields), decode)


def peek(queue: str, n: int = 10, from_pid: str | None = None) -> Call[list[replies.TaskView]]:
    return Call(request("peek", {"queue": queue, "n": n, "from_pid": from_pid}), result_decoder("peek"))


def get(queue: str, pid: str) -> Call[replies.TaskView]:
    return Call(request("get", {"queue": queue, "pid": pid}), result_decoder("get"))


def find_by_sender(sender: str, queue: str | None = None, limit: int = 100) -> Call[list[replies.TaskView]]:
    fields = {"sender": sender, "queue": queue, "limit": limit}
    return Call(request("find_by_sender", fields), result_decoder("find_by_sender"))


def queues_for_receiver(receiver: str) -> Call[list[str]]:
    return Call(request("queues_for_receiver", {"receiver": receiver}), result_decoder("queues_for_receiver"))


def list_queues(
    pattern: str | None = None, min_tasks: int = 0, limit: int = 1000, start_after: str | None = None
) -> Call[list[replies.QueueInfo]]:
    fields = {"pattern": pattern, "min_tasks": min_tasks, "limit": limit, "start_after": start_after}
    return Call(request("list_queues", fields), result_decoder("list_queues"))


def delete_queue(queue: str) -> Call[int]:
    return Call(request("delete_queue", {"queue": queue}), result_decoder("delete_queue"))


def dead_letters(
    op: str, queue: str, pids: Iterable[str] | None, after_pid: str | None, limit: int
) -> Call[replies.DeadLetterPage]:
    """`requeue_dead` or `purge_dead`: the named dead letters, or a page of them after a cursor."""
    fields = {
        "queue": queue,
        "pids": None if pids is None else _names(pids, "pids"),
        "after_pid": after_pid,
        "limit": limit,
    }
    return Call(request(op, fields), result_decoder(op))


def stats(
    queues: str | Iterable[str] | None = None,
    pattern: str | None = None,
    sample: int = DEFAULT_STATS_SAMPLE,
) -> Call[list[replies.QueueStats]]:
    fields = {"queues": None if queues is None else _names(queues, "queues"), "pattern": pattern, "sample": sample}
    return Call(request("stats", fields), result_decoder("stats"))


def declare_join(
    name: str,
    job_queue: str,
    required: Mapping[str, str],
    optional: Mapping[str, str],
    sequence: Mapping[str, str],
    max_attempts: int | None,
) -> Call[str]:
    """A join's ports given as three maps of port name -> queue, one per mode."""
    ports: list[dict[str, str]] = []
    for mode, given in (("required", required), ("optional", optional), ("sequence", sequence)):
        if not isinstance(given, Mapping):
            raise errors.BadRequest(f"declare_join: {mode} must map port names to queues")
        ports.extend({"name": port, "queue": queue, "mode": mode} for port, queue in given.items())
    spec = {"name": name, "job_queue": job_queue, "ports": ports, "max_attempts": max_attempts}
    return Call(request("declare_join", {"join": spec}), result_decoder("declare_join"))


def drop_join(name: str) -> Call[bool]:
    return Call(request("drop_join", {"name": name}), result_decoder("drop_join"))


def purge_join(name: str, key: str, limit: int) -> Call[int]:
    return Call(request("purge_join", {"name": name, "key": key, "limit": limit}), result_decoder("purge_join"))


def list_joins(pattern: str | None = None) -> Call[list[replies.JoinInfo]]:
    return Call(request("list_joins", {"pattern": pattern}), result_decoder("list_joins"))

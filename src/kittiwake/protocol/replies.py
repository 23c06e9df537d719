"""Reply messages of the binary protocol: the envelope, and the result of every op.

A reply body is a msgpack map `{"id", "ok": true, "result"}` or
`{"id", "ok": false, "error": {"code", "message"}}`; `id` is the request's.
A lease's reply may add `"too_large": n`: n tasks were passed over because
alone they would not fit the request's `max_reply_bytes` (a UDP datagram);
they stay available for a lease over TCP.
One envelope is declared, `ReplyEnvelope`, read two ways: a client reads the
`result` as raw msgpack (`decode_envelope`), routes the reply to its waiting
call by id, and that call decodes the result straight into its typed records
(one pass, no intermediate dicts); tools and tests read everything at once
(`decode_reply`).

`REPLY_TYPES` names the result of every op of `messages.REQUEST_TYPES`. Both
ends use these declarations: the broker (`broker/dispatch.py`) builds each
result from the engine's, and the client decodes into the same types.

* The engine's result records `EnqueueOutcome`, `ItemOutcome`, `QueueInfo`,
  `QueueStats` and `LeaseSample` (`kittiwake.model`) are declared once, there:
  they go on the wire as the engine returns them and come back as themselves.
* A lease's reply is the engine's `Task` records as they are (the hottest
  reply: a struct copy per task would double the cost of encoding it).
  `LeasedTask` is how a lease holder reads them: the expiry is named
  `expires_at` (the wire's `lease_expires_at`) and the lease owner `worker`;
  a successful renew moves `expires_at` forward in place so a worker always
  holds the current expiry. Its wire names are all fields of `Task` (a test
  pins it).

Unknown fields in a reply are ignored, so a newer broker can add fields
without breaking older clients.
"""

from __future__ import annotations

from typing import Any, Callable, Generic, TypeVar

import msgspec

from kittiwake.errors import KittiwakeError, WrongShard, error_for_code
from kittiwake.model import LeaseRef

# the engine's result records, which the protocol carries as they are: exported from here too
from kittiwake.model import EnqueueOutcome as EnqueueOutcome
from kittiwake.model import ItemOutcome as ItemOutcome
from kittiwake.model import LeaseSample as LeaseSample
from kittiwake.model import QueueInfo as QueueInfo
from kittiwake.model import QueueStats as QueueStats

T = TypeVar("T")

# ------------------------------------------------------------------ results


class Pong(msgspec.Struct):
    """ping: the broker's clock, epoch seconds."""

    now: float


class AuthResult(msgspec.Struct):
    """auth: the user the connection acts as; None from a broker run without an auth file."""

    user: str | None


class CancelWaitResult(msgspec.Struct):
    """cancel_wait: whether a parked long-poll was found (it was then answered with no tasks)."""

    cancelled: bool


class LeasedTask(msgspec.Struct, kw_only=True):
    """A task held under a lease; `lease_id` is the fencing token to show when finishing it."""

    queue: str
    pid: str
    data: bytes
    lease_id: int
    expires_at: float | None = msgspec.field(default=None, name="lease_expires_at")
    attempts: int = 0  # failed attempts so far: releases and expired leases
    deliveries: int = 0  # times leased, this lease included
    enqueued_at: float = 0.0
    sender: str | None = None
    receiver: str | None = None
    headers: dict[str, str] | None = None
    max_attempts: int | None = None
    leased_at: float | None = None
    worker: str | None = msgspec.field(default=None, name="lease_owner")

    def lease_ref(self) -> LeaseRef:
        """The (queue, pid, lease id) triple that names this lease."""
        return LeaseRef(self.queue, self.pid, self.lease_id)


class TaskView(msgspec.Struct, kw_only=True):
    """A task as peek, get and find_by_sender show it; `state` is "available", "leased" or "blocked"."""

    queue: str
    pid: str
    data: bytes
    state: str
    enqueued_at: float
    sender: str | None = None
    receiver: str | None = None
    headers: dict[str, str] | None = None
    attempts: int = 0
    deliveries: int = 0
    lease_owner: str | None = None
    lease_expires_at: float | None = None
    waiting_on: int = 0  # unfinished parents; state is "blocked" while above 0
    children: int = 0
    progress: float | None = None
    note: str | None = None


class UpdateResult(msgspec.Struct, kw_only=True):
    """What one atomic update did, item by item (every item succeeded, or the update raised)."""

    enqueued: list[EnqueueOutcome] = []
    dequeued: list[ItemOutcome] = []
    renewed: list[ItemOutcome] = []
    released: list[ItemOutcome] = []


class DeadLetterPage(msgspec.Struct, kw_only=True):
    """What `requeue_dead` / `purge_dead` did to each dead letter; `next_pid` is the cursor
    of the next page, by pids or over the whole dead-letter queue (None: done)."""

    outcomes: list[ItemOutcome] = []
    next_pid: str | None = None


class JoinInfo(msgspec.Struct, kw_only=True):
    """One join as list_joins shows it: ports are (port, queue, mode) triples."""

    name: str
    job_queue: str
    ports: list[tuple[str, str, str]]
    max_attempts: int | None = None
    tokens_waiting: int = 0  # tasks in its port queues


class ClusterNode(msgspec.Struct, array_like=True):
    """One node of a cluster map: its name and `host:port`."""

    name: str
    address: str


class ClusterMapResult(msgspec.Struct, kw_only=True):
    """cluster_map: the map the answering node serves. `node` is its own name; a broker that is
    no node of a cluster answers `node=None` and no nodes. `tls`: the addresses are TLS ports."""

    node: str | None = None
    epoch: str = ""
    slots: int = 0
    nodes: list[ClusterNode] = []
    tls: bool = False


class HoldersResult(msgspec.Struct, kw_only=True):
    """holders: for each queue asked about, the nodes known to hold available tasks of it
    (the answering node first when it holds some), and the map's epoch."""

    epoch: str = ""
    holders: dict[str, list[str]] = {}


class AnnounceResult(msgspec.Struct, kw_only=True):
    """announce: the receiving node's name."""

    node: str


ITEM_OUTCOMES = list[ItemOutcome]
TASK_VIEWS = list[TaskView]

REPLY_TYPES: dict[str, Any] = {
    "ping": Pong,
    "enqueue": list[EnqueueOutcome],
    "lease": list[LeasedTask],
    "renew": ITEM_OUTCOMES,
    "dequeue": ITEM_OUTCOMES,
    "release": ITEM_OUTCOMES,
    "update": UpdateResult,
    "peek": TASK_VIEWS,
    "get": TaskView,
    "find_by_sender": TASK_VIEWS,
    "queues_for_receiver": list[str],
    "list_queues": list[QueueInfo],
    "delete_queue": int,  # tasks the queue held
    "stats": list[QueueStats],
    "cancel_wait": CancelWaitResult,
    "cancel": ITEM_OUTCOMES,
    "requeue_dead": DeadLetterPage,
    "declare_join": str,  # "created", "unchanged" or "replaced"
    "drop_join": bool,
    "purge_join": int,  # tokens deleted
    "list_joins": list[JoinInfo],
    "purge_dead": DeadLetterPage,
    "auth": AuthResult,
    "cluster_map": ClusterMapResult,
    "holders": HoldersResult,
    "announce": AnnounceResult,
}

_result_decoders = {op: msgspec.msgpack.Decoder(kind) for op, kind in REPLY_TYPES.items()}


def result_decoder(op: str) -> Callable[[Any], Any]:
    """Decodes the raw `result` of a reply to `op` (bytes, or a `msgspec.Raw`) into its type."""
    return _result_decoders[op].decode


# ----------------------------------------------------------------- envelope


class ReplyEnvelope(msgspec.Struct, Generic[T]):
    """A reply; `error` is `{"code", "message"}` (`KittiwakeError.to_wire`)."""

    id: int
    ok: bool
    result: T = None  # type: ignore[assignment]  # absent from error replies
    error: dict[str, str] | None = None
    too_large: int = 0  # lease: tasks passed over as too large for `max_reply_bytes` (absent when 0)


Reply = ReplyEnvelope[Any]

_encoder = msgspec.msgpack.Encoder()
_raw_envelope_decoder = msgspec.msgpack.Decoder(ReplyEnvelope[msgspec.Raw])
_reply_decoder = msgspec.msgpack.Decoder(Reply)


def encode_ok(request_id: int, result: Any, *, too_large: int = 0) -> bytes:
    if too_large:
        return _encoder.encode({"id": request_id, "ok": True, "result": result, "too_large": too_large})
    return _encoder.encode({"id": request_id, "ok": True, "result": result})


def encode_error(request_id: int, error: KittiwakeError, *, message: str | None = None) -> bytes:
    """An error reply; `message` in place of the error's own (a shorter one, to fit a datagram)."""
    wire = error.to_wire()
    if message is not None:
        wire["message"] = message
    return _encoder.encode({"id": request_id, "ok": False, "error": wire})


def decode_envelope(body: bytes) -> ReplyEnvelope[msgspec.Raw]:
    """A reply with its `result` left as raw msgpack, for the caller to decode by op;
    raises `msgspec.DecodeError` for a body that is not a reply."""
    return _raw_envelope_decoder.decode(body)


def decode_reply(body: bytes) -> Reply:
    """A reply with its `result` decoded as plain msgpack values (maps, lists, …)."""
    return _reply_decoder.decode(body)


def error_of(reply: ReplyEnvelope[Any]) -> KittiwakeError:
    """The `kittiwake.errors` error an error reply carries."""
    body = reply.error
    if body is None:
        return error_for_code("INTERNAL", "error reply without an error")
    error = error_for_code(body.get("code", "INTERNAL"), body.get("message", ""))
    if isinstance(error, WrongShard):
        error.epoch = body.get("epoch", "")
    return error

"""Request messages of the binary protocol, as msgspec Structs; replies are in `replies`.

A request body is a msgpack map with an integer `id` (chosen by the client,
echoed in the reply so requests can be pipelined on one connection), an `op`
string and the op's fields. Both ends use these declarations: the client
builds each request as its Struct (`kittiwake.client.calls`) and `encode`s
it; the broker decodes it back into the same Struct.

Decoding is two-step: the cheap `Envelope` gives `id` and `op` even when the
rest is wrong, so a malformed request still gets an error reply carrying its
id; then the op's own Struct type-checks every field. A task to enqueue
(`TaskIn`) and a lease handed back (`LeaseRefIn`) are the engine's own
records, `model.NewTask` and `model.LeaseRef`, so the broker hands the engine
what it decoded.

Encoding leaves out a field left at its default (msgspec's `omit_defaults`:
None, False, an empty list, or the declared default itself). The broker fills
in the same default, so a request that names such a field means the same:
older clients spelled out some defaults, and tools may.

Every op here has a batched form; single-item calls are batches of one.
"""

from __future__ import annotations

from typing import Any

import msgspec

from kittiwake.constants import DEFAULT_LEASE_SECS
from kittiwake.errors import BadRequest, KittiwakeError, MalformedFrame, UnknownOperation
from kittiwake.join_spec import JoinSpec
from kittiwake.model import LeaseRef, NewTask

DEFAULT_STATS_SAMPLE = 10


class Envelope(msgspec.Struct):
    id: int
    op: str


TaskIn = NewTask
LeaseRefIn = LeaseRef


class Request(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    id: int
    op: str


class Ping(Request):
    pass


class Enqueue(Request):
    tasks: list[TaskIn]


class Lease(Request):
    queues: list[str]
    max_tasks: int = 1
    lease_secs: float = DEFAULT_LEASE_SECS
    max_pid: str | None = None
    receiver: str | None = None
    wait_secs: float = 0.0
    worker: str | None = None
    rate_per_sec: float | None = None
    rate_burst: float | None = None
    max_reply_bytes: int | None = None  # lease no more than fits in a reply of this size; see the reply's too_large


class Renew(Request):
    leases: list[LeaseRefIn]
    lease_secs: float = DEFAULT_LEASE_SECS
    progress: float | None = None
    note: str | None = None


class Dequeue(Request):
    leases: list[LeaseRefIn]


class Release(Request):
    leases: list[LeaseRefIn]
    reason: str | None = None
    bury: bool = False
    reject: bool = False  # hand back without counting an attempt


class Cancel(Request):
    tasks: list[tuple[str, str]]
    reason: str | None = None


class Update(Request):
    enqueue: list[TaskIn] = []
    dequeue: list[LeaseRefIn] = []
    renew: list[LeaseRefIn] = []
    release: list[LeaseRefIn] = []
    lease_secs: float = DEFAULT_LEASE_SECS
    reason: str | None = None


class Peek(Request):
    queue: str
    n: int = 10
    from_pid: str | None = None


class Get(Request):
    queue: str
    pid: str


class FindBySender(Request):
    sender: str
    queue: str | None = None
    limit: int = 100


class QueuesForReceiver(Request):
    receiver: str


class ListQueues(Request):
    """Queues in name order holding at least max(1, `min_tasks`) tasks, whose name matches the
    regex `pattern`, up to `limit`; with `start_after`, only those whose name sorts after it (a
    queue name, which need not exist): the last name of one page starts the next."""

    pattern: str | None = None
    min_tasks: int = 0
    limit: int = 1000
    start_after: str | None = None


class DeleteQueue(Request):
    queue: str


class RequeueDead(Request):
    """Move dead letters of `queue` back: those `pids` name (dead-letter or original pids), or
    all of them when `pids` is absent; one request reaches them in pid order after the cursor
    `after_pid`, reading at most `limit` (one that cannot go back as stored stays: BAD_DEAD_LETTER), and its reply's
    `next_pid` is the cursor of the next when more are left."""

    queue: str
    pids: list[str] | None = None
    after_pid: str | None = None
    limit: int = 1000


class PurgeDead(Request):
    """Delete dead letters of `queue`, chosen as for `requeue_dead`."""

    queue: str
    pids: list[str] | None = None
    after_pid: str | None = None
    limit: int = 1000


class CancelWait(Request):
    """Withdraw this connection's parked long-poll `request_id`: it is answered
    with an empty list at once, so no task is leased to a reply nobody reads."""

    request_id: int


class Auth(Request):
    """Credentials: the first request on a connection to a broker run with an
    auth file (anything else first closes it with UNAUTHORIZED). Answered with
    `{"user"}`; a broker without an auth file answers `{"user": None}`."""

    user: str
    token: str


class DeclareJoin(Request):
    """Keep a join (`kittiwake.join_spec`): answered "created", "unchanged" or "replaced"."""

    join: JoinSpec


class DropJoin(Request):
    """Forget a join; its tokens stay in their queues. Answered True if there was one."""

    name: str


class PurgeJoin(Request):
    """Delete up to `limit` tokens waiting in a join's ports whose key is `key` or below it."""

    name: str
    key: str
    limit: int = 10_000


class ListJoins(Request):
    pattern: str | None = None


class Stats(Request):
    queues: list[str] | None = None
    pattern: str | None = None
    sample: int = DEFAULT_STATS_SAMPLE


class ClusterMapRequest(Request):
    """The cluster map the node serves (`kittiwake.cluster`): any node of a cluster answers it, a
    broker that is no node answers with no nodes. Read-only; every connection may ask."""


class Holders(Request):
    """Which nodes hold available tasks of each of `queues`, as this node last heard (its own
    holdings as of its last commit, the others' from their announcements)."""

    queues: list[str]


class Announce(Request):
    """From one node of a cluster to another: the spread queues that came to hold available tasks
    (`holding`) and that ran out (`empty`) since the last announcement; `full` says `holding` is
    every such queue (forget the rest of what `instance`, the sending broker process, said).
    Refused unless both share the map `epoch`; with an auth file, only a user with the admin
    right may announce."""

    node: str
    epoch: str
    holding: list[str] = []
    empty: list[str] = []
    full: bool = False
    instance: str = ""


REQUEST_TYPES: dict[str, type[Request]] = {
    "ping": Ping,
    "enqueue": Enqueue,
    "lease": Lease,
    "renew": Renew,
    "dequeue": Dequeue,
    "release": Release,
    "update": Update,
    "peek": Peek,
    "get": Get,
    "find_by_sender": FindBySender,
    "queues_for_receiver": QueuesForReceiver,
    "list_queues": ListQueues,
    "delete_queue": DeleteQueue,
    "stats": Stats,
    "cancel_wait": CancelWait,
    "cancel": Cancel,
    "requeue_dead": RequeueDead,
    "purge_dead": PurgeDead,
    "auth": Auth,
    "declare_join": DeclareJoin,
    "drop_join": DropJoin,
    "purge_join": PurgeJoin,
    "list_joins": ListJoins,
    "cluster_map": ClusterMapRequest,
    "holders": Holders,
    "announce": Announce,
}

_envelope_decoder = msgspec.msgpack.Decoder(Envelope)
_decoders = {op: msgspec.msgpack.Decoder(kind) for op, kind in REQUEST_TYPES.items()}
_encoder = msgspec.msgpack.Encoder()


TOO_DEEP = "the request is nested too deeply"


class RequestError(Exception):
    """A request body that cannot be served; carries the id when it was readable."""

    def __init__(self, request_id: int, error: KittiwakeError) -> None:
        super().__init__(str(error))
        self.request_id = request_id
        self.error = error


def _plain_id(body: bytes) -> int:
    """The integer `id` of a map the envelope could not read (a key that is not a
    string, say), so its error reply still reaches the request; else 0."""
    try:
        value = msgspec.msgpack.decode(body)
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
        return 0
    request_id = value.get("id") if isinstance(value, dict) else None
    return request_id if type(request_id) is int else 0


def decode_request(body: bytes) -> Request:
    """Decode a request body or raise `RequestError` with the best id known."""
    try:
        envelope = _envelope_decoder.decode(body)
    except msgspec.DecodeError as exc:
        error = MalformedFrame(f"not a request map with integer id and op: {exc}")
        raise RequestError(_plain_id(body), error) from None
    except UnicodeDecodeError:
        # msgspec raises this, not DecodeError, for a str that is not UTF-8
        raise RequestError(0, MalformedFrame("op is not valid UTF-8")) from None
    except RecursionError:
        # and this for nesting deeper than the interpreter's recursion limit,
        # even inside a field the envelope only skips
        raise RequestError(0, MalformedFrame(TOO_DEEP)) from None
    decoder = _decoders.get(envelope.op)
    if decoder is None:
        raise RequestError(envelope.id, UnknownOperation(f"unknown op {envelope.op[:64]!r}"))
    try:
        return decoder.decode(body)
    except msgspec.ValidationError as exc:
        raise RequestError(envelope.id, BadRequest(str(exc))) from None
    except msgspec.DecodeError as exc:
        raise RequestError(envelope.id, MalformedFrame(str(exc))) from None
    except UnicodeDecodeError as exc:
        raise RequestError(envelope.id, BadRequest(f"a string field is not valid UTF-8: {exc.reason}")) from None
    except RecursionError:
        raise RequestError(envelope.id, MalformedFrame(TOO_DEEP)) from None


def encode(request: Request) -> bytes:
    """The body of a request Struct, as the client sends it."""
    return _encoder.encode(request)


def encode_request(op: str, request_id: int, fields: dict[str, Any]) -> bytes:
    """The body of a request given as a map: for tools and tests that send what they like,
    malformed requests included. Clients build the Struct and use `encode`."""
    body = {"id": request_id, "op": op}
    body.update(fields)
    return _encoder.encode(body)

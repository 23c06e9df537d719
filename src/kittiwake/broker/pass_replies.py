"""What a group-commit pass holds until its commit, and the words of the replies it makes itself.

A pass (`passes`) encodes each reply as soon as its request has run, then
holds it until the commit. Each held reply has a `ReplyKind` saying what it
becomes if the commit fails: a reply to a request of the pass turns into
`UNAVAILABLE`, a parked long-poll served in the pass stays parked, and a reply
that depends on no write is sent as it is. The engine's work of one try of
the pass is collected in an `Attempt`, applied only when the try finished.
A pass knows the connection a request came on only as a `Caller`.

The errors a pass answers with are worded here, once: a failed pass says
what failed and whether the change was not applied or its outcome is unknown.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Protocol, Sized

from kittiwake import errors
from kittiwake.broker.waiters import Waiter
from kittiwake.errors import StorageFault
from kittiwake.model import LeasedTasks, LeaseRequest
from kittiwake.protocol import encode_error, encode_frame, encode_ok

# How an UNAVAILABLE reply ends: the broker knows the change was not applied,
# or a commit failed in a way that leaves its outcome unknown.
NOT_APPLIED = "it was not applied"
OUTCOME_UNKNOWN = "it may or may not have been applied, as when a connection is lost"


class Caller(Protocol):
    """Whoever a request of a pass came from: a binary connection (`broker.connection.Connection`),
    a UDP datagram, a face's in-process call (`broker.local_calls`). The pass reads its state; the
    group commit hands it its replies (`deliver`) and what waits for its output to drain (`defer`)."""

    @property
    def peer(self) -> str | None: ...  # `host:port`, the lease's peer

    @property
    def closed(self) -> bool: ...  # no reply can be written any more

    @property
    def ended(self) -> bool: ...  # the client sent EOF: no lease may reach it by a wait

    @property
    def write_paused(self) -> bool: ...  # its output buffer is full

    @property
    def deferred(self) -> Sized: ...  # items held back until its output drains

    def deliver(self, frames: list[bytes]) -> None:
        """Write the reply frames of one pass, in order."""

    def defer(self, item: Any) -> None:
        """Hold back an item not run while the output is full (asked only when `write_paused`)."""


class ReplyKind(enum.Enum):
    """What a held reply becomes if the pass's commit fails."""

    FIXED = "fixed"  # depends on no write (a decode error, a bug, an expired long-poll): sent as is
    REQUEST = "request"  # answers a request of this pass: replaced by UNAVAILABLE
    WAITER = "waiter"  # a parked long-poll served in this pass: stays parked instead


@dataclass(slots=True)
class HeldReply:
    connection: Caller
    request_id: int
    frame: bytes
    kind: ReplyKind
    waiter: Waiter | None = None


@dataclass(slots=True)
class Park:
    """A long-poll lease of this pass that found nothing."""

    connection: Caller
    request_id: int
    lease: LeaseRequest
    deadline: float  # on the monotonic clock
    index: int  # of its request in the batch


@dataclass(slots=True)
class Attempt:
    """What one run of a pass's engine work would do; applied only once it finishes."""

    held: list[HeldReply] = field(default_factory=list)
    park: list[Park] = field(default_factory=list)
    defer: list[tuple[Caller, Any]] = field(default_factory=list)  # (connection, item) not run: output full
    cancelled: list[Waiter] = field(default_factory=list)  # long-polls withdrawn by cancel_wait
    parked_names: dict[Caller, int] = field(default_factory=dict)  # queue names of `park`, per connection
    taken: int = 0  # batch items dealt with; the rest goes back to pending
    writes: bool = False  # a request that may write ran (its commit proves the disk takes writes)


def error_frame(request_id: int, error: errors.KittiwakeError) -> bytes:
    return encode_frame(encode_error(request_id, error))


def ok_frame(request_id: int, result: Any, max_frame: int) -> bytes:
    """The reply frame of a result; FRAME_TOO_LARGE instead when the client could not read it. A
    lease's result says beside its list how many tasks it passed over as too large."""
    body = encode_ok(request_id, result, too_large=result.too_large if type(result) is LeasedTasks else 0)
    if len(body) > max_frame:
        # the client could not read it; better an error it can read
        return error_frame(
            request_id,
            errors.FrameTooLarge(f"the reply is {len(body)} bytes, over the max frame; ask for fewer items"),
        )
    return encode_frame(body)


def internal_error() -> errors.InternalError:
    return errors.InternalError("the broker hit a bug; the request had no effect")


def paused_error(fault: StorageFault | None) -> errors.Unavailable:
    """The reply to a write while an outage pauses writes (`store_health`)."""
    what = f" ({fault.value})" if fault is not None else ""
    return errors.Unavailable(f"the broker is not writing for a moment after a storage failure{what}; {NOT_APPLIED}")


def unavailable_error(fault: StorageFault | None, outcome_known: bool) -> errors.Unavailable:
    """The UNAVAILABLE reply of a failed pass: what failed, and whether the change may have been applied."""
    what = f" ({fault.value})" if fault is not None else ""
    if not outcome_known:
        return errors.Unavailable(f"the change could not be confirmed durable{what}; {OUTCOME_UNKNOWN}")
    return errors.Unavailable(f"the change could not be made durable{what}; {NOT_APPLIED}")


def by_connection(held: list[HeldReply]) -> dict[Caller, list[bytes]]:
    """Each connection's frames in the order they were made, for one write per connection."""
    frames_of: dict[Caller, list[bytes]] = {}
    for reply in held:
        frames = frames_of.get(reply.connection)
        if frames is None:
            frames_of[reply.connection] = [reply.frame]
        else:
            frames.append(reply.frame)
    return frames_of

"""What every SQS action shares: who asks (`Context`), the rights an action needs (`require`),
and the base of both kinds of actions (`ActionBase`: the broker's calls, the queue registry,
the queue a request names).

The actions themselves are `queue_actions` (create, list, delete, purge,
attributes) and `message_actions` (send, receive, delete, visibility). Each
turns an action of AWS's JSON protocol into protocol requests run through
the broker's group commit (`kittiwake.broker.local_calls`), so an SQS answer
is as durable as any ack. With an auth file, each action needs a permission
on the SQS queue's name (`require`): admin to create, delete, purge or set
attributes, produce to send, consume to receive, delete or change
visibility, any to read the URL or attributes; ListQueues shows the queues
the user has any permission on. The permission must cover the Kittiwake
queues behind the SQS queue too (`rights`), since the face's requests on
them are not checked again.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from typing import Any

from kittiwake import errors
from kittiwake.broker.access import Permission, Principal
from kittiwake.broker.local_calls import LocalCalls, request_id
from kittiwake.protocol import messages as m
from kittiwake.sqs import naming, rights, sqs_errors
from kittiwake.sqs.queue_registry import QueueRegistry, SqsQueue
from kittiwake.sqs.redrive import RedriveRights


@dataclass(slots=True)
class Context:
    """Who asks, and how they named the endpoint: queue URLs are built from the Host they used."""

    host: str
    region: str
    sender: str
    peer: str | None
    principal: Principal | None = None  # with an auth file: the user whose SQS secret signed the request

    @property
    def user(self) -> str | None:
        """The signing user's name with an auth file; None without one."""
        return self.principal.user if self.principal is not None else None


ADMIN_ONLY = (Permission.ADMIN,)
PRODUCE_ONLY = (Permission.PRODUCE,)
CONSUME_ONLY = (Permission.CONSUME,)


def require(ctx: Context, permissions: tuple[Permission, ...], name: str) -> None:
    """AccessDenied unless the caller holds one of `permissions` on the SQS queue `name` and the queues
    behind it (`rights.may_use`; no auth file: anyone)."""
    principal = ctx.principal
    if principal is None or any(rights.may_use(principal, permission, name) for permission in permissions):
        return
    wanted = " or ".join(permission.value for permission in permissions)
    raise sqs_errors.access_denied(f"user {principal.user!r} has no {wanted} permission on queue {name[:80]!r} "
                                   f"and the queues behind it ({rights.behind(name[:80])})")



class ActionBase:
    """What both kinds of actions share: the broker's calls, the registry, the caller's queue."""

    def __init__(self, calls: LocalCalls, registry: QueueRegistry, redrive_rights: RedriveRights) -> None:
        self.calls = calls
        self.registry = registry
        self.redrive_rights = redrive_rights

    async def call(self, request: m.Request, ctx: Context) -> Any:
        try:
            return await self.calls.call(request, ctx.peer)
        except errors.Unavailable as exc:
            raise sqs_errors.unavailable(exc.message) from None
        except errors.KittiwakeError as exc:
            if exc.code in ("BAD_REQUEST", "FRAME_TOO_LARGE"):
                raise sqs_errors.invalid_parameter(exc.message) from None
            raise sqs_errors.internal(f"{exc.code}: {exc.message}") from None

    async def queue_of(self, params: dict[str, Any], ctx: Context, permissions: tuple[Permission, ...]) -> SqsQueue:
        """The queue QueueUrl names, once the caller may use it so (with an auth file)."""
        name = naming.queue_name_of_url(params.get("QueueUrl"))
        require(ctx, permissions, name)
        return await self.registry.get(name)

    async def _group_infos(self, queue: SqsQueue, ctx: Context) -> list[Any]:
        """The group queues of a FIFO queue with their sizes. `stats` first returns expired leases to
        their queues, so a group whose message's visibility just ended counts as free at once."""
        infos = await self.call(m.Stats(id=request_id(), op="stats", pattern=queue.name + "/*", sample=0), ctx)
        return [info for info in infos if not info.queue.endswith(".dead")]


def decode_token(token: str) -> str:
    try:
        return base64.urlsafe_b64decode(token.encode()).decode()
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise sqs_errors.invalid_parameter("Invalid NextToken") from None


def string_map(value: Any, name: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise sqs_errors.invalid_parameter(f"{name} must be a map")
    return value


def attribute_names(value: Any) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise sqs_errors.invalid_parameter("attribute names must be a list of strings")
    return value


"""How the HTTP views read a broker: its engine, the engine's clock, and which queues a principal sees.

Views run on the broker's event loop between group-commit passes, so the
engine they read is what the last pass committed. They read it directly and
synchronously, never through a claim (`engine.coherence`): a claim would lock
queues in a store transaction that only a pass commits. While the store has
failed the broker holds no engine, and every view answers UNAVAILABLE (503).

Who sees what: with an auth file, a view shows only the queues its principal
holds ADMIN on, as `list_queues` does (`kittiwake.broker.access`). A view
over many queues asks `visibility(principal)` once and gets None (everything
is visible: no auth file, or a user with every right on `*`) or a predicate
over queue names that matches the principal's admin grants only, without
the per-principal decision cache (a page of 100K queues would churn it).

Records users write (a job's record, a flow run's record) name queues, and
a view that follows them reads those queues for the viewer: it reads one only
where the viewer could read it itself, `may_read(principal, queue, rights)`,
with the rights of the read it stands for: `PEEK` (consume, as `peek` needs,
or admin, as the queue's own pages here need) for a scan of its tasks, `GET`
(consume or produce, as `get` needs, or admin) for one task looked up by pid.
What a view shows for a queue it may not read is in its own docstring.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from kittiwake import errors
from kittiwake.broker.access import Permission, Principal
from kittiwake.engine import Engine
from kittiwake.engine.state import EngineState
from kittiwake.model import dead_queue_of

if TYPE_CHECKING:
    from kittiwake.broker.faces import Host

Visible = Callable[[str], bool]

PEEK = (Permission.CONSUME, Permission.ADMIN)  # what a scan of a queue's tasks needs
GET = (Permission.CONSUME, Permission.PRODUCE, Permission.ADMIN)  # what one task looked up by pid needs


def engine_of(host: Host) -> Engine:
    """The broker's engine; UNAVAILABLE while the store has failed or before the broker started."""
    engine = host.reads()
    if engine is None:
        raise errors.Unavailable("the store has failed: the broker serves no reads until it recovers")
    return engine


def now_of(host: Host) -> float:
    """The engine's clock (epoch seconds): the time leases, ages and rates are measured against."""
    return host.wall_clock()


def visibility(principal: Principal | None) -> Visible | None:
    """None when every queue is visible to `principal`; else a predicate: has it ADMIN on the queue?"""
    if principal is None or principal.unrestricted:
        return None
    patterns = [grant.pattern for grant in principal.grants if Permission.ADMIN in grant.permissions]
    if not patterns:
        return lambda name: False
    if len(patterns) == 1:
        return patterns[0].matches
    return lambda name: any(pattern.matches(name) for pattern in patterns)


def may_read(principal: Principal | None, queue: str, rights: tuple[Permission, ...]) -> bool:
    """Whether `principal` (None: no auth file) holds one of `rights` (`PEEK`, `GET`) on `queue`."""
    return principal is None or any(principal.may(right, queue) for right in rights)


def require_admin(principal: Principal | None, queue: str) -> None:
    """FORBIDDEN unless `principal` (None: no auth file) administers `queue`."""
    if principal is not None:
        principal.require(Permission.ADMIN, queue)


def known(state: EngineState, name: str) -> None:
    """QUEUE_NOT_FOUND unless the queue, or its dead-letter queue, holds something."""
    if name not in state.queues and dead_queue_of(name) not in state.queues:
        raise errors.QueueNotFound(f"queue {name[:255]!r} holds no task")

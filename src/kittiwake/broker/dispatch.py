"""From decoded protocol requests to engine calls, and from engine results to replies.

Pure: no sockets, no clock of its own (`now` comes in), no commit. The server
calls `execute` once per request inside a group-commit pass and encodes what it
returns at once, because the engine hands back its live objects (a leased
`Task`) that later requests in the same pass may change.

Each handler returns its op's result as `kittiwake.protocol.replies.REPLY_TYPES`
declares it. Where the engine's own record is the reply (`EnqueueOutcome`,
`ItemOutcome`, `QueueInfo`, `QueueStats`, and a lease's `Task`s, which
clients read as `LeasedTask`), it goes out as it is, with no copy on the hot
paths; task views, update results and dead-letter pages are built here.

Every op goes through `HANDLERS`, long-polls included, but the parked
long-polls belong to the group-commit pass, not to the engine: a lease with
`wait_secs > 0` that comes back empty is parked by the pass
(`broker.passes`), and `cancel_wait` only names the long-poll the pass is to
withdraw. `execute` itself answers every call right away.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

from kittiwake import errors
from kittiwake.broker import access
from kittiwake.engine import Engine
from kittiwake.model import LeaseRequest, Limits, validate_count
from kittiwake.protocol import messages as m
from kittiwake.protocol.replies import (
    AuthResult,
    ClusterMapResult,
    DeadLetterPage,
    HoldersResult,
    JoinInfo,
    Pong,
    TaskView,
    UpdateResult,
)


def lease_request(request: m.Lease, peer: str | None) -> LeaseRequest:
    """The engine's lease arguments; `peer` is the connection's `host:port`."""
    return LeaseRequest(
        queues=list(request.queues),
        max_tasks=request.max_tasks,
        lease_secs=request.lease_secs,
        max_pid=request.max_pid,
        receiver=request.receiver,
        worker=request.worker,
        peer=peer,
        rate_per_sec=request.rate_per_sec,
        rate_burst=request.rate_burst,
        max_reply_bytes=request.max_reply_bytes,
    )


def validate_wait(request: m.Lease, limits: Limits) -> float:
    """The long-poll wait of a lease request, in [0, limits.max_wait_secs]."""
    wait_secs = request.wait_secs
    if not (math.isfinite(wait_secs) and 0.0 <= wait_secs <= limits.max_wait_secs):
        raise errors.BadRequest(f"wait_secs must be in [0, {limits.max_wait_secs}]")
    return wait_secs


def task_views(views: list[dict[str, Any]]) -> list[TaskView]:
    """The replies' task views of the engine's."""
    return [TaskView(**view) for view in views]


def _ping(engine: Engine, request: m.Ping, peer: str | None, now: float) -> Any:
    return Pong(now)


def _enqueue(engine: Engine, request: m.Enqueue, peer: str | None, now: float) -> Any:
    return engine.enqueue(request.tasks, now)


def _lease(engine: Engine, request: m.Lease, peer: str | None, now: float) -> Any:
    validate_wait(request, engine.limits)
    return engine.lease(lease_request(request, peer), now)


def _renew(engine: Engine, request: m.Renew, peer: str | None, now: float) -> Any:
    return engine.renew(request.leases, request.lease_secs, now, request.progress, request.note)


def _dequeue(engine: Engine, request: m.Dequeue, peer: str | None, now: float) -> Any:
    return engine.dequeue(request.leases, now)


def _release(engine: Engine, request: m.Release, peer: str | None, now: float) -> Any:
    return engine.release(request.leases, request.reason, now, request.bury, request.reject)


def _cancel(engine: Engine, request: m.Cancel, peer: str | None, now: float) -> Any:
    return engine.cancel(request.tasks, request.reason, now)


def _update(engine: Engine, request: m.Update, peer: str | None, now: float) -> Any:
    done = engine.update(
        enqueue=request.enqueue,
        dequeue=request.dequeue,
        renew=request.renew,
        release=request.release,
        lease_secs=request.lease_secs,
        reason=request.reason,
        now=now,
    )
    return UpdateResult(enqueued=done.enqueued, dequeued=done.dequeued, renewed=done.renewed, released=done.released)


def _peek(engine: Engine, request: m.Peek, peer: str | None, now: float) -> Any:
    return task_views(engine.peek(request.queue, request.n, request.from_pid, now))


def _get(engine: Engine, request: m.Get, peer: str | None, now: float) -> Any:
    return TaskView(**engine.get(request.queue, request.pid, now))


def _find_by_sender(engine: Engine, request: m.FindBySender, peer: str | None, now: float) -> Any:
    return task_views(engine.find_by_sender(request.sender, request.queue, request.limit, now))


def _queues_for_receiver(engine: Engine, request: m.QueuesForReceiver, peer: str | None, now: float) -> Any:
    return engine.queues_for_receiver(request.receiver)


def _list_queues(engine: Engine, request: m.ListQueues, peer: str | None, now: float) -> Any:
    return engine.list_queues(request.pattern, request.min_tasks, request.limit, request.start_after)


def _delete_queue(engine: Engine, request: m.DeleteQueue, peer: str | None, now: float) -> Any:
    return engine.delete_queue(request.queue)


def _stats(engine: Engine, request: m.Stats, peer: str | None, now: float) -> Any:
    return engine.stats(request.queues, request.pattern, request.sample, now)


def _requeue_dead(engine: Engine, request: m.RequeueDead, peer: str | None, now: float) -> Any:
    page = engine.requeue_dead(request.queue, request.pids, now, after_pid=request.after_pid, limit=request.limit)
    return DeadLetterPage(outcomes=page.outcomes, next_pid=page.next_pid)


def _purge_dead(engine: Engine, request: m.PurgeDead, peer: str | None, now: float) -> Any:
    page = engine.purge_dead(request.queue, request.pids, now, after_pid=request.after_pid, limit=request.limit)
    return DeadLetterPage(outcomes=page.outcomes, next_pid=page.next_pid)


def _declare_join(engine: Engine, request: m.DeclareJoin, peer: str | None, now: float) -> Any:
    return engine.declare_join(request.join, now)


def _drop_join(engine: Engine, request: m.DropJoin, peer: str | None, now: float) -> Any:
    return engine.drop_join(request.name)


def _purge_join(engine: Engine, request: m.PurgeJoin, peer: str | None, now: float) -> Any:
    validate_count(request.limit, "limit", 1, engine.limits.max_batch)
    return engine.purge_join(request.name, request.key, request.limit)


def _list_joins(engine: Engine, request: m.ListJoins, peer: str | None, now: float) -> Any:
    return [JoinInfo(**info) for info in engine.list_joins(request.pattern)]


def _auth(engine: Engine, request: m.Auth, peer: str | None, now: float) -> Any:
    # reached only without an auth file: every client is let in, credentials or not
    return AuthResult(None)


def _cluster_map(engine: Engine, request: m.ClusterMapRequest, peer: str | None, now: float) -> Any:
    # a broker that is no cluster node; a node's extension answers for itself (`extensions`)
    return ClusterMapResult()


def _holders(engine: Engine, request: m.Holders, peer: str | None, now: float) -> Any:
    validate_count(len(request.queues), "queues", 0, engine.limits.max_batch)
    return HoldersResult(holders={queue: [] for queue in request.queues})


def _announce(engine: Engine, request: m.Announce, peer: str | None, now: float) -> Any:
    raise errors.BadRequest("this broker is no cluster node: it takes no announcements")


@dataclass(frozen=True, slots=True)
class WithdrawWait:
    """The result of `cancel_wait`: the caller's parked long-poll `request_id` is to be answered
    with nothing. The pass does it, as the long-polls are its own, and replies `{"cancelled"}`."""

    request_id: int


def _cancel_wait(engine: Engine, request: m.CancelWait, peer: str | None, now: float) -> Any:
    return WithdrawWait(request.request_id)


Handler = Callable[[Engine, Any, "str | None", float], Any]

HANDLERS: dict[type[m.Request], Handler] = {
    m.Ping: _ping,
    m.Enqueue: _enqueue,
    m.Lease: _lease,
    m.Renew: _renew,
    m.Dequeue: _dequeue,
    m.Release: _release,
    m.Update: _update,
    m.Peek: _peek,
    m.Get: _get,
    m.FindBySender: _find_by_sender,
    m.QueuesForReceiver: _queues_for_receiver,
    m.ListQueues: _list_queues,
    m.DeleteQueue: _delete_queue,
    m.Stats: _stats,
    m.Cancel: _cancel,
    m.RequeueDead: _requeue_dead,
    m.PurgeDead: _purge_dead,
    m.Auth: _auth,
    m.CancelWait: _cancel_wait,
    m.DeclareJoin: _declare_join,
    m.DropJoin: _drop_join,
    m.PurgeJoin: _purge_join,
    m.ListJoins: _list_joins,
    m.ClusterMapRequest: _cluster_map,
    m.Holders: _holders,
    m.Announce: _announce,
}
HANDLERS.update(access.SCOPED_HANDLERS)  # cross-queue reads of users without rights on every queue


# Requests that write nothing to the store: served even while a storage outage
# pauses writes (`store_health`), and the scoped twins of the cross-queue
# reads, which read no more. Anything not listed counts as a write.
READ_ONLY_REQUESTS: frozenset[type[m.Request]] = frozenset(
    {m.Ping, m.Auth, m.Peek, m.Get, m.FindBySender, m.QueuesForReceiver, m.ListQueues, m.Stats, m.CancelWait,
     m.ListJoins, m.ClusterMapRequest, m.Holders, m.Announce,
     *access.SCOPED_HANDLERS}
)


def execute(
    engine: Engine, request: m.Request, peer: str | None, now: float, handlers: dict[type[m.Request], Handler] = HANDLERS
) -> Any:
    """Run one request against the engine (through `handlers`, `HANDLERS` and an extension's ops);
    raises `KittiwakeError` for a refused request."""
    handler = handlers.get(type(request))
    if handler is None:
        raise errors.UnknownOperation(f"op {request.op!r} has no handler")
    return handler(engine, request, peer, now)

"""Authorisation: which user may do what to which queue, checked per request before it runs.

A user holds grants: a queue pattern (`kittiwake.queue_globs`, globs
matched in linear time) and a set of permissions on the queues it matches.
Every queue a request names is checked — the tasks' queues, the leases'
queues, the `after` and `unless` references, the queue a task's
``kittiwake-reply-to`` header names, a dead-letter queue named
directly (`jobs.dead` is a queue like any other: `jobs.*` covers it, `jobs`
alone does not). A request naming one queue the user may not use is refused
whole with `FORBIDDEN`, before anything of it runs.

The reply-to header is a name the broker never uses, but an app's worker
posts the task's result into that queue with the worker's own rights
(`app.envelope`, "Reply queues are the submitter's"): so a task may name
only a reply queue its submitter could produce into itself, and a user who
may only enqueue tasks cannot have a worker write for it where it may not.

What each op needs (the table of docs/security.md, "Rights", comes from this one):

| op | needs |
| --- | --- |
| ping, cancel_wait, auth | nothing beyond being authenticated |
| enqueue | produce on each task's queue; any permission on the queue of each `after` / `unless` task; produce on the queue a task's `kittiwake-reply-to` header names |
| lease, renew, dequeue, release | consume on each queue |
| update | produce on its enqueues' queues (and `after` / `unless` / reply-to as enqueue), consume on the queues of its dequeues, renewals and releases |
| peek | consume |
| get | consume or produce (a producer may look up a task it can name) |
| cancel, delete_queue | admin on each queue |
| requeue_dead, purge_dead | admin on the queue and on its dead-letter queue |
| stats of named queues, find_by_sender in one queue | admin on each queue |
| list_queues, stats by pattern, find_by_sender in all queues, queues_for_receiver | answered with the queues the user has admin on only |
| declare_join | admin on the join's name (read as a queue name), its job queue and every port queue |
| drop_join, purge_join | admin on the join's name |
| list_joins | answered with the joins whose name the user has admin on only |
| cluster_map | nothing beyond being authenticated |
| holders | consume on each queue |
| announce | admin on every queue (a grant whose pattern is `*`): it is how cluster nodes talk to each other |

The broker itself moves tasks where no request names them — a task released
for the last time into `<queue>.dead`, children of a failed parent into their
dead-letter queues — and those moves follow the permission on the named queue.
An op with no rule here (one added without one) is allowed only to a user
holding all three permissions on `*`: new ops are closed until they are given
a rule.

The cross-queue reads are answered in the engine pass, not here: `scoped`
turns such a request into its `Scoped…` twin carrying the principal, and
`SCOPED_HANDLERS` (merged into `dispatch.HANDLERS`) filters what the engine
returns. Pure: no sockets, no clock.

Their bounds: listings and stats by pattern walk the names the engine holds
in memory (a wide read, which a pass runs only a few of: `passes`). A user's
`find_by_sender` in all queues filters inside the search rather than after
it, so other users' tasks of the same sender cannot crowd the user's own out
of the answer: it reads the sender's index (by queue, then pid) a page at a
time, the pages doubling from `SENDER_FIRST_PAGE` while they hold only the
user's tasks; a task of a queue the user may not see ends the page, and the
next read starts past that queue, or at the first name an admin grant of the
user could match (`Principal.first_name_from`). At most `MAX_SENDER_READS`
reads: a search needing more is refused with BAD_REQUEST (name the queue),
never answered short.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterable

import msgspec

from kittiwake import errors
from kittiwake.constants import REPLY_TO_HEADER
from kittiwake.engine import Engine
from kittiwake.model import DEAD_SUFFIX, QueueInfo, dead_queue_of, validate_count
from kittiwake.protocol import messages as m
from kittiwake.protocol.replies import JoinInfo, TaskView
from kittiwake.queue_globs import QueuePattern

LIST_ALL = 1_000_000  # the engine's largest list_queues limit: stats by pattern filters all it lists
SCOPED_LIST_STEP = 1000  # queues a user's listing asks the engine for at a time (at least its limit)
MAX_STATS_NAMES = 10_000  # the engine's stats takes at most this many names at once
# a user's find_by_sender across queues: pages of the sender's index it reads at most, the first page's size
MAX_SENDER_READS = 1000
SENDER_FIRST_PAGE = 16
PAST_EVERY_PID = "\U0010ffff"  # sorts after every pid (pids are printable; this character is not)
DECISION_CACHE_ENTRIES = 4096


class Permission(str, enum.Enum):
    """What a grant allows on the queues its pattern matches."""

    PRODUCE = "produce"  # enqueue (and the enqueues of an update); get
    CONSUME = "consume"  # lease, renew, dequeue, release (and in an update); peek, get
    ADMIN = "admin"  # cancel, delete_queue, stats, and seeing the queue in cross-queue reads


ALL_PERMISSIONS = frozenset(Permission)
_VERBS = {Permission.PRODUCE: "produce into", Permission.CONSUME: "consume from", Permission.ADMIN: "administer"}


@dataclass(frozen=True, slots=True)
class Grant:
    """Permissions on every queue whose name matches `pattern`."""

    pattern: QueuePattern
    permissions: frozenset[Permission]


@dataclass(slots=True, eq=False)
class Principal:
    """An authenticated user and its grants, shared by all its connections (one event loop thread)."""

    user: str
    grants: tuple[Grant, ...]
    unrestricted: bool = field(init=False)
    _decisions: dict[tuple[Permission, str], bool] = field(init=False, repr=False, default_factory=dict)

    def __post_init__(self) -> None:
        self.unrestricted = any(
            grant.pattern.is_everything and grant.permissions == ALL_PERMISSIONS for grant in self.grants
        )

    def may(self, permission: Permission, queue: str) -> bool:
        """Whether some grant gives `permission` on `queue`."""
        if self.unrestricted:
            return True
        key = (permission, queue)
        decision = self._decisions.get(key)
        if decision is None:
            decision = any(permission in grant.permissions and grant.pattern.matches(queue) for grant in self.grants)
            if len(self._decisions) >= DECISION_CACHE_ENTRIES:
                self._decisions.clear()  # a bound, not an LRU: decisions are cheap to redo
            self._decisions[key] = decision
        return decision

    def may_every(self, permission: Permission, prefix: str) -> bool:
        """Whether some grant gives `permission` on every queue whose name starts with `prefix`
        (`QueuePattern.matches_every_name_from`: sound, so a no may be a cautious one)."""
        return self.unrestricted or any(
            permission in grant.permissions and grant.pattern.matches_every_name_from(prefix) for grant in self.grants
        )

    def first_name_from(self, permission: Permission, name: str) -> str | None:
        """A lower bound of the queue names at or after `name` that some grant gives `permission`
        on (`QueuePattern.first_name_from` over those grants), or None when there are none: a
        search over names sorted may jump there and miss none of the user's."""
        if self.unrestricted:
            return name
        bounds = [bound for grant in self.grants if permission in grant.permissions
                  and (bound := grant.pattern.first_name_from(name)) is not None]
        return min(bounds, default=None)

    def require(self, permission: Permission, queue: str) -> None:
        if not self.may(permission, queue):
            raise errors.Forbidden(f"user {self.user!r} may not {_VERBS[permission]} queue {queue[:255]!r}")

    def require_any(self, permissions: tuple[Permission, ...], queue: str) -> None:
        if not any(self.may(permission, queue) for permission in permissions):
            wanted = " or ".join(permission.value for permission in permissions)
            raise errors.Forbidden(f"user {self.user!r} has no {wanted} permission on queue {queue[:255]!r}")


ANY = (Permission.PRODUCE, Permission.CONSUME, Permission.ADMIN)
READ_ONE = (Permission.CONSUME, Permission.PRODUCE)


# --------------------------------------------------------------- the rules


def _tasks(principal: Principal, tasks: Iterable[m.TaskIn]) -> None:
    for task in tasks:
        principal.require(Permission.PRODUCE, task.queue)
        for key in task.after or ():
            principal.require_any(ANY, key[0])
        for key in task.unless or ():
            principal.require_any(ANY, key[0])
        reply_to = task.headers.get(REPLY_TO_HEADER) if task.headers else None
        if reply_to is not None and not principal.may(Permission.PRODUCE, reply_to):
            raise errors.Forbidden(
                f"user {principal.user!r} may not produce into queue {reply_to[:255]!r}, named by a task's "
                f"{REPLY_TO_HEADER} header (a worker posts the task's result there)"
            )


def _leases(principal: Principal, refs: Iterable[m.LeaseRefIn]) -> None:
    for ref in refs:
        principal.require(Permission.CONSUME, ref.queue)


def _check_enqueue(principal: Principal, request: m.Enqueue) -> None:
    _tasks(principal, request.tasks)


def _check_lease(principal: Principal, request: m.Lease) -> None:
    for queue in request.queues:
        principal.require(Permission.CONSUME, queue)


def _check_lease_refs(principal: Principal, request: m.Renew | m.Dequeue | m.Release) -> None:
    _leases(principal, request.leases)


def _check_update(principal: Principal, request: m.Update) -> None:
    _tasks(principal, request.enqueue)
    _leases(principal, request.dequeue)
    _leases(principal, request.renew)
    _leases(principal, request.release)


def _check_peek(principal: Principal, request: m.Peek) -> None:
    principal.require(Permission.CONSUME, request.queue)


def _check_get(principal: Principal, request: m.Get) -> None:
    principal.require_any(READ_ONE, request.queue)


def _check_cancel(principal: Principal, request: m.Cancel) -> None:
    for key in request.tasks:
        principal.require(Permission.ADMIN, key[0])


def _check_delete_queue(principal: Principal, request: m.DeleteQueue) -> None:
    principal.require(Permission.ADMIN, request.queue)


def _check_dead_letters(principal: Principal, request: m.RequeueDead | m.PurgeDead) -> None:
    """Admin on the queue and on its dead-letter queue: requeue moves tasks from one to the other."""
    queue = request.queue
    original = queue[: -len(DEAD_SUFFIX)] if queue.endswith(DEAD_SUFFIX) else queue
    principal.require(Permission.ADMIN, original)
    principal.require(Permission.ADMIN, dead_queue_of(original))


def _check_stats(principal: Principal, request: m.Stats) -> None:
    for queue in request.queues or ():
        principal.require(Permission.ADMIN, queue)


def _check_find_by_sender(principal: Principal, request: m.FindBySender) -> None:
    if request.queue is not None:
        principal.require(Permission.ADMIN, request.queue)


def _check_declare_join(principal: Principal, request: m.DeclareJoin) -> None:
    spec = request.join
    for queue in (spec.name, spec.job_queue, *(port.queue for port in spec.ports)):
        principal.require(Permission.ADMIN, queue)


def _check_join_name(principal: Principal, request: m.DropJoin | m.PurgeJoin) -> None:
    principal.require(Permission.ADMIN, request.name)


def _check_holders(principal: Principal, request: m.Holders) -> None:
    for queue in request.queues:
        principal.require(Permission.CONSUME, queue)


def _check_announce(principal: Principal, request: m.Announce) -> None:
    # every queue: a grant whose pattern matches every name. Not `may(ADMIN, "*")`, which asks about
    # the one-character name "*" and so was granted by a pattern as narrow as `?`
    if not principal.may_every(Permission.ADMIN, ""):
        raise errors.Forbidden(f"user {principal.user!r} may not announce: it needs admin on every queue ('*')")


def _nothing(principal: Principal, request: m.Request) -> None:
    return None


Rule = Callable[[Principal, Any], None]

RULES: dict[type[m.Request], Rule] = {
    m.Ping: _nothing,
    m.CancelWait: _nothing,  # touches only this connection's own long-polls
    m.Auth: _nothing,
    m.Enqueue: _check_enqueue,
    m.Lease: _check_lease,
    m.Renew: _check_lease_refs,
    m.Dequeue: _check_lease_refs,
    m.Release: _check_lease_refs,
    m.Update: _check_update,
    m.Peek: _check_peek,
    m.Get: _check_get,
    m.Cancel: _check_cancel,
    m.DeleteQueue: _check_delete_queue,
    m.RequeueDead: _check_dead_letters,
    m.PurgeDead: _check_dead_letters,
    m.Stats: _check_stats,
    m.FindBySender: _check_find_by_sender,
    m.ListQueues: _nothing,  # scoped: sees only queues with admin
    m.QueuesForReceiver: _nothing,  # scoped
    m.DeclareJoin: _check_declare_join,
    m.DropJoin: _check_join_name,
    m.PurgeJoin: _check_join_name,
    m.ListJoins: _nothing,  # scoped: sees only joins with admin on their name
    m.ClusterMapRequest: _nothing,  # the map: where the nodes are, nothing of any queue
    m.Holders: _check_holders,
    m.Announce: _check_announce,
}


def authorise(principal: Principal, request: m.Request) -> m.Request:
    """The request to run for this principal (maybe its scoped twin); raises `Forbidden`."""
    if principal.unrestricted:
        return request
    rule = RULES.get(type(request))
    if rule is None:
        raise errors.Forbidden(f"op {request.op!r} needs produce, consume and admin on '*'")
    rule(principal, request)
    return scoped(principal, request)


# --------------------------------------------------- cross-queue reads


class ScopedListQueues(m.ListQueues):
    principal: Any = None


class ScopedStats(m.Stats):
    principal: Any = None


class ScopedFindBySender(m.FindBySender):
    principal: Any = None


class ScopedQueuesForReceiver(m.QueuesForReceiver):
    principal: Any = None


class ScopedListJoins(m.ListJoins):
    principal: Any = None


_SCOPED: dict[type[m.Request], type[m.Request]] = {
    m.ListQueues: ScopedListQueues,
    m.QueuesForReceiver: ScopedQueuesForReceiver,
    m.ListJoins: ScopedListJoins,
}


def scoped(principal: Principal, request: m.Request) -> m.Request:
    """A cross-queue read made to see only what `principal` administers; other requests as they are."""
    kind = type(request)
    twin = _SCOPED.get(kind)
    if twin is None:
        if type(request) is m.Stats:  # by pattern: the queues it may see; by name: their dead letters too
            twin = ScopedStats
        elif type(request) is m.FindBySender and request.queue is None:
            twin = ScopedFindBySender
        else:
            return request
    return twin(**msgspec.structs.asdict(request), principal=principal)  # type: ignore[call-arg]


def _visible(request: Any, queue: str) -> bool:
    principal: Principal = request.principal
    return principal.may(Permission.ADMIN, queue)


def _list_queues(engine: Engine, request: ScopedListQueues, peer: str | None, now: float) -> Any:
    """The engine's listing in pages from `start_after` on, keeping the queues the user administers,
    until `limit` are kept or the names run out: a page of a user's listing walks the names from
    its cursor, never from the first."""
    validate_count(request.limit, "limit", 1, LIST_ALL)
    step = max(request.limit, SCOPED_LIST_STEP)
    kept: list[QueueInfo] = []
    after = request.start_after
    while True:
        rows = engine.list_queues(request.pattern, request.min_tasks, step, after)
        kept += [row for row in rows if _visible(request, row.queue)]
        if len(kept) >= request.limit or len(rows) < step:
            return kept[: request.limit]
        after = rows[-1].queue


def _stats(engine: Engine, request: ScopedStats, peer: str | None, now: float) -> Any:
    """Stats of the queues named (checked before) or of those the pattern matches that the user
    administers; a queue's `dead` counts only when the user may see its dead-letter queue too (a
    right on `jobs` does not cover `jobs.dead`)."""
    if request.queues is not None:
        result = engine.stats(request.queues, None, request.sample, now)
    else:
        names = [row.queue for row in engine.list_queues(request.pattern, 1, LIST_ALL) if _visible(request, row.queue)]
        result = engine.stats(names[:MAX_STATS_NAMES], None, request.sample, now)
        for start in range(MAX_STATS_NAMES, len(names), MAX_STATS_NAMES):
            result += engine.stats(names[start : start + MAX_STATS_NAMES], None, request.sample, now)
    return [row if not row.dead or _visible(request, dead_queue_of(row.queue)) else replace(row, dead=0)
            for row in result]


def _find_by_sender(engine: Engine, request: ScopedFindBySender, peer: str | None, now: float) -> Any:
    """The first `limit` tasks of the sender, by queue then pid, among the queues the user
    administers: the sender's index is read a page at a time, a queue the user may not see is
    jumped over (to the next name one of its grants could match), and the pages grow while they
    hold only the user's tasks. At most `MAX_SENDER_READS` pages: a search that would need more
    is refused with BAD_REQUEST rather than answered short."""
    validate_count(request.limit, "limit", 1, engine.limits.max_batch)
    principal: Principal = request.principal
    kept: list[TaskView] = []
    start = principal.first_name_from(Permission.ADMIN, "")
    if start is None:
        return kept
    after: tuple[str, str] | None = (start, "") if start else None
    page = SENDER_FIRST_PAGE
    for _ in range(MAX_SENDER_READS):
        want = min(request.limit - len(kept), page)
        views = engine.find_by_sender(request.sender, None, want, now, after)
        for view in views:
            queue = view["queue"]
            if _visible(request, queue):
                kept.append(TaskView(**view))
                after = (queue, view["pid"])
                continue
            bound = principal.first_name_from(Permission.ADMIN, queue)
            if bound is None:
                return kept  # no grant matches a name from here on
            # past every pid of this queue (a pid is printable: U+10FFFF never starts one), or to the bound
            after = (queue, PAST_EVERY_PID) if bound == queue else (bound, "")
            page = SENDER_FIRST_PAGE
            break
        else:
            if len(views) < want or len(kept) >= request.limit:
                return kept
            page = min(page * 2, engine.limits.max_batch)
    raise errors.BadRequest(
        f"find_by_sender of {request.sender!r}: its tasks lie in more queues you may not see than one "
        f"request reads past ({MAX_SENDER_READS} pages of the sender's index); name the queue to search"
    )


def _queues_for_receiver(engine: Engine, request: ScopedQueuesForReceiver, peer: str | None, now: float) -> Any:
    return [queue for queue in engine.queues_for_receiver(request.receiver) if _visible(request, queue)]


def _list_joins(engine: Engine, request: ScopedListJoins, peer: str | None, now: float) -> Any:
    return [JoinInfo(**info) for info in engine.list_joins(request.pattern) if _visible(request, info["name"])]


SCOPED_HANDLERS: dict[type[m.Request], Callable[[Engine, Any, "str | None", float], Any]] = {
    ScopedListQueues: _list_queues,
    ScopedStats: _stats,
    ScopedFindBySender: _find_by_sender,
    ScopedQueuesForReceiver: _queues_for_receiver,
    ScopedListJoins: _list_joins,
}

"""Which requests a cluster node refuses: `WRONG_SHARD` for every key another node owns, a pure function.

`refusal(cluster, node, request)` is the whole rule, sans-IO: it reads the request
and the map (`routing.route`, `routing.lease_route`) and returns the
`errors.WrongShard` to answer, carrying the map's epoch, or None to serve it. It is
run in the broker's group-commit pass before every request (`node_extension`), so
every face is guarded alike, and a request is refused whole, never item by item
(a client splits a batch by node before it sends, `routing`).

What is refused (anything not listed is served, answering for what this node holds):

| request | refused when |
| --- | --- |
| enqueue, update's enqueues | a task's `route` (its queue and pid: a named group, a routing tag, a FIFO pid's residue, a (queue, pid) slot) is another node; so is a key of its `after` or `unless`. A FIFO push (no pid) to a default-group queue is never refused for its own route. A task with `after` whose parents would not move with it when the cluster grows (`together`: one slot for all, or FIFO pids for all, which never move) is `BAD_REQUEST`: the grow would leave it blocked on one node while its parents finish on another |
| lease, peek | a named group's queue owned elsewhere (a spread queue's lease and peek are local) |
| get, cancel | the task's `route` is another node |
| renew, dequeue, release, update's leases | a lease's `lease_route` (a named group's owner, or the node its lease id names) is another node |
| requeue_dead, purge_dead | a named group owned elsewhere; with `pids`, a pid whose dead letters live elsewhere (`routing.dead_letter_route`: with their task, however the queue and pid are written); the whole dead-letter queue of a spread queue is local |
| delete_queue, find_by_sender in one queue | a named group owned elsewhere (spread: each node deletes or finds what it holds) |
| declare_join | its job queue's group (which is every port's, `join_spec`) owned elsewhere; a join over default-group queues is `BAD_REQUEST` on a cluster (its tokens would be spread over nodes and never meet), and so is a join whose name or a port is not in a group of its job queue's slot (`join_together`: its declaration lives with its job queue, `growth.destination`, while drop_join and purge_join go by its name, so a grow must never part them): flows name their joins and queues in a group (`flow.names`: `G#step`, `G#steps.engine.step`), which this keeps whole on one node |
| drop_join, purge_join | the join's name is in a named group owned elsewhere (flows' are); a name without a group (no join declared on a cluster has one) is answered by each node for the joins it holds |

Stats, list_queues, queues_for_receiver, find_by_sender in all queues and
list_joins are fan-out reads: each node answers for what it holds.
"""

from __future__ import annotations

from collections.abc import Iterable

from kittiwake import errors
from kittiwake.cluster.cluster_map import ClusterMap
from kittiwake.cluster.routing import Owned, dead_letter_route, lease_route, route, slot_of
from kittiwake.constants import GROUP_SEPARATOR
from kittiwake.join_spec import JoinSpec
from kittiwake.model import LeaseRef, NewTask
from kittiwake.protocol import messages as m


def _anchor(cluster: ClusterMap, queue: str, pid: str | None) -> int | None:
    """What holds a task to its node across maps: its slot, or None for a FIFO pid (or push)."""
    decision = route(cluster, queue, pid)
    return decision.slot if isinstance(decision, Owned) else None


def refusal(cluster: ClusterMap, node: str, request: m.Request) -> errors.KittiwakeError | None:
    """The error `node` answers `request` with because another node owns a key it names (WRONG_SHARD
    with the map's epoch), or a BAD_REQUEST a cluster refuses; None to serve it (module docstring)."""
    guard = _Guard(cluster, node)
    try:
        guard.check(request)
    except _Refused as refused:
        return refused.error
    return None


class _Refused(Exception):
    def __init__(self, error: errors.KittiwakeError) -> None:
        super().__init__(error.message)
        self.error = error


class _Guard:
    __slots__ = ("cluster", "node")

    def __init__(self, cluster: ClusterMap, node: str) -> None:
        self.cluster = cluster
        self.node = node

    def check(self, request: m.Request) -> None:
        if isinstance(request, m.Enqueue):
            self.tasks(request.tasks)
        elif isinstance(request, (m.Renew, m.Dequeue, m.Release)):
            self.leases(request.leases)
        elif isinstance(request, m.Update):
            self.tasks(request.enqueue)
            self.leases(request.dequeue)
            self.leases(request.renew)
            self.leases(request.release)
        elif isinstance(request, m.Lease):
            for queue in request.queues:
                self.group_of(queue, "lease from")
        elif isinstance(request, m.Peek):
            self.group_of(request.queue, "peek into")
        elif isinstance(request, m.Get):
            self.task(request.queue, request.pid, "get")
        elif isinstance(request, m.Cancel):
            for queue, pid in request.tasks:
                self.task(queue, pid, "cancel")
        elif isinstance(request, (m.RequeueDead, m.PurgeDead)):
            self.group_of(request.queue, request.op)
            for pid in request.pids or ():
                decision = dead_letter_route(self.cluster, request.queue, pid)
                if isinstance(decision, Owned):
                    self.owned(decision, request.op, request.queue, pid)
        elif isinstance(request, m.DeleteQueue):
            self.group_of(request.queue, "delete")
        elif isinstance(request, m.FindBySender):
            if request.queue is not None:
                self.group_of(request.queue, "find tasks in")
        elif isinstance(request, m.DeclareJoin):
            self.declare_join(request)
        elif isinstance(request, (m.DropJoin, m.PurgeJoin)):
            self.group_of(request.name, "change join")

    # ------------------------------------------------------------- the keys

    def tasks(self, tasks: Iterable[NewTask]) -> None:
        for task in tasks:
            if task.pid is not None or GROUP_SEPARATOR in task.queue:
                self.task(task.queue, task.pid, "enqueue")
            for queue, pid in task.after or ():
                self.task(queue, pid, "enqueue a task after")
            if task.after:
                self.together(task)
            for queue, pid in task.unless or ():
                self.task(queue, pid, "enqueue a task unless")

    def leases(self, refs: Iterable[LeaseRef]) -> None:
        cluster, node = self.cluster, self.node
        for ref in refs:
            # the hot path (a batch dequeue): a spread queue's lease id names its node, no key to build
            if GROUP_SEPARATOR not in ref.queue and cluster.node_of_id(ref.lease_id) == node:
                continue
            self.owned(lease_route(cluster, ref.queue, ref.pid, ref.lease_id), "the lease of", ref.queue, ref.pid)

    def task(self, queue: str, pid: str | None, what: str) -> None:
        decision = route(self.cluster, queue, pid)
        if isinstance(decision, Owned):
            self.owned(decision, what, queue, pid)

    def together(self, task: NewTask) -> None:
        """A task and its parents (`after`: stored edges) must live on one node under every map a
        grow may make: all in one slot (a named group, a routing tag, the same key), or all FIFO
        pids (which name their node and never move). Slots are kept by a grow; which node owns
        them is not."""
        anchors = {_anchor(self.cluster, task.queue, task.pid)}
        anchors.update(_anchor(self.cluster, queue, pid) for queue, pid in task.after or ())
        if len(anchors) > 1:
            raise _Refused(errors.BadRequest(
                f"task {task.queue[:255]!r} {(task.pid or '(FIFO)')[:64]!r} waits for tasks that a growing cluster "
                "may move to another node than it: on a cluster, give a task and those it runs after one "
                "routing tag (pids '{tag}…') or one named group (G#queue)"))

    def group_of(self, queue: str, what: str) -> None:
        if GROUP_SEPARATOR in queue:
            self.task(queue, None, what)

    def declare_join(self, request: m.DeclareJoin) -> None:
        spec = request.join
        if GROUP_SEPARATOR not in spec.job_queue:
            raise _Refused(errors.BadRequest(
                f"join {spec.name[:255]!r}: on a cluster, a join's job queue and ports must be in a named group "
                f"(G#queue), which lives whole on one node; {spec.job_queue[:255]!r} is in the default group, "
                "whose queues are spread over the nodes"))
        self.join_together(spec)
        self.task(spec.job_queue, None, "declare a join on")
        self.group_of(spec.name, "declare join")

    def join_together(self, spec: JoinSpec) -> None:
        """A join's name, job queue and ports must be in one slot under every map a grow may make:
        its declaration lives with its job queue (where its tokens meet, `growth.destination`) while
        drop_join, purge_join and declaring it again are routed by its name. Slots are kept by a
        grow; which node owns them is not."""
        job_group = spec.job_queue.rpartition(GROUP_SEPARATOR)[0]
        job_slot = slot_of(job_group, self.cluster.slots)
        named = [("name", spec.name)] + [(f"port {port.name[:64]!r}", port.queue) for port in spec.ports]
        for what, queue in named:
            group, sep, _ = queue.rpartition(GROUP_SEPARATOR)
            if sep and slot_of(group, self.cluster.slots) == job_slot:
                continue
            where = f"in group {group[:255]!r}" if sep else "in no group"
            raise _Refused(errors.BadRequest(
                f"join {spec.name[:255]!r}: its {what} {queue[:255]!r} is {where} and its job queue "
                f"{spec.job_queue[:255]!r} in group {job_group[:255]!r}: a growing cluster may move them to "
                f"different nodes. On a cluster, name a join and its ports in its job queue's group "
                f"({job_group[:200]}#…), as flows do"))

    def owned(self, decision: Owned, what: str, queue: str, pid: str | None) -> None:
        if decision.node == self.node:
            return
        where = f"slot {decision.slot}" if decision.slot is not None else "the node its id names"
        task = f" task {pid[:64]!r}" if pid is not None else ""
        raise _Refused(errors.WrongShard(
            f"node {self.node!r} cannot {what} queue {queue[:255]!r}{task}: node {decision.node!r} owns it "
            f"({where}, map epoch {self.cluster.epoch})",
            epoch=self.cluster.epoch,
        ))

"""Growing a cluster: which stored entries change node when a map gains nodes (sans-IO).

`kittiwake cluster grow` moves, node by node, every stored entry whose owner under the new map is
another node; this module decides, from the maps and the entry alone, where each entry belongs and
what may grow into what. No store, no socket, no clock.

**Only appending grows.** A new map grows an old one when it keeps the old nodes in the same order
at the same addresses, with the same slot count, and adds at least one node after them
(`check_growth` refuses anything else, saying why). By the map's assignment rule
(`cluster_map`) every slot that changes owner then goes to a new node, and a FIFO pid whose residue
names an old node still names it: nothing moves between old nodes.

**Where an entry belongs** is `routing.route` of its queue and pid (`destination`), with one exception: a
join's declaration, the task of the broker's own queue `_joins` (pid the join's name, data its
spec), belongs with its job queue's group (a named group's owner), where its tokens meet; a join on
the default group has no single owner and stays where it is (`None`). A node routes drop_join,
purge_join and declare_join by the join's name as well (`shard_guard`), which it can do because it
declares on a cluster only joins whose name and ports are in groups of the job queue's slot
(`shard_guard.join_together`): under every map the name's owner is the declaration's. A declaration
stored before that rule whose name the new map sends elsewhere (`parted_join`) stops a grow.

**Leases.** A leased task that moves keeps its lease only when the new map routes that lease
(`routing.lease_route`) to the task's new node, so the holder's renew and dequeue still reach it (a
named group's queue); any other lease is dropped (`drop_lease`): the task is available again on its
new node with no failed attempt counted and will be delivered again (at-least-once), as after
`reject`.

**Copies.** `same_task` says whether a task found on its new node already is the one being moved
(a grow interrupted after its copy and before its delete) or another task under the same key.

**Reporting.** `moved_slots` lists, as ranges, the slots that change owner (old owner → new).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import msgspec

from kittiwake import errors
from kittiwake.cluster.cluster_map import ClusterMap
from kittiwake.cluster.routing import Owned, lease_route, route
from kittiwake.constants import GROUP_SEPARATOR, JOINS_QUEUE
from kittiwake.model import Task


def check_growth(old: ClusterMap, new: ClusterMap) -> None:
    """Nothing when `new` grows `old` by appending nodes; BadRequest saying why not otherwise."""
    if new.slots != old.slots:
        raise errors.BadRequest(
            f"the new map has {new.slots} slots and the old one {old.slots}: growing keeps the slot count "
            "(every key would change slot)")
    if len(new.nodes) < len(old.nodes):
        missing = [node.name for node in old.nodes if node.name not in new.node_names]
        raise errors.BadRequest(
            f"the new map drops node(s) {', '.join(missing) or '?'}: growing only appends nodes")
    for index, node in enumerate(old.nodes):
        other = new.nodes[index]
        if other.name != node.name:
            raise errors.BadRequest(
                f"node {index + 1} of the old map is {node.name!r} but of the new map {other.name!r}: growing keeps "
                "the old nodes in the same order (append new ones at the end of [nodes])")
        if other.address != node.address:
            raise errors.BadRequest(
                f"node {node.name!r} moves from {node.address} to {other.address}: growing keeps the old nodes' "
                "addresses (change an address in a map of its own)")
    if len(new.nodes) == len(old.nodes):
        raise errors.BadRequest("the new map adds no node: there is nothing to grow")


def destination(cluster: ClusterMap, task: Task) -> Owned | None:
    """Where the stored `task` belongs under `cluster` (its node, and the slot that decided it, or
    None for a FIFO pid's residue), or None when it stays wherever it is (a join declared on the
    default group)."""
    if task.queue == JOINS_QUEUE:
        job_queue = _join_job_queue(task.data)
        if job_queue is None or GROUP_SEPARATOR not in job_queue:
            return None
        decision = route(cluster, job_queue, task.pid)
    else:
        decision = route(cluster, task.queue, task.pid)
    assert isinstance(decision, Owned)  # a call naming a pid always has one owner
    return decision


_IDENTITY_FIELDS = ("data", "enqueued_at", "sender", "receiver", "headers", "max_attempts")
"""What an enqueue gave a task and nothing after changes: two stored tasks of one queue and pid that
agree on these are copies of one task (a grow's copy, left by a run interrupted before it deleted the
old one); state that leasing changes (attempts, deliveries, the lease, progress) may differ."""


def same_task(one: Task, other: Task) -> bool:
    """Whether `one` and `other` (same queue and pid) are copies of one task (`_IDENTITY_FIELDS`)."""
    return (one.queue, one.pid) == (other.queue, other.pid) and not how_they_differ(one, other)


def how_they_differ(one: Task, other: Task) -> str:
    """The identity fields on which `one` and `other` differ, named ("" when none)."""
    return ", ".join(f"{name} differs" for name in _IDENTITY_FIELDS if getattr(one, name) != getattr(other, name))


def parted_join(cluster: ClusterMap, task: Task) -> str | None:
    """Why the join declaration `task` (of `_joins`) would be parted from its name under `cluster`:
    its name is in a named group another node owns than its job queue's group (declared before
    `shard_guard.join_together`); None when it is not a declaration or nothing parts them."""
    if task.queue != JOINS_QUEUE or GROUP_SEPARATOR not in task.pid:
        return None
    home = destination(cluster, task)
    by_name = route(cluster, task.pid)
    if home is None or not isinstance(by_name, Owned) or by_name.node == home.node:
        return None
    return (f"join {task.pid[:255]!r} is declared with its job queue {_join_job_queue(task.data)!r}, which the new "
            f"map puts on node {home.node!r}, but its name's group on node {by_name.node!r}, where drop_join, "
            "purge_join and declare_join would look for it: drop it on the old map and declare it again with "
            "its name in its job queue's group")


def keeps_lease(cluster: ClusterMap, task: Task, node: str) -> bool:
    """Whether `task`, moving to `node`, keeps its lease: the lease is still running or ran out
    unnoticed (`lease_expires_at` set) and `cluster` routes it to `node`."""
    if task.lease_expires_at is None:
        return True  # nothing to keep or drop
    return lease_route(cluster, task.queue, task.pid, task.lease_id).node == node


def drop_lease(task: Task) -> Task:
    """`task` available again, as `reject` leaves it: no lease, no holder, no attempt counted."""
    return dataclasses.replace(
        task, lease_id=0, lease_owner=None, lease_peer=None, leased_at=None, lease_expires_at=None)


def moved_task(cluster: ClusterMap, task: Task, node: str) -> Task:
    """`task` as it is written on `node`, its new home: its lease kept or dropped (module docstring)."""
    return task if keeps_lease(cluster, task, node) else drop_lease(task)


@dataclass(frozen=True)
class SlotRange:
    """Slots `first`..`last` (inclusive) go from node `source` to node `target`."""

    first: int
    last: int
    source: str
    target: str

    def __str__(self) -> str:
        slots = f"{self.first}" if self.first == self.last else f"{self.first}-{self.last}"
        return f"slots {slots}: {self.source} → {self.target}"

    @property
    def count(self) -> int:
        return self.last - self.first + 1


def moved_slots(old: ClusterMap, new: ClusterMap) -> list[SlotRange]:
    """The slots whose owner differs between `old` and `new` (same slot count), as maximal ranges
    of one old and one new owner, ascending."""
    if old.slots != new.slots:
        raise errors.BadRequest("maps with different slot counts share no slots")
    ranges: list[SlotRange] = []
    for slot, (before, after) in enumerate(zip(old.owners, new.owners, strict=True)):
        if before == after:
            continue
        last = ranges[-1] if ranges else None
        if last is not None and last.last == slot - 1 and (last.source, last.target) == (before, after):
            ranges[-1] = dataclasses.replace(last, last=slot)
        else:
            ranges.append(SlotRange(slot, slot, before, after))
    return ranges


def range_of(ranges: Sequence[SlotRange], slot: int) -> SlotRange | None:
    """The range of `ranges` (as `moved_slots` gives them) holding `slot`, if any."""
    low, high = 0, len(ranges)
    while low < high:
        middle = (low + high) // 2
        candidate = ranges[middle]
        if slot < candidate.first:
            high = middle
        elif slot > candidate.last:
            low = middle + 1
        else:
            return candidate
    return None


class _JobQueueOnly(msgspec.Struct):
    job_queue: str


_decode_job_queue = msgspec.msgpack.Decoder(_JobQueueOnly).decode


def _join_job_queue(data: bytes) -> str | None:
    """The job queue of a join's stored spec (`joins`: msgpack of `JoinSpec`), or None if unreadable."""
    try:
        return _decode_job_queue(data).job_queue
    except msgspec.DecodeError:
        return None

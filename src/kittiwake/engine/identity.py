"""Whose store this is: the cluster node (name and map epoch) a store was recorded for.

A cluster node's FIFO pids and lease ids name it (`ids`: residue classes), and its
store holds only the slots it owns, so a store must never be served by another node,
nor by a broker that is no node. The identity is kept where every store already keeps
broker-wide numbers: the `counters` table, written with the existing `SetCounter`
mutation and read back by `TaskStore.recover` (the engine keeps counters it does not
use in `EngineState.marks`). No store needed a new method or table, and `kittiwake
copy` carries the identity along with the rest.

One counter per (node, epoch) a store was recorded under, named
``cluster_node:<node>:<epoch>``; its value is the order in which they were
recorded (1, 2, ...), so the current identity is the one with the highest value,
and epochs recorded before are known. Counters only grow (`greatest` on a shared
PostgreSQL store), which suits this: a record is never changed, only added.

What `claim` decides, at a node's start (pure, before the node listens):

| the store records | the node starting | outcome |
| --- | --- | --- |
| nothing, holds no task | any | recorded |
| nothing, holds tasks | any | refused: ids issued before do not name this node (pids of FIFO tasks, lease ids) |
| node N, epoch E | N, E | nothing to do |
| node N, epoch E, holds no task | N, another epoch not seen before | the new epoch is recorded (nothing to move) |
| node N, epoch E, holds tasks | N, another epoch not seen before, of the placement recorded with E | the new epoch is recorded: only addresses or `tls` changed, every key stays on its node |
| node N, epoch E, holds tasks | N, another epoch not seen before, another placement (or none recorded with E) | refused: its tasks were placed by the map of E; `kittiwake cluster grow` moves them and records the new epoch |
| node N, epoch E | N, an epoch recorded before E | refused: the store moved on to a newer map |
| node N | another name M | refused, naming N and M |

A map's *placement* (`ClusterMap.placement`: its node names in order and its
slot count, which decide every slot's owner) is recorded beside each epoch, as
a counter ``cluster_placement:<epoch>:<placement>`` — also on a start with the
epoch already recorded, so a store recorded before placements were gets one at
its next start on its map.

`refuse_unrecorded` refuses a broker that is no node on a store recorded for
one (its ids would not name the node, and it would serve keys of slots other
nodes own). Every refusal is `errors.ClusterIdentity`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from kittiwake import errors
from kittiwake.engine.mutations import SetCounter

PREFIX = "cluster_node:"
"""Counter names of identities start with this (the engine's own counters never do)."""
PLACEMENT_PREFIX = "cluster_placement:"
"""Counter names of the placement recorded with an epoch start with this."""


@dataclass(frozen=True, slots=True)
class NodeIdentity:
    """A cluster node as a store records it: its name and the epoch of its map."""

    node: str
    epoch: str

    def __str__(self) -> str:
        return f"node {self.node!r} (epoch {self.epoch})"


@dataclass(frozen=True, slots=True)
class Recorded:
    """What a store says of its identity: the current one (None: never a node's) and every
    epoch recorded before, with the order of the last."""

    current: NodeIdentity | None
    epochs: frozenset[str]
    order: int


def counter_name(identity: NodeIdentity) -> str:
    return f"{PREFIX}{identity.node}:{identity.epoch}"


def recorded(marks: Mapping[str, int]) -> Recorded:
    """The identity the counters `marks` (a recovery's, or `EngineState.marks`) hold."""
    best: tuple[int, NodeIdentity] | None = None
    epochs: set[str] = set()
    for name, order in marks.items():
        if not name.startswith(PREFIX):
            continue
        node, sep, epoch = name[len(PREFIX):].rpartition(":")
        if not sep:
            continue
        identity = NodeIdentity(node, epoch)
        epochs.add(epoch)
        if best is None or order > best[0]:
            best = (order, identity)
    if best is None:
        return Recorded(None, frozenset(), 0)
    return Recorded(best[1], frozenset(epochs), best[0])


def placement_counter(epoch: str, placement: str) -> str:
    return f"{PLACEMENT_PREFIX}{epoch}:{placement}"


def placement_of(marks: Mapping[str, int], epoch: str) -> str | None:
    """The placement recorded with `epoch`, if any."""
    start = f"{PLACEMENT_PREFIX}{epoch}:"
    return next((name[len(start):] for name in marks if name.startswith(start)), None)


def claim(marks: Mapping[str, int], wanted: NodeIdentity, holds_tasks: bool, where: str,
          placement: str | None = None) -> list[SetCounter]:
    """The counters to write so the store records `wanted` (and `placement`, the wanted map's, beside
    its epoch), or `errors.ClusterIdentity` saying why it may not (the module docstring's table);
    `where` names the store in messages."""
    records = _claim(marks, wanted, holds_tasks, where, placement)
    if placement is not None and placement_of(marks, wanted.epoch) is None:
        records.append(SetCounter(placement_counter(wanted.epoch, placement), 1))
    return records


def _claim(marks: Mapping[str, int], wanted: NodeIdentity, holds_tasks: bool, where: str,
           placement: str | None) -> list[SetCounter]:
    found = recorded(marks)
    current = found.current
    if current is None:
        if holds_tasks:
            raise errors.ClusterIdentity(
                f"{where} holds tasks but was never a cluster node's: the FIFO pids and lease ids it issued "
                f"do not name node {wanted.node!r}, so clients would route them elsewhere. Start node "
                f"{wanted.node!r} on an empty store (and move tasks in through the cluster), or serve this "
                "store as a plain broker")
        return [SetCounter(counter_name(wanted), 1)]
    if current.node != wanted.node:
        raise errors.ClusterIdentity(
            f"{where} belongs to cluster node {current.node!r} (epoch {current.epoch}), not to node "
            f"{wanted.node!r}: start node {current.node!r} on it, or node {wanted.node!r} on its own store")
    if current.epoch == wanted.epoch:
        return []
    if wanted.epoch in found.epochs:
        raise errors.ClusterIdentity(
            f"{where} of node {wanted.node!r} moved on to the map of epoch {current.epoch}; this cluster "
            f"file is the older map of epoch {wanted.epoch}: start the node with the current cluster file")
    same_place = placement is not None and placement_of(marks, current.epoch) == placement
    if holds_tasks and not same_place:
        raise errors.ClusterIdentity(
            f"{where} of node {wanted.node!r} holds tasks placed by the map of epoch {current.epoch}, and this "
            f"cluster file is another map (epoch {wanted.epoch}) that no grow recorded here: the new map may "
            "route its tasks to other nodes, where nobody would find them. Stop every node, run `kittiwake "
            "cluster grow --from OLD.toml --to NEW.toml --store NAME=STORE ...`, then start the nodes on the new "
            "map (or start this node on the map of its epoch; a map that changes only addresses or tls is "
            "taken once the node has started on its current map since this check was made)")
    return [SetCounter(counter_name(wanted), found.order + 1)]


def refuse_unrecorded(marks: Mapping[str, int], where: str) -> None:
    """`errors.ClusterIdentity` when the store belongs to a cluster node: a broker that is no node
    may not serve it."""
    current = recorded(marks).current
    if current is not None:
        raise errors.ClusterIdentity(
            f"{where} belongs to cluster {current}: start it as that node "
            f"(kittiwake broker --cluster FILE --node {current.node})")

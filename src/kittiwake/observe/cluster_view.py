"""`GET /api/cluster`: the cluster page of a node — its map, its nodes' state, and what each holds.

Only a broker that is a cluster node serves it (`kittiwake broker --cluster FILE --node NAME
--http-port N`). The dashboard imports nothing of `kittiwake.cluster`: what the page shows comes
from a `cluster_source.ClusterSource`, plugged in from above by the composition root
(`cli/broker_command.build_faces`, with `kittiwake.cluster.dashboard.NodeDashboard`) and read here
only as plain records. The source owns how it learns about the peers (asking them over the
client, bounded and cached: see its module); this module owns who sees what and the shape of the
answer (`cluster_json`, pure):

* the map: this node, the epoch, the number of slots, and per node its address, its slots, whether
  it answered (`up`), the epoch it serves, when this node last heard from it (its last
  announcement, `last_heard_at`) and last reached it (`last_told_at`), and why it did not answer;
* what each node holds: its queues, tasks, available and leased tasks, and how many spread queues
  it is known to hold available tasks of (`holding`, this node's `holders` view);
* holders per spread queue: for each queue known to have available tasks somewhere, the nodes
  holding them, in name order, at most `MAX_HOLDER_QUEUES` (`holders_total` says how many there
  were);
* the load deviation: how far the worst node's tasks lie from the mean of the nodes that answered,
  in percent of the mean (as `kittiwake cluster status` computes it).

Who sees what: the map is what `cluster_map` tells any connection, so every principal sees it. A
queue's name, and the tasks it holds, are seen only by a principal with ADMIN on it, as in the
queue table (`reads.visibility`): the per-node figures and the load deviation sum the visible
queues only, and the holders list names visible queues only. A node whose queues go past what the
source reads of it (the source bounds the queues it reads per node) says so with `truncated`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from kittiwake.broker.access import Principal
from kittiwake.broker.http_server import HttpRequest
from kittiwake.observe.cluster_source import ClusterSnapshot, ClusterSource, NodeSnapshot
from kittiwake.observe.reads import Visible, visibility
from kittiwake.balance import load_deviation

if TYPE_CHECKING:
    from kittiwake.observe.registrar import Registrar

MAX_HOLDER_QUEUES = 200


def _node_json(node: NodeSnapshot, visible: Visible | None, holding: int) -> dict[str, Any]:
    queues = [row for row in node.queues if visible is None or visible(row.queue)]
    return {
        "name": node.name,
        "address": node.address,
        "slots": node.slots,
        "self": node.this,
        "up": node.up,
        "epoch": node.epoch,
        "last_heard_at": node.last_heard_at,
        "last_told_at": node.last_told_at,
        "announcing": node.announcing,
        "error": node.error,
        "queues": len(queues),
        "tasks": sum(row.tasks for row in queues),
        "available": sum(row.available for row in queues),
        "leased": sum(row.leased for row in queues),
        "holding": holding,
        "truncated": node.truncated,
    }


def cluster_json(snapshot: ClusterSnapshot, visible: Visible | None) -> dict[str, Any]:
    """The answer of `/api/cluster` for a principal whose visible queues are `visible` (None: all)."""
    held = sorted(queue for queue, nodes in snapshot.holders.items()
                  if nodes and (visible is None or visible(queue)))
    holding = {node.name: 0 for node in snapshot.nodes}
    for queue in held:
        for name in snapshot.holders[queue]:
            if name in holding:
                holding[name] += 1
    nodes = [_node_json(node, visible, holding[node.name]) for node in snapshot.nodes]
    up = [node for node in nodes if node["up"]]
    serving = {node["epoch"] for node in up}
    return {
        "node": snapshot.node,
        "epoch": snapshot.epoch,
        "slots": snapshot.slots,
        "asked_at": snapshot.asked_at,
        "nodes": nodes,
        "up": len(up),
        "healthy": len(up) == len(nodes) and serving == {snapshot.epoch},
        "tasks": sum(node["tasks"] for node in up),
        "load_deviation": round(load_deviation([node["tasks"] for node in up]), 2),
        "holders": [{"queue": queue, "nodes": list(snapshot.holders[queue])} for queue in held[:MAX_HOLDER_QUEUES]],
        "holders_total": len(held),
    }


def install(observer: Registrar, source: ClusterSource) -> None:
    async def handle(request: HttpRequest, principal: Principal | None) -> Any:
        return cluster_json(await source.snapshot(), visibility(principal))

    observer.add_json("/api/cluster", handle)

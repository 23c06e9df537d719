"""Where a worker process's tasks were leased from, on a cluster: the proof of local-first pops.

A lease over `kw://a,b,c` asks the worker's near node first (`--near`, `Client(near=...)`), then
a node known to hold tasks (`kittiwake.client.cluster_router`). Every lease id is issued by the
node that leased, in that node's residue class (`ClusterMap.node_of_id`), so the tasks a lease
returned tell which node served it with no extra request. `LeaseOrigins` tallies them per node
(thread-safe: one leaser thread per lease class); `report` is what the worker shows in its
registry record (``status()["routing"]``) and logs when it exits:

    {"near": "a", "leased_from": {"a": 118, "b": 3}, "local_share": 0.975,
     "lease_calls": 240, "lease_hops": 12}

``lease_calls`` and ``lease_hops`` are the client's `routing_stats` for leases (every lease,
empty long-polls included; hops are the round trips beyond the first). On one broker there is
no map and nothing is reported.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from kittiwake.cluster.cluster_map import ClusterMap
from kittiwake.protocol.replies import LeasedTask


class LeaseOrigins:
    """Tasks leased per node of the cluster, read off their lease ids."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._per_node: dict[str, int] = {}

    def count(self, cluster_map: ClusterMap | None, tasks: Sequence[LeasedTask]) -> None:
        """Count `tasks`, just leased, under the node whose residue their lease id carries."""
        if cluster_map is None:
            return
        with self._lock:
            for task in tasks:
                node = cluster_map.node_of_id(task.lease_id) or "?"
                self._per_node[node] = self._per_node.get(node, 0) + 1

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self._per_node)

    def report(self, near: str | None, client: Any) -> dict[str, Any] | None:
        """The routing part of the worker's status (module docstring); None off a cluster."""
        if near is None:
            return None
        leased = self.snapshot()
        total = sum(leased.values())
        stats = client.routing_stats()
        return {
            "near": near,
            "leased_from": leased,
            "local_share": round(leased.get(near, 0) / total, 4) if total else None,
            "lease_calls": stats.calls.get("lease", 0),
            "lease_hops": stats.hops.get("lease", 0),
        }

"""Counting what routing cost: calls, requests and hops per kind of call, requests per node.

A client call becomes a conversation of **steps**: each step is a set of requests sent together
(to one node, or to several at once: a fan-out, a split batch). **Hops** of a call are its steps
beyond the first: the extra round trips routing added. A keyed enqueue, a split batch and a
fan-out cost 0 hops; a lease answered by the local node 0; a lease that finds the local node
empty, asks `holders` and leases from a holder 2; a refetch of the map after `WRONG_SHARD` and
the retry 2 more. **Requests** count every request sent to a node (a fan-out to 3 nodes is 3).

`RoutingCounter` is the mutable tally (thread-safe: a blocking client's threads share it);
`RoutingStats` the snapshot a client returns (`Client.routing_stats()`).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class RoutingStats:
    """Totals since the client opened. `calls`, `requests` and `hops` are per kind of call (the
    op: "lease", "enqueue", …); `per_node` counts requests per node name."""

    calls: dict[str, int] = field(default_factory=dict)
    requests: dict[str, int] = field(default_factory=dict)
    hops: dict[str, int] = field(default_factory=dict)
    per_node: dict[str, int] = field(default_factory=dict)

    def hops_per_call(self, op: str) -> float:
        """The mean hops of calls of kind `op` (0.0 before any)."""
        calls = self.calls.get(op, 0)
        return self.hops.get(op, 0) / calls if calls else 0.0


class RoutingCounter:
    """The running tally behind `RoutingStats`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._calls: dict[str, int] = {}
        self._requests: dict[str, int] = {}
        self._hops: dict[str, int] = {}
        self._per_node: dict[str, int] = {}

    def record(self, op: str, steps: int, nodes: Iterable[str]) -> None:
        """One call of kind `op` took `steps` steps and sent one request to each of `nodes`."""
        with self._lock:
            self._calls[op] = self._calls.get(op, 0) + 1
            self._hops[op] = self._hops.get(op, 0) + max(0, steps - 1)
            for node in nodes:
                self._requests[op] = self._requests.get(op, 0) + 1
                self._per_node[node] = self._per_node.get(node, 0) + 1

    def snapshot(self) -> RoutingStats:
        with self._lock:
            return RoutingStats(dict(self._calls), dict(self._requests), dict(self._hops), dict(self._per_node))

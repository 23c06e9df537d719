"""What a client says of the cluster it routes over, the same for `Client` and `AsyncClient`.

Read without I/O from the client's channel: a cluster channel (`ClusterChannel`,
`AsyncClusterChannel`) has a `router` and `routing_stats`; a channel of one broker has neither,
and a client of one broker answers None or an empty record.
"""

from __future__ import annotations

from typing import Any

from kittiwake.cluster.cluster_map import ClusterMap
from kittiwake.cluster.routing_stats import RoutingStats


class ClusterView:
    """`cluster_map`, `near` and `routing_stats` of a client whose channel is `_channel`."""

    _channel: Any

    @property
    def cluster_map(self) -> ClusterMap | None:
        """The map of the cluster this client routes over, as last fetched (None before the first
        call, and for a client of one broker)."""
        router = getattr(self._channel, "router", None)
        return None if router is None else router.cluster_map

    @property
    def near(self) -> str | None:
        """The node of a cluster this client's leases ask first (None for a client of one broker,
        or before the map is known)."""
        router = getattr(self._channel, "router", None)
        return (router.near or None) if router is not None else None

    def routing_stats(self) -> RoutingStats:
        """What routing cost since the client opened: calls, requests and hops per kind of call,
        requests per node (`kittiwake.cluster.routing_stats` defines them). A client of one
        broker routes nothing: its record is empty."""
        routed = getattr(self._channel, "routing_stats", None)
        return routed() if callable(routed) else RoutingStats()

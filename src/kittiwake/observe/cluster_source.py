"""What the dashboard's cluster page reads of a node's cluster: `ClusterSource` and its plain records.

A seam, so the dashboard (`kittiwake.observe`) imports nothing of `kittiwake.cluster`: a cluster
node's composition root builds a source (`kittiwake.cluster.dashboard.NodeDashboard`) and hands it
to `ObserveFace`; `cluster_view` turns what it gives into `/api/cluster` for each principal. The
records carry every queue the source read, names included: who may see which is decided by
`cluster_view`, never here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True, slots=True)
class QueueCounts:
    """One queue of one node: its tasks, those available to lease, those leased."""

    queue: str
    tasks: int
    available: int
    leased: int


@dataclass(frozen=True, slots=True)
class NodeSnapshot:
    """One node of the map as this node sees it."""

    name: str
    address: str
    slots: int
    this: bool
    """The node serving the page."""
    up: bool
    """It answered when last asked (this node always does)."""
    epoch: str | None = None
    """The epoch it serves, as it answered; None when it did not answer."""
    last_heard_at: float | None = None
    """Epoch seconds of its last announcement to this node; None: not since this node started."""
    last_told_at: float | None = None
    """Epoch seconds this node's announcements last reached it."""
    announcing: str | None = None
    """How this node's announcements to it stand: "in sync", "behind" (a full refresh is due)."""
    error: str | None = None
    queues: Sequence[QueueCounts] = ()
    truncated: bool = False
    """It holds more queues than were read of it: its figures cover the first ones by name."""


@dataclass(frozen=True, slots=True)
class ClusterSnapshot:
    node: str
    epoch: str
    slots: int
    nodes: Sequence[NodeSnapshot]
    holders: Mapping[str, Sequence[str]] = field(default_factory=dict)
    """Spread queue -> nodes known to hold available tasks of it."""
    asked_at: float | None = None
    """Epoch seconds the peers were asked."""


class ClusterSource(Protocol):
    """What the cluster page reads (see the module docstring)."""

    @property
    def node(self) -> str: ...  # the node serving the page

    async def snapshot(self) -> ClusterSnapshot:
        """The cluster as this node sees it now (the source bounds and caches what it asks)."""

    async def close(self) -> None:
        """Let go of what it holds open (the broker stops)."""

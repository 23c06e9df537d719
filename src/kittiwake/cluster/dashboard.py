"""A node's view of its cluster for the dashboard's cluster page (`/api/cluster`).

`NodeDashboard` is the `kittiwake.observe.cluster_source.ClusterSource` of a node: the composition
root (`cli/broker_command.build_faces`) builds it over the `node.ClusterNode` when a node also
serves `--http-port`, and the dashboard reads it without importing this package.

What it tells, and where each piece comes from:

* the map (nodes, addresses, slots per node, the epoch): the node's own map;
* when this node last heard from each peer (the peer's last `announce`, `ClusterNode.heard_at`) and
  last reached it (the announcer's last delivered announcement, or why it failed);
* which nodes hold available tasks of each spread queue: the node's `holdings` (its own engine
  plus what the peers announced), as `holders` answers;
* what each node holds per queue (tasks, available, leased): this node's from its engine; the
  peers' **asked of them over the client**, not announced. Announcements carry which queues flip,
  not counts, and the page must drop the queues a viewer may not see before it sums, which needs
  per-queue rows; announcing them would cost every commit something for a page nobody may be
  looking at. So a page load asks each peer `cluster_map` (up, and the epoch it serves), then
  `list_queues` (at most `QUEUES_PER_NODE` names) and `stats` of those names with no lease sample
  — as the announcer reaches them (`announcer.peer_address`: the node's own credentials,
  `--cluster-user`, and TLS on a map that says so), one connection per peer, all peers at once,
  each within `ASK_TIMEOUT_SECS`.

Bounded so a refresh cannot turn into a fan-out storm: one round of asking at a time (concurrent
page loads wait for the same round) and its answer is reused for `CACHE_SECS`; so the peers are
asked at most once per `CACHE_SECS` per node, however many pages are open, and a peer that does
not answer costs one timeout per round. A node with more queues than `QUEUES_PER_NODE` is shown
from its first ones by name (`truncated`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import replace

from kittiwake import errors
from kittiwake.client.async_client import AsyncClient
from kittiwake.client.calls import Call, request
from kittiwake.cluster.announcer import peer_address
from kittiwake.cluster.cluster_map import ClusterMap
from kittiwake.cluster.node import ClusterNode
from kittiwake.engine import inspection
from kittiwake.observe.cluster_source import ClusterSnapshot, NodeSnapshot, QueueCounts
from kittiwake.protocol.replies import ClusterMapResult, result_decoder

CACHE_SECS = 1.0
ASK_TIMEOUT_SECS = 1.0
CONNECT_TIMEOUT_SECS = 0.5
QUEUES_PER_NODE = 2000


class NodeDashboard:
    """The cluster page's source on a node (see the module docstring)."""

    def __init__(
        self, node: ClusterNode, *, cache_secs: float = CACHE_SECS,
        clock: Callable[[], float] = time.monotonic, wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.cluster_node = node
        self.cache_secs = cache_secs
        self.clock = clock
        self.wall_clock = wall_clock
        self._clients: dict[str, AsyncClient] = {}
        self._cached: ClusterSnapshot | None = None
        self._cached_at = 0.0
        self._round: asyncio.Future[ClusterSnapshot] | None = None
        self.rounds = 0  # rounds of asking the peers (tests count them)

    @property
    def node(self) -> str:
        return self.cluster_node.node

    async def snapshot(self) -> ClusterSnapshot:
        if self._cached is not None and self.clock() - self._cached_at < self.cache_secs:
            return self._cached
        if self._round is None:
            self._round = asyncio.ensure_future(self._ask())
            self._round.add_done_callback(self._settled)
        return await asyncio.shield(self._round)

    def _settled(self, round_: asyncio.Future[ClusterSnapshot]) -> None:
        self._round = None
        if not round_.cancelled() and round_.exception() is None:
            self._cached = round_.result()
            self._cached_at = self.clock()

    async def close(self) -> None:
        if self._round is not None:
            self._round.cancel()
        await asyncio.gather(*(client.close() for client in self._clients.values()), return_exceptions=True)
        self._clients.clear()

    # -------------------------------------------------------------- asking

    async def _ask(self) -> ClusterSnapshot:
        self.rounds += 1
        node = self.cluster_node
        cluster = node.cluster
        asked_at = self.wall_clock()
        peers = [peer.name for peer in cluster.nodes if peer.name != node.node]
        answers = await asyncio.gather(*(self._ask_peer(name) for name in peers))
        found = dict(zip(peers, answers, strict=True))
        nodes = [self._own(cluster) if peer.name == node.node else found[peer.name] for peer in cluster.nodes]
        holdings = node.holdings
        queues = set(holdings.local).union(*holdings.peer_holdings(asked_at).values())
        return ClusterSnapshot(
            node=node.node, epoch=cluster.epoch, slots=cluster.slots, nodes=nodes,
            holders={queue: names for queue, names in holdings.holders(sorted(queues), asked_at).items() if names},
            asked_at=asked_at,
        )

    def _own(self, cluster: ClusterMap) -> NodeSnapshot:
        name = self.cluster_node.node
        base = NodeSnapshot(name, str(cluster.address_of(name)), len(cluster.slots_of(name)), this=True, up=False,
                            epoch=cluster.epoch)
        engine = self.cluster_node.reads()
        if engine is None:
            return replace(base, error="the store has failed: no reads until it recovers")
        rows = inspection.list_queues(engine.state, None, 0, QUEUES_PER_NODE + 1)
        states = engine.state.queues
        counts = []
        for row in rows[:QUEUES_PER_NODE]:
            queue = states[row.queue]
            leased = len(queue.leased)
            counts.append(QueueCounts(row.queue, queue.size, queue.size - leased - queue.blocked, leased))
        return replace(base, up=True, queues=counts, truncated=len(rows) > QUEUES_PER_NODE)

    async def _ask_peer(self, name: str) -> NodeSnapshot:
        node = self.cluster_node
        cluster = node.cluster
        announcer = node.announcer
        peer = announcer.peers.get(name) if announcer is not None else None
        base = NodeSnapshot(
            name, str(cluster.address_of(name)), len(cluster.slots_of(name)), this=False, up=False,
            last_heard_at=node.heard_at.get(name), last_told_at=peer.told_at if peer is not None else None,
            announcing=None if peer is None else ("in sync" if peer.synced else "behind"),
        )
        try:
            async with asyncio.timeout(ASK_TIMEOUT_SECS):  # not wait_for: on 3.11 it can swallow a cancel
                epoch, counts, truncated = await self._read_peer(name)
        except TimeoutError:
            return replace(base, error=f"no answer within {ASK_TIMEOUT_SECS:g} s")
        except errors.KittiwakeError as exc:
            return replace(base, error=f"{exc.code}: {exc.message}")
        except OSError as exc:
            return replace(base, error=str(exc) or type(exc).__name__)
        return replace(base, up=True, epoch=epoch, queues=counts, truncated=truncated)

    async def _read_peer(self, name: str) -> tuple[str | None, Sequence[QueueCounts], bool]:
        client = self._client(name)
        found: ClusterMapResult = await client._run(
            Call(request("cluster_map", {}), result_decoder("cluster_map")), ASK_TIMEOUT_SECS)
        rows = await client.list_queues(limit=QUEUES_PER_NODE + 1, timeout=ASK_TIMEOUT_SECS)
        names = [row.queue for row in rows[:QUEUES_PER_NODE]]
        stats = await client.stats(names, sample=0, timeout=ASK_TIMEOUT_SECS) if names else []
        counts = [QueueCounts(row.queue, row.size, row.available, row.leased) for row in stats]
        return (found.epoch if found.node is not None else None), counts, len(rows) > QUEUES_PER_NODE

    def _client(self, name: str) -> AsyncClient:
        client = self._clients.get(name)
        if client is None:
            node = self.cluster_node
            client = AsyncClient(peer_address(node.cluster, name, node.credentials, node.ca_file),
                                 connect_timeout=CONNECT_TIMEOUT_SECS, timeout=ASK_TIMEOUT_SECS)
            self._clients[name] = client
        return client

"""A broker as a cluster node: `kittiwake broker --cluster FILE --node NAME`.

`ClusterNode` is the broker's request extension (`kittiwake.broker.extensions`)
that makes a broker a node of a cluster, plugged in from above by the
composition root as faces are; the broker core imports nothing of
`kittiwake.cluster`. What it adds:

* **Identity.** At start it claims the store for (node, epoch)
  (`engine.identity`: recorded in the store's counters; another node's store,
  an older map, or a store holding tasks from before it was a node are
  refused with CLUSTER_IDENTITY).
* **Ids.** The node at index `i` of the map issues FIFO pids and lease ids
  equal to `i` modulo `cluster_map.ID_STRIDE` (`id_class`), so an id names
  its node.
* **WRONG_SHARD.** Every request, from any face, is checked in the
  group-commit pass before it runs (`shard_guard.refusal`).
* **Ops.** `cluster_map` (the map and this node's name: any connection may
  ask), `holders` (this node's view of who holds available tasks of spread
  queues, itself first) and `announce` (a peer's flips: refused with
  WRONG_SHARD and our epoch when its epoch differs, BAD_REQUEST from a name
  not in the map or our own, or with an instance id over
  `holdings.MAX_INSTANCE_CHARS`). With an auth file, `announce` needs admin on
  every queue (a grant on `*`, `broker.access`); the node's own credentials
  for its peers are given with `--cluster-user` and `--cluster-token`. On a
  map with `tls = true` it reaches its peers over TLS, verifying their
  certificates against `--cluster-ca` (else the system's CAs).
* **Holdings.** After each committed pass, the spread queues the pass
  touched (its tally) are looked up in the engine (available = size - leased
  - blocked) and their flips go to the peers (`announcer`), coalesced, under
  this broker process's own instance id (`instance`, random at start), so the
  brokers of one node sharing a PostgreSQL schema each keep their own entry in
  a peer's view (`holdings`).
* **Metrics.** Every series carries `node="NAME"` (`labels`).

The client learns which node answered from `cluster_map` (`node`), asked on
the connection it uses: every node answers it.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from kittiwake import errors
from kittiwake.cluster.announcer import REFRESH_SECS, Announcer
from kittiwake.cluster.cluster_map import ID_STRIDE, ClusterMap
from kittiwake.cluster.holdings import MAX_INSTANCE_CHARS, MAX_INSTANCES, STALE_REFRESHES, Holdings, is_spread
from kittiwake.cluster.shard_guard import refusal
from kittiwake.engine import Engine, identity
from kittiwake.engine.mutations import Mutation
from kittiwake.engine.tally import Tally
from kittiwake.model import validate_count
from kittiwake.protocol import messages as m
from kittiwake.protocol.replies import AnnounceResult, ClusterMapResult, HoldersResult
from kittiwake.protocol.replies import ClusterNode as WireNode

if TYPE_CHECKING:
    from kittiwake.broker.dispatch import Handler
    from kittiwake.broker.faces import Host

log = logging.getLogger("kittiwake.cluster")


class ClusterNode:
    """One node of a cluster, as a request extension of its broker (see the module docstring)."""

    def __init__(
        self,
        cluster: ClusterMap,
        node: str,
        *,
        credentials: tuple[str, str] | None = None,
        ca_file: str | None = None,
        refresh_secs: float = REFRESH_SECS,
    ) -> None:
        self.index = cluster.index_of(node)  # refuses a name not in the map
        self.cluster = cluster
        self.node = node
        self.credentials = credentials
        self.ca_file = ca_file  # verifies the peers' certificates when the map says tls = true
        self.refresh_secs = refresh_secs
        self.instance = secrets.token_hex(8)  # this broker process, in its announcements
        self.holdings = Holdings(node, cluster.node_names, stale_secs=STALE_REFRESHES * refresh_secs)
        self.heard: dict[str, set[str]] = {}  # peer -> its broker processes (instances) heard since we started
        self.heard_at: dict[str, float] = {}  # peer -> epoch seconds of its last announcement
        self.announcer: Announcer | None = None
        self._host: Host | None = None
        self._unsubscribe: Callable[[], None] | None = None
        self._wire_map = ClusterMapResult(
            node=node, epoch=cluster.epoch, slots=cluster.slots,
            nodes=[WireNode(peer.name, str(peer.address)) for peer in cluster.nodes], tls=cluster.tls,
        )

    # ----------------------------------------------------- the extension

    @property
    def description(self) -> str:
        owned = len(self.cluster.slots_of(self.node))
        return (f"cluster node {self.node!r} ({self.index + 1} of {len(self.cluster.nodes)}, epoch "
                f"{self.cluster.epoch}, {owned} of {self.cluster.slots} slots)")

    @property
    def id_class(self) -> tuple[int, int]:
        return (self.index, ID_STRIDE)

    @property
    def labels(self) -> Mapping[str, str]:
        return {"node": self.node}

    def ops(self) -> Mapping[type[m.Request], Handler]:
        return {m.ClusterMapRequest: self._cluster_map, m.Holders: self._holders, m.Announce: self._announce}

    def check(self, request: m.Request) -> None:
        error = refusal(self.cluster, self.node, request)
        if error is not None:
            raise error

    def claim_store(self, marks: Mapping[str, int], holds_tasks: bool, where: str) -> list[Mutation]:
        wanted = identity.NodeIdentity(self.node, self.cluster.epoch)
        return list(identity.claim(marks, wanted, holds_tasks, where, self.cluster.placement))

    async def start(self, host: Host) -> None:
        self._host = host
        self._observe_all()
        self._unsubscribe = host.on_commit(self._committed)
        self.announcer = Announcer(self.cluster, self.node, self.holdings, credentials=self.credentials,
                                   ca_file=self.ca_file, refresh_secs=self.refresh_secs, before_full=self._observe_all,
                                   instance=self.instance)
        self.announcer.start()

    async def stop(self) -> None:
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        if self.announcer is not None:
            await self.announcer.stop()

    def reads(self) -> Engine | None:
        """The broker's engine between passes (None before start or while the store has failed)."""
        return self._host.reads() if self._host is not None else None

    # ------------------------------------------------------------ commits

    def _observe_all(self) -> None:
        """Every spread queue's holding recomputed from the engine (at start and before each full
        refresh): a change no committed pass's tally names is caught here."""
        engine = self.reads()
        if engine is not None:
            self.holdings.observe_all(_available(engine, engine.state.queues))

    def _committed(self, tally: Tally, commit_secs: float | None) -> None:
        """After a committed pass: the touched spread queues' holdings; flips wake the announcer."""
        host = self._host
        engine = host.reads() if host is not None else None
        if engine is None:
            return
        touched = [queue for queue in (*tally.counts, *tally.dropped) if is_spread(queue)]
        if not touched:
            return
        self.holdings.observe(_available(engine, touched))
        if self.holdings.has_flips and self.announcer is not None:
            self.announcer.flips_ready.set()

    # ---------------------------------------------------------------- ops

    def _cluster_map(self, engine: Engine, request: m.ClusterMapRequest, peer: str | None, now: float) -> Any:
        return self._wire_map

    def _holders(self, engine: Engine, request: m.Holders, peer: str | None, now: float) -> Any:
        validate_count(len(request.queues), "queues", 0, engine.limits.max_batch)
        return HoldersResult(epoch=self.cluster.epoch, holders=self.holdings.holders(request.queues, now))

    def _announce(self, engine: Engine, request: m.Announce, peer: str | None, now: float) -> Any:
        if request.epoch != self.cluster.epoch:
            raise errors.WrongShard(
                f"node {self.node!r} runs the cluster map of epoch {self.cluster.epoch}, not {request.epoch[:64]!r}",
                epoch=self.cluster.epoch)
        if not self.holdings.is_peer(request.node):
            raise errors.BadRequest(
                f"node {request.node[:64]!r} is not a peer of node {self.node!r} in the cluster map "
                f"(nodes: {', '.join(self.cluster.node_names)})")
        if len(request.instance) > MAX_INSTANCE_CHARS:
            raise errors.BadRequest(f"an announcement's instance id has at most {MAX_INSTANCE_CHARS} characters, "
                                    f"not {len(request.instance):,}")
        self.holdings.apply(request.node, request.holding, request.empty, request.full,
                            instance=request.instance, now=now)
        # a process of the peer not heard before (the peer restarted, or a sibling serving it did):
        # it knows nothing of us yet, so it gets our full holdings at once, not at the next refresh
        instances = self.heard.setdefault(request.node, set())
        first = request.instance not in instances
        if first and len(instances) >= MAX_INSTANCES:
            instances.clear()  # bounded: at worst one more full announcement to a process heard before
        instances.add(request.instance)
        self.heard_at[request.node] = now
        if self.announcer is not None:
            self.announcer.heard_from(request.node, first)
        return AnnounceResult(node=self.node)


def _available(engine: Engine, queues: Any) -> dict[str, int]:
    """Available tasks of each of `queues` (names) as the engine holds them now: 0 when gone."""
    states = engine.state.queues
    counts: dict[str, int] = {}
    for name in queues:
        if not is_spread(name):
            continue
        queue = states.get(name)
        counts[name] = 0 if queue is None else queue.size - len(queue.leased) - queue.blocked
    return counts

"""The state of a cluster's nodes, as `kittiwake cluster status` shows it.

Each node is asked, as a plain single broker (`kw://host:port`, one connection each), for `ping`
(up or down), `cluster_map` (the epoch it serves; a broker answering UNKNOWN_OP, or a map naming no
node, is "not a node": epoch None) and `stats` of every queue: its tasks are the sum of the
queues' sizes (dead letters and delayed entries are queues of their own, so counted once), with
available and leased beside, and its rates the sums of the queues' 1-minute enqueue and dequeue
rates (tasks per second). Slots come from the map.

The summary (`summarize`, pure) gives the load deviation — how far the worst node's tasks lie from
the mean of the nodes that answered, in percent of the mean (0 when they hold nothing) — and whether
the cluster is healthy: every node up and serving the same epoch as the map.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from kittiwake import errors
from kittiwake.cluster.cluster_map import Address, ClusterMap, Node
from kittiwake.balance import load_deviation


@dataclass
class NodeStatus:
    """One node as it answered (or did not)."""

    name: str
    address: str
    up: bool = False
    epoch: str | None = None
    """The epoch the node serves; None when down or not a node."""
    node: bool = False
    """Whether it answered `cluster_map` as a node of a cluster."""
    slots: int | None = None
    tasks: int = 0
    available: int = 0
    leased: int = 0
    queues: int = 0
    enqueue_per_s: float = 0.0
    dequeue_per_s: float = 0.0
    error: str | None = None
    """Why the node is down or half-answered."""


@dataclass
class ClusterStatus:
    nodes: list[NodeStatus]
    epoch: str | None
    """The map's epoch (the cluster file's, or the one the first node to answer serves)."""
    epochs_agree: bool
    load_deviation: float
    """Percent: the worst up node's tasks against the mean of the up nodes."""
    tasks: int = 0
    healthy: bool = False
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def summarize(nodes: list[NodeStatus], epoch: str | None) -> ClusterStatus:
    """The cluster's figures from its nodes' answers; `epoch` the map's (None when unknown)."""
    up = [node for node in nodes if node.up]
    served = {node.epoch for node in up}
    agree = bool(up) and len(served) == 1 and None not in served and (epoch is None or served == {epoch})
    notes: list[str] = []
    down = [node.name for node in nodes if not node.up]
    if down:
        notes.append(f"down: {', '.join(down)}")
    strangers = [node.name for node in up if not node.node]
    if strangers:
        notes.append(f"not cluster nodes (plain brokers): {', '.join(strangers)}")
    if up and not agree:
        serving = ", ".join(f"{node.name} {node.epoch or 'none'}" for node in up)
        notes.append(f"epochs disagree: {serving}" + (f" (the map's is {epoch})" if epoch is not None else ""))
    return ClusterStatus(
        nodes=nodes,
        epoch=epoch if epoch is not None else next(iter(sorted(e for e in served if e is not None)), None),
        epochs_agree=agree,
        load_deviation=round(load_deviation([node.tasks for node in up]), 2),
        tasks=sum(node.tasks for node in up),
        healthy=agree and not down,
        notes=notes,
    )


# ------------------------------------------------------------ asking the nodes


def node_urls(url: str) -> tuple[str, str, list[str]]:
    """A cluster URL `kw[s]://[user:token@]h1:p1,h2:p2[?ca=…]` split into its scheme, its
    credentials part (`user:token@` or "") and its addresses, and the query kept on the scheme's side
    ("kws" + "?ca=…" is given back as the second element's suffix: see `url_of`)."""
    scheme, sep, rest = url.partition("://")
    if not sep or scheme not in ("kw", "kws"):
        raise errors.BadRequest(f"cluster URL must look like kw://host:port,host:port (got scheme {scheme!r})")
    rest, _, query = rest.partition("?")
    userinfo, at, hosts = rest.rpartition("@")
    addresses = [part.strip() for part in hosts.rstrip("/").split(",") if part.strip()]
    if not addresses:
        raise errors.BadRequest("cluster URL names no node")
    for address in addresses:
        Address.parse(address)  # BadRequest naming what is wrong
    return scheme, (userinfo + at) + ("?" + query if query else ""), addresses


def url_of(scheme: str, credentials: str, address: str) -> str:
    """The single-broker URL of one node: `credentials` as `node_urls` gives it."""
    userinfo, _, query = credentials.partition("?")
    return f"{scheme}://{userinfo}{address}" + (f"?{query}" if query else "")


Probe = Callable[[str, str], tuple[Any, Any, list[Any]]]
"""Asks the broker at a URL (and a name for messages) for ping, cluster_map and stats; raises on failure."""


def probe_with_client(timeout: float) -> Probe:
    """A probe over `kittiwake.client.Client` (one connection per node, closed after)."""
    from kittiwake.client import Client
    from kittiwake.client.calls import Call, request
    from kittiwake.protocol.replies import ClusterMapResult, result_decoder

    cluster_map_call: Call[ClusterMapResult] = Call(request("cluster_map", {}), result_decoder("cluster_map"))

    def probe(url: str, name: str) -> tuple[Any, Any, list[Any]]:
        with Client(url, connect_timeout=timeout, timeout=timeout) as client:
            client.ping()
            try:
                # `Client` has no cluster_map method yet (branch cclient adds the cluster channel)
                found: Any = client._run(cluster_map_call, timeout)
            except errors.UnknownOperation:
                found = None
            return True, found, client.stats()

    return probe


def cluster_from_answer(found: Any) -> ClusterMap | None:
    """The map a node's `cluster_map` answer describes, or None when it names no node."""
    if found is None or not found.nodes:
        return None
    nodes = tuple(Node(entry.name, Address.parse(entry.address)) for entry in found.nodes)
    return ClusterMap(nodes, found.slots)


def gather(
    members: Sequence[tuple[str, str]], cluster: ClusterMap | None, url_for: Callable[[str], str], probe: Probe,
) -> list[NodeStatus]:
    """The status of each (name, address) of `members`, asked through `probe` at `url_for(address)`."""
    statuses: list[NodeStatus] = []
    for name, address in members:
        status = NodeStatus(name, address)
        if cluster is not None and name in cluster.node_names:
            status.slots = len(cluster.slots_of(name))
        try:
            _, found, stats = probe(url_for(address), name)
        except errors.KittiwakeError as exc:
            status.error = f"{exc.code}: {exc.message}"
            statuses.append(status)
            continue
        except OSError as exc:
            status.error = str(exc)
            statuses.append(status)
            continue
        status.up = True
        if found is not None and found.node is not None:
            status.node = True
            status.epoch = found.epoch
        for queue in stats:
            status.queues += 1
            status.tasks += queue.size
            status.available += queue.available
            status.leased += queue.leased
            status.enqueue_per_s += queue.enqueue_rate_1m
            status.dequeue_per_s += queue.dequeue_rate_1m
        status.enqueue_per_s = round(status.enqueue_per_s, 3)
        status.dequeue_per_s = round(status.dequeue_per_s, 3)
        statuses.append(status)
    return statuses

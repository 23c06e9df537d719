"""`ClusterChannel`: the blocking `Channel` of a cluster (`kw://a:1,b:2,c:3`), thread-safe.

The routing is the router's (`cluster_router.Router`, sans-IO: which nodes, how answers merge);
this module only sends each step's requests, one after the other, over one `ConnectionPool` per
node (opened on first use) and hands the outcomes back. Also here, the I/O the router is spared:
whether a host is this machine's (`is_local_host`, for the default near node) and reading a
cluster file named by path.

A node's pool gives up connecting after `NODE_CONNECT_TIMEOUT_SECS` (or the client's connect
timeout if shorter) for a call only that node can serve (a keyed call: it then raises
`BrokerUnreachable`, which callers retry), and after `QUICK_CONNECT_SECS` for one another node can
serve (`Send.quick`: leases, `holders`, FIFO pushes). A node that is down costs a lease or a FIFO
push that short connect, and is then skipped for `cluster_router.DOWN_SECS`; a keyed call to it
meanwhile gets the short connect too (`Send.down`). A refused connect is retried within the
budget, since pools retry a refused connect while a broker restarts.
"""

from __future__ import annotations

import functools
import ipaddress
import os
import socket
import threading
import time
from collections.abc import Callable, Generator
from typing import Any, TypeVar, cast

from kittiwake import errors
from kittiwake.client.calls import Call
from kittiwake.client.cluster_router import AGAIN, Router, Send, Step
from kittiwake.client.pool import DEFAULT_MAX_IDLE_CONNECTIONS, ConnectionPool
from kittiwake.client.url import SCHEME, TLS_SCHEME, BrokerAddress, parse_url
from kittiwake.client.wire import DEFAULT_MAX_REPLY_BYTES
from kittiwake.cluster.cluster_map import Address, ClusterMap
from kittiwake.cluster.routing_stats import RoutingStats

T = TypeVar("T")

NODE_CONNECT_TIMEOUT_SECS = 2.0
QUICK_CONNECT_SECS = 0.25

ClusterMapLike = ClusterMap | str | os.PathLike[str]
"""A cluster map, or the path of a cluster file (TOML)."""


def load_cluster_map(value: ClusterMapLike) -> ClusterMap:
    """The map itself, or the map of the cluster file at a path."""
    if isinstance(value, ClusterMap):
        return value
    try:
        with open(value, encoding="utf-8") as file:
            return ClusterMap.from_toml(file.read())
    except OSError as exc:
        raise errors.BadRequest(f"cannot read the cluster file {os.fspath(value)!r}: {exc}") from None


def address_of_map(cluster_map: ClusterMap, template: BrokerAddress | None = None) -> BrokerAddress:
    """A cluster address naming every node of the map (credentials and TLS from `template`; without
    one, TLS when the map says `tls = true`, verified against the system's CAs or `$KITTIWAKE_CA`)."""
    first, *rest = cluster_map.nodes
    address = template.at(first.address.host, first.address.port) if template else parse_url(
        f"{TLS_SCHEME if cluster_map.tls else SCHEME}://{first.address}"
    )
    return BrokerAddress(
        address.host, address.port, user=address.user, token=address.token, tls=address.tls,
        ca_file=address.ca_file, peers=tuple((node.address.host, node.address.port) for node in rest),
    )


@functools.lru_cache(maxsize=256)
def is_local_host(host: str) -> bool:
    """Whether `host` is this machine: a loopback address, or one of the addresses its own host
    name resolves to. A name that does not resolve is not local."""
    try:
        addresses = {info[4][0] for info in socket.getaddrinfo(host, None)}
    except OSError:
        return False
    if any(ipaddress.ip_address(str(address).split("%")[0]).is_loopback for address in addresses):
        return True
    return bool(addresses & _own_addresses())


@functools.lru_cache(maxsize=1)
def _own_addresses() -> frozenset[str]:
    try:
        return frozenset(str(info[4][0]) for info in socket.getaddrinfo(socket.gethostname(), None))
    except OSError:
        return frozenset()


def connect_budget(send: Send, budget_secs: float) -> float:
    """The connect budget of a send: short when another node can serve it (`Send.quick`) or its
    node could not be reached a moment ago (`Send.down`)."""
    return min(budget_secs, QUICK_CONNECT_SECS) if send.quick or send.down else budget_secs


def drive(conversation: Generator[Step, list[Any], T], send_step: Callable[[Step], list[Any]]) -> T:
    """Run a router conversation to its result, sending each step with `send_step`."""
    try:
        step = next(conversation)
        while True:
            step = conversation.send(send_step(step))
    except StopIteration as stop:
        result: T = stop.value
        return result


def make_router(address: BrokerAddress, cluster_map: ClusterMap | None, near: str | None) -> Router:
    """The router of a cluster client: the URL's nodes as seeds, the map if given."""
    return Router(
        seeds=[Address(host, port) for host, port in address.hosts],
        cluster_map=cluster_map,
        near=near,
        is_local=is_local_host,
        clock=time.monotonic,
        near_seed=os.getpid(),  # processes on a host with several nodes spread over them
        tls=address.tls,
    )


class ClusterChannel:
    """Blocking requests to the nodes of a cluster, routed per call."""

    def __init__(
        self,
        address: BrokerAddress,
        *,
        connect_timeout_secs: float,
        max_idle: int = DEFAULT_MAX_IDLE_CONNECTIONS,
        max_reply_bytes: int = DEFAULT_MAX_REPLY_BYTES,
        cluster_map: ClusterMap | None = None,
        near: str | None = None,
    ) -> None:
        self._address = address
        self._connect_timeout_secs = min(connect_timeout_secs, NODE_CONNECT_TIMEOUT_SECS)
        self._max_idle = max_idle
        self._max_reply_bytes = max_reply_bytes
        self._router = make_router(address, cluster_map, near)
        self._pools: dict[Address, ConnectionPool] = {}
        self._lock = threading.Lock()
        self._closed = False

    @property
    def address(self) -> BrokerAddress:
        return self._address

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def router(self) -> Router:
        return self._router

    def request(self, call: Call[T], timeout_secs: float | None) -> T:
        router = self._router
        send = router.direct(call, timeout_secs)  # one node, decided at once (`Router.direct`)
        if send is None:
            return drive(router.conversation(call, timeout_secs), self._send_step)
        outcome = self._send(send)
        result = router.settle(send, outcome)
        if result is not AGAIN:
            return cast(T, result)
        return drive(router.conversation(call, timeout_secs, tried=(send, outcome)), self._send_step)

    def per_node(self, call: Call[T], timeout_secs: float | None) -> dict[str, T]:
        """`call` sent to every node unchanged: each node's own result, by node name."""
        return drive(self._router.per_node(call, timeout_secs), self._send_step)

    def routing_stats(self) -> RoutingStats:
        return self._router.routing_stats()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            pools, self._pools = list(self._pools.values()), {}
        for pool in pools:
            pool.close()

    def _send_step(self, step: Step) -> list[Any]:
        return [self._send(send) for send in step]

    def _send(self, send: Send) -> Any:
        try:
            return self._pool(send.address).request(send.call, send.timeout_secs,
                                                    connect_timeout_secs=connect_budget(send, self._connect_timeout_secs))
        except errors.KittiwakeError as exc:
            return exc

    def _pool(self, address: Address) -> ConnectionPool:
        with self._lock:
            if self._closed:
                raise errors.BrokerUnreachable("the client is closed")
            pool = self._pools.get(address)
            if pool is None:
                pool = ConnectionPool(
                    self._address.at(address.host, address.port),
                    connect_timeout_secs=self._connect_timeout_secs,
                    max_idle=self._max_idle,
                    max_reply_bytes=self._max_reply_bytes,
                )
                self._pools[address] = pool
            return pool


def cluster_address(url: str | BrokerAddress | None, cluster_map: ClusterMap | None) -> BrokerAddress:
    """A client's address: its URL's; with a map and no URL, every node of the map."""
    if url is None and cluster_map is not None:
        return address_of_map(cluster_map)
    return parse_url(url)

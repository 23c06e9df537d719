"""Three brokers and their map, for the cluster client's tests: three nodes of a cluster (each on
a host of its own where root allows: `cluster.hosts`), or three plain brokers named by an explicit map
(`Client(cluster_map=...)`), against which what needs node-issued ids (a FIFO pid or a lease id
naming its node) does not route."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Mapping
from typing import Any

from kittiwake import AsyncClient, Client
from kittiwake.cluster.cluster_map import Address, ClusterMap, Node
from kittiwake.testing import BrokerProcess

NODE_NAMES = ("a", "b", "c")


class Cluster:
    """Three brokers and the map naming them (by default the nodes at the brokers' addresses)."""

    def __init__(self, brokers: Mapping[str, BrokerProcess], cluster_map: ClusterMap | None = None) -> None:
        self.brokers = dict(brokers)
        self.map = cluster_map or ClusterMap(tuple(Node(name, Address(b.host, b.port)) for name, b in brokers.items()))

    def direct(self, node: str) -> Client:
        """A plain client of one node's broker."""
        return Client(self.brokers[node].url)


class AsyncDriver:
    """An AsyncClient whose coroutine methods run to completion when called."""

    def __init__(self, url: str | None, **options: Any) -> None:
        self.loop = asyncio.new_event_loop()
        self.client = AsyncClient(url, **options)

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self.client, name)
        if not inspect.iscoroutinefunction(attribute):
            return attribute

        def run(*args: Any, **kwargs: Any) -> Any:
            return self.loop.run_until_complete(attribute(*args, **kwargs))

        return run

    def close(self) -> None:
        self.loop.run_until_complete(self.client.close())
        self.loop.close()

"""Fixtures for cluster client tests: `cluster` (three nodes, each on a host of its own where root
allows, else on loopback ports: `hosts`; with their map, `support.cluster_nodes`), `plain_cluster`
(three plain brokers on loopback ports) and `make_client`, which opens blocking and asyncio cluster
clients on `cluster`."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kittiwake import Client
from kittiwake.cluster.cluster_map import ClusterMap
from support.broker_process import BrokerProcess
from support.cluster_nodes import NODE_NAMES, AsyncDriver, Cluster

from .hosts import host_nodes
from .hosts import test_hosts as make_hosts


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    """Three nodes of one cluster (`kittiwake broker --cluster FILE --node NAME`), a host each; the map
    is the one they serve (`tmp_path/cluster.toml`)."""
    with make_hosts(len(NODE_NAMES), NODE_NAMES) as hosts, host_nodes(tmp_path, hosts, ["--durability", "os"]) as nodes:
        yield Cluster(nodes, ClusterMap.from_toml((tmp_path / "cluster.toml").read_text()))


@pytest.fixture
def plain_cluster(tmp_path: Path) -> Iterator[Cluster]:
    """Three plain brokers named by an explicit map (`Client(cluster_map=...)`)."""
    brokers: dict[str, BrokerProcess] = {}
    try:
        for name in NODE_NAMES:
            brokers[name] = BrokerProcess(tmp_path / name)
        yield Cluster(brokers)
    finally:
        for process in brokers.values():
            process.kill()


@pytest.fixture(params=["sync", "async"])
def make_client(request: pytest.FixtureRequest, cluster: Cluster) -> Iterator[Any]:
    """Opens cluster clients (blocking or asyncio) on the cluster's map; closes them after."""
    opened: list[Any] = []

    def make(**options: Any) -> Any:
        options.setdefault("cluster_map", cluster.map)
        client = Client(None, **options) if request.param == "sync" else AsyncDriver(None, **options)
        opened.append(client)
        return client

    yield make
    for client in opened:
        client.close()

"""Fixtures for cluster client tests: `cluster` (three brokers and their map, `support.cluster_nodes`)
and `make_client`, which opens blocking and asyncio cluster clients on it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kittiwake import Client
from kittiwake.testing.cluster_nodes import ClusterNodes
from support.broker_process import BrokerProcess
from support.cluster_nodes import NODE_NAMES, AsyncDriver, Cluster


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    """Three nodes of one cluster (`kittiwake broker --cluster FILE --node NAME`)."""
    with ClusterNodes(tmp_path, NODE_NAMES, args=["--durability", "os"]) as nodes:
        yield Cluster(nodes.brokers)


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

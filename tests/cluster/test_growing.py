"""Growing a running cluster 2 → 3 as the docs say (stop the nodes, `kittiwake cluster grow`, start
every node with the new file), each node a host of its own (`hosts`), with a client that fetched
the old map before and is never told: its keyed calls reach a node that no longer owns the key,
are refused with WRONG_SHARD, and succeed once the client fetched the new map (one refetch,
counted in `routing_stats`)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from kittiwake import Client
from kittiwake.cluster.cluster_map import ClusterMap
from kittiwake.cluster.routing import Owned, route

from .hosts import TestHost, cluster_url, map_text, node_process
from .hosts import test_hosts as make_hosts

KEYS = 40


@pytest.fixture
def hosts() -> Iterator[list[TestHost]]:
    with make_hosts(3) as made:
        yield made


def owner(cluster: ClusterMap, pid: str) -> str:
    decision = route(cluster, "jobs", pid)
    assert isinstance(decision, Owned)
    return decision.node


def test_a_client_with_the_old_map_is_refused_refetches_and_succeeds(tmp_path: Path, hosts: list[TestHost]) -> None:
    old_path, new_path = tmp_path / "old.toml", tmp_path / "new.toml"
    old_path.write_text(map_text(hosts[:2]))
    new_path.write_text(map_text(hosts))
    old, new = ClusterMap.from_toml(old_path.read_text()), ClusterMap.from_toml(new_path.read_text())
    args = ["--durability", "os"]
    nodes = [node_process(tmp_path, host, old_path, args) for host in hosts[:2]]
    try:
        for node in nodes:
            node.start()
        with Client(cluster_url(hosts[:2])) as client:
            for index in range(KEYS):
                client.enqueue("jobs", f"x{index}", pid=f"k{index}")
            stale = Client(cluster_url(hosts[:2]))
            stale.enqueue("warm", b"the map is fetched")
            assert stale._channel.router.cluster_map == old  # type: ignore[attr-defined]
        for node in nodes:
            assert node.terminate() == 0
        grown = subprocess.run(
            [sys.executable, "-m", "kittiwake", "cluster", "grow", "--from", str(old_path), "--to", str(new_path),
             *(arg for host in hosts for arg in ("--store", f"{host.name}={tmp_path / f'node-{host.name}'}"))],
            capture_output=True, text=True, timeout=120)
        assert grown.returncode == 0, grown.stderr
        nodes = [node_process(tmp_path, host, new_path, args) for host in hosts]
        for node in nodes:
            node.start()

        with stale:
            moved = [f"k{index}" for index in range(KEYS) if owner(new, f"k{index}") == "c"]
            assert moved
            fresh = next(pid for pid in (f"n{index}" for index in range(1000)) if owner(new, pid) == "c")
            before = stale.routing_stats()
            assert not stale.enqueue("jobs", b"new", pid=fresh).collapsed  # refused by a or b, then sent to c
            after = stale.routing_stats()
            assert after.hops.get("enqueue", 0) - before.hops.get("enqueue", 0) == 2  # refetch + resend
            assert after.requests["enqueue"] - before.requests.get("enqueue", 0) == 3
            assert after.per_node["c"] - before.per_node.get("c", 0) >= 1
            assert stale._channel.router.cluster_map == new  # type: ignore[attr-defined]
            for pid in moved:  # the grown tasks are found on their new owner, with no more refetches
                assert stale.get("jobs", pid).data == f"x{pid[1:]}".encode()
            assert stale.routing_stats().hops.get("get", 0) == 0
            assert sum(row.size for row in stale.stats(["jobs"])) == KEYS + 1
    finally:
        for node in nodes:
            node.kill()


def test_a_node_started_under_another_nodes_name_on_its_host_refuses(tmp_path: Path, hosts: list[TestHost]) -> None:
    """On hosts of their own every node listens on the same port: the name alone says which host a
    node must be on, and a node given the name of another host's node refuses to start (usage error,
    exit status 2, saying where that node listens)."""
    map_path = tmp_path / "cluster.toml"
    map_path.write_text(map_text(hosts))
    a, b = hosts[0], hosts[1]
    command = a.command([sys.executable, "-m", "kittiwake.broker", "--data", str(tmp_path / "x"), "--host", a.ip,
                         "--port", str(a.port), "--cluster", str(map_path), "--node", b.name])
    refused = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2, refused.stderr
    assert f"node {b.name!r} listens at {b.address}" in refused.stderr, refused.stderr

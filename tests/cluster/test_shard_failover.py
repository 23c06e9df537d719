"""A shard on PostgreSQL with `brokers=many`: failover of one node of a cluster.

The design. A cluster map names one address per node, and clients reach a node only there. Node
b runs as two broker processes (`--cluster FILE --node b`) on one PostgreSQL schema with
`brokers=many`, both listening on b's address at once: brokers on a shared store set
SO_REUSEPORT (`kittiwake.broker.server`), so the kernel hands each new connection to one of them.
Both are node b (one identity in the store; ids from the node's residue class combined with each
broker's share of the schema), serving the same tasks. When one dies, calls in flight on its
connections fail (`ConnectionLost`, outcome unknown, as for any broker), and the next connection
reaches the other: no client, map or DNS change, no election. Restarted, it shares the address
again. The nodes run on loopback ports here: the test's PostgreSQL server listens on the loopback,
which a network namespace of its own would not reach.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from kittiwake import Client, errors
from kittiwake.cluster.cluster_map import ClusterMap
from kittiwake.cluster.routing import Owned, route
from kittiwake.testing import BrokerProcess
from kittiwake.testing.cluster_nodes import cluster_file_text, free_ports
from support.postgres import fresh_schema

KEYS = 30
CALL_TRIES = 20


@pytest.fixture
def store_url() -> Iterator[str]:
    with fresh_schema() as (dsn, schema):
        yield f"{dsn}{'&' if '?' in dsn else '?'}schema={schema}&brokers=many"


def retried(call: object, *args: object, **kwargs: object) -> object:
    """A call as a caller makes it: tried again after a transient error (a connection cut)."""
    assert callable(call)
    for attempt in range(CALL_TRIES):
        try:
            return call(*args, **kwargs)
        except errors.Transient:
            if attempt == CALL_TRIES - 1:
                raise
    raise AssertionError("unreachable")


def test_two_brokers_on_one_postgresql_schema_serve_a_node_and_one_may_die(tmp_path: Path, store_url: str) -> None:
    port_a, port_b = free_ports(2)
    map_path = tmp_path / "cluster.toml"
    map_path.write_text(cluster_file_text([("a", f"127.0.0.1:{port_a}"), ("b", f"127.0.0.1:{port_b}")]))
    cluster = ClusterMap.from_toml(map_path.read_text())
    node = ["--durability", "os", "--cluster", str(map_path), "--node"]
    a = BrokerProcess(tmp_path / "a", port=port_a, args=[*node, "a"])
    b1, b2 = (BrokerProcess(tmp_path / name, store_url=store_url, port=port_b, args=[*node, "b"])
              for name in ("b1", "b2"))
    try:
        for process in (a, b1, b2):
            process.start()
        on_b = [pid for pid in (f"k{index}" for index in range(KEYS))
                if isinstance(found := route(cluster, "jobs", pid), Owned) and found.node == "b"]
        assert on_b
        with Client(f"kw://127.0.0.1:{port_a},127.0.0.1:{port_b}") as client:
            for index in range(KEYS):
                client.enqueue("jobs", f"x{index}", pid=f"k{index}")
            for dead, alive in ((b1, b2), (b2, b1)):
                dead.kill()
                for pid in on_b:  # keyed calls to b's slots keep working, through the other broker
                    assert retried(client.get, "jobs", pid).pid == pid
                fresh = f"after-{dead.data_dir.name}"
                owner = route(cluster, "jobs", fresh)
                assert isinstance(owner, Owned)
                assert retried(client.enqueue, "jobs", b"y", pid=fresh).pid == fresh
                assert alive.alive()
                dead.restart()  # and it shares b's address again
            leased = []
            for _ in range(20):
                tasks = retried(client.lease, "jobs", max_tasks=100)
                assert isinstance(tasks, list)
                if not tasks:
                    break
                assert all(outcome.ok for outcome in client.dequeue(tasks))
                leased += [task.pid for task in tasks]
            assert sorted(leased) == sorted([f"k{index}" for index in range(KEYS)] + ["after-b1", "after-b2"])
        assert "belongs" not in b1.log_tail() + b2.log_tail()
    finally:
        for process in (a, b1, b2):
            process.kill()

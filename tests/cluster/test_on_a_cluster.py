"""Everything above the client on a cluster, unchanged for the user: three nodes (real brokers,
each on a host of its own where root allows, else on loopback ports: `hosts`) with a `kittiwake
worker` process beside each (on its host, `--near` its node), and over
`kw://a,b,c` an App's map, a DAG job, a gang task and their results, the batching producers,
a flow run with a join and a merge, the Spark source reading a spread queue, and the CLI.
Local-first: a worker's tasks come from its own node while that node holds some (counted from
the lease ids, and the hops of its leases). The test's own clients, the App, the flow's worker
loops and Spark run in the root namespace and reach the nodes over the hosts' bridge."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cluster import cluster_apps
from kittiwake import AsyncClient, Client, errors
from kittiwake.cluster.routing import Owned, route, tagged
from kittiwake.testing import BrokerProcess
from kittiwake.worker.registry import live_workers
from worker.harness import WorkerProcess

from .hosts import cluster_url, host_nodes
from .hosts import test_hosts as make_hosts

NODES = ("a", "b", "c")


class Cluster:
    def __init__(self, nodes: dict[str, BrokerProcess], url: str, workers: dict[str, WorkerProcess]) -> None:
        self.nodes = nodes
        self.workers = workers
        self.url = url

    def direct(self, node: str) -> Client:
        return Client(self.nodes[node].url)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    root = tmp_path_factory.mktemp("on-a-cluster")
    with make_hosts(len(NODES), NODES) as hosts, host_nodes(root, hosts, ["--durability", "os"]) as nodes:
        url = cluster_url(hosts)
        workers: dict[str, WorkerProcess] = {}
        try:
            for host in hosts:  # each worker on its node's host
                workers[host.name] = WorkerProcess(
                    url, root / f"worker-{host.name}.log", "--near", host.name, "--concurrency", "2",
                    "--prefetch", "0", app="cluster.cluster_apps:app", wait=False, prefix=host.command([]),
                )
            for worker in workers.values():
                worker.wait_ready(1)
            yield Cluster(nodes, url, workers)
        finally:
            for worker in workers.values():
                if worker.alive():
                    worker.terminate(timeout=30)


@pytest.fixture
def app(cluster: Cluster) -> Iterator[Any]:
    app = cluster_apps.app
    app.url = cluster.url
    app.near = "a"
    yield app
    app.close()
    app.url = None
    app.near = None


def test_an_apps_map_job_gang_and_results(cluster: Cluster, app: Any) -> None:
    handles = app.map(cluster_apps.square, range(30), chunk=7)
    assert app.results(handles, timeout=30) == [x * x for x in range(30)]

    job = app.job("diamond")
    leaves = [job.add(cluster_apps.step, f"leaf{n}") for n in range(3)]
    keyed = job.add(cluster_apps.step, "keyed", key=job.key("keyed-node"), after=leaves)
    top = job.add(cluster_apps.step, "top", after=[keyed, leaves[0]])
    submitted = job.submit()
    assert submitted[top].result(timeout=30) == "top"
    assert submitted.results(timeout=30) == ["leaf0", "leaf1", "leaf2", "keyed", "top"]
    # the whole DAG carries the job's tag, so it lived on one node
    assert {handle.pid.partition("}")[0] for handle in submitted} == {"{" + job.tag}
    assert submitted[keyed].pid == tagged(job.tag, "keyed-node")

    gang = cluster_apps.pair.submit()
    assert gang.result(timeout=40) == 2


def test_a_job_placed_apart_is_refused_before_anything_is_sent(cluster: Cluster, app: Any) -> None:
    job = app.job()
    parent = job.add(cluster_apps.step, "p", key="untagged-parent")
    job.add(cluster_apps.step, "c", after=[parent])
    with pytest.raises(ValueError, match="different nodes"):
        job.submit()
    # and a node refuses a child whose parent it does not own: the mistake is loud either way
    with Client(cluster.url) as client:
        cluster_map = client.cluster_map or (client.stats(), client.cluster_map)[1]
    assert cluster_map is not None
    parent_pid = next(f"p{n}" for n in range(1000)
                      if route(cluster_map, "capp.dag", f"p{n}") != route(cluster_map, "capp.dag", "{t}child"))
    child = route(cluster_map, "capp.dag", "{t}child")
    assert isinstance(child, Owned)
    with cluster.direct(child.node) as owner, pytest.raises(errors.WrongShard):
        owner.enqueue("capp.dag", b"x", pid="{t}child", after=[("capp.dag", parent_pid)])


def test_the_batching_producers_route_over_the_cluster(cluster: Cluster) -> None:
    with Client(cluster.url) as client:
        with client.producer(linger_ms=1) as producer:
            sent = [producer.enqueue("capp.produced", f"t{n}") for n in range(60)]
            keyed = [producer.enqueue("capp.produced", "k", pid=f"key-{n}") for n in range(30)]
        assert all(not s.sent(10).collapsed for s in sent + keyed)
        again = client.producer()
        assert again.enqueue("capp.produced", "k", pid="key-0").sent(10).collapsed
        again.close()
        per_node = client.node_stats(["capp.produced"])
        assert sum(stats[0].size for stats in per_node.values() if stats) == 90
        assert all(stats and stats[0].size > 0 for stats in per_node.values())  # spread over every node

    async def produce() -> list[bool]:
        async with AsyncClient(cluster.url) as aclient:
            async with aclient.producer() as producer:
                sendings = [await producer.enqueue("capp.produced", "a", pid=f"key-{n}") for n in range(25, 35)]
            return [(await s.sent(10)).collapsed for s in sendings]

    assert asyncio.run(produce()) == [True] * 5 + [False] * 5
    with Client(cluster.url) as client:
        assert client.stats(["capp.produced"])[0].size == 95
        client.delete_queue("capp.produced")


def test_a_flow_run_with_a_join_and_a_merge(cluster: Cluster, tmp_path: Path) -> None:
    from flow import pipelines
    from kittiwake.worker import WorkerConfig, WorkerLoop

    loops = []
    threads = []
    import threading

    for name in NODES:
        flow_app = pipelines.tiny.kittiwake_app()
        flow_app.url = None
        loop = WorkerLoop(flow_app, WorkerConfig(url=cluster.url, near=name, concurrency=2, wait_secs=0.2,
                                                 registry_every_secs=0.5, shutdown_secs=5))
        thread = threading.Thread(target=loop.run, daemon=True)
        thread.start()
        loops.append(loop)
        threads.append(thread)
    try:
        with Client(cluster.url) as client:
            run = pipelines.tiny.run(client, {"numbers": [1, 2, 3, 4, 5]}, data_dir=tmp_path)
            status = run.wait(timeout=40)
            assert status.state == "done", status
            assert run.outputs()["add.out"].value["sum"] == 55
    finally:
        for loop in loops:
            loop.stop()
        for thread in threads:
            thread.join(30)


def test_the_spark_source_reads_a_spread_queue(cluster: Cluster, spark_session: Any) -> None:
    import kittiwake.spark

    kittiwake.spark.register(spark_session)
    with Client(cluster.url) as client:
        client.enqueue_many([{"queue": "capp.spark", "data": f"row {n}"} for n in range(60)])
        client.enqueue_many([{"queue": "capp.spark", "pid": f"k{n}", "data": f"keyed {n}"} for n in range(30)])
        assert all(stats and stats[0].size > 0 for stats in client.node_stats(["capp.spark"]).values())
        frame = (spark_session.read.format("kittiwake").option("url", cluster.url).option("queue", "capp.spark")
                 .option("partitions", "2").option("page_size", "100").load())
        rows = frame.collect()
        assert sorted(bytes(row.data).decode() for row in rows) == sorted(
            [f"row {n}" for n in range(60)] + [f"keyed {n}" for n in range(30)])
        assert client.stats(["capp.spark"])[0].leased == 0  # a batch read leases nothing
        client.delete_queue("capp.spark")


def _cli(cluster: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kittiwake", "--url", cluster.url, *args],
                          capture_output=True, text=True, timeout=60)


def test_the_cli_over_a_cluster_url(cluster: Cluster) -> None:
    for n in range(6):
        done = _cli(cluster, "enqueue", "capp.cli", f"task {n}", "--pid", f"cli-{n}")
        assert done.returncode == 0, done.stderr
    fifo = _cli(cluster, "enqueue", "capp.cli", "fifo task")
    assert fifo.returncode == 0, fifo.stderr
    stats = _cli(cluster, "--json", "stats", "capp.cli")
    assert stats.returncode == 0, stats.stderr
    assert json.loads(stats.stdout)[0]["size"] == 7
    queues = _cli(cluster, "queues")
    assert queues.returncode == 0 and "capp.cli" in queues.stdout, queues.stderr
    got = _cli(cluster, "get", "capp.cli", "cli-3")
    assert got.returncode == 0 and "task 3" in got.stdout, got.stderr
    peeked = _cli(cluster, "peek", "capp.cli")
    assert peeked.returncode == 0 and all(f"cli-{n}" in peeked.stdout for n in range(6)), peeked.stderr
    leased: list[Any] = []
    for _ in range(20):  # a lease takes what one node gives: the first that holds tasks
        done = _cli(cluster, "--json", "lease", "capp.cli", "--max-tasks", "7")
        assert done.returncode == 0, done.stderr
        leased += json.loads(done.stdout)
        if len(leased) == 7:
            break
    assert sorted(task["pid"] for task in leased if task["pid"].startswith("cli-")) == [f"cli-{n}" for n in range(6)]
    with Client(cluster.url) as client:  # two dead letters, on whichever nodes own them
        lease_ids = {task["pid"]: task["lease_id"] for task in leased}
        for pid in ("cli-1", "cli-4"):
            client.release({"queue": "capp.cli", "pid": pid, "lease_id": lease_ids[pid]}, "broken", bury=True)
    dead = _cli(cluster, "dead", "list", "capp.cli")
    assert dead.returncode == 0 and "cli-1" in dead.stdout and "cli-4" in dead.stdout, dead.stderr
    requeued = _cli(cluster, "dead", "requeue", "capp.cli", "--all")
    assert requeued.returncode == 0, requeued.stderr
    with Client(cluster.url) as client:
        assert client.get("capp.cli", "cli-4").state == "available"
    on_node = {}  # FIFO tasks put on each node directly
    for name in NODES:
        with cluster.direct(name) as direct:
            on_node[name] = {direct.enqueue("capp.near", f"on {name}").pid for _ in range(3)}
    near = _cli(cluster, "--near", "b", "--json", "lease", "capp.near", "--max-tasks", "3")  # b asked first
    assert near.returncode == 0, near.stderr
    assert {task["pid"] for task in json.loads(near.stdout)} == on_node["b"]
    assert _cli(cluster, "delete-queue", "capp.near", "--yes").returncode == 0
    workers = _cli(cluster, "--json", "workers")
    assert workers.returncode == 0, workers.stderr
    assert {record["routing"]["near"] for record in json.loads(workers.stdout) if "routing" in record} >= set(NODES)
    assert _cli(cluster, "delete-queue", "capp.cli", "--yes").returncode == 0


def _routing(client: Client) -> dict[str, dict[str, Any]]:
    return {record.status["routing"]["near"]: record.status["routing"]
            for record in live_workers(client) if "routing" in record.status}


def test_a_workers_pops_come_from_its_own_node_while_it_holds_tasks(cluster: Cluster, app: Any) -> None:
    with Client(cluster.url) as client:
        before = _routing(client)
        # FIFO tasks: 12 on each node, each long enough (six rounds of two slots: 1.5 s a node)
        # that a worker started late by a busy machine still finds most of its own node's left
        app.map(cluster_apps.hold, [0.25] * 36, chunk=36)
        deadline = time.monotonic() + 30
        while client.stats(["capp.hold"])[0].size and time.monotonic() < deadline:
            time.sleep(0.1)
        assert client.stats(["capp.hold"])[0].size == 0
        time.sleep(1.2)  # two registry beats: the records carry the last counts
        after = _routing(client)
    assert set(after) == set(NODES)
    for name in NODES:
        leased = {node: count - before.get(name, {}).get("leased_from", {}).get(node, 0)
                  for node, count in after[name]["leased_from"].items()}
        # its own node served it while it held tasks: at least half of that node's tasks went to it
        # (once its node ran dry it stole from the others, and how much depends on how busy the
        # machine kept the other workers: 6 own and 7 stolen has been seen, so no more is asked)
        assert leased.get(name, 0) >= 6, (name, leased)
        assert after[name]["lease_calls"] > 0

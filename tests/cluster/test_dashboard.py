"""The dashboard's cluster page of a node, `/api/cluster`, over real sockets on three node processes: the
map, what each node holds (its own engine, the peers asked over the client), holders per spread queue
as announced, the load deviation, a node down; with an auth file, a viewer sees only the queues it
administers. The source's bound (one round of asking per second however many pages ask) is checked
with a fake clock against peers that refuse connections."""

from __future__ import annotations

import asyncio
import base64
import http.client
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from kittiwake import Client
from kittiwake.cluster.cluster_map import ClusterMap
from kittiwake.cluster.dashboard import NodeDashboard
from kittiwake.cluster.node import ClusterNode
from kittiwake.balance import load_deviation
from kittiwake.testing import BrokerProcess
from kittiwake.testing.cluster_nodes import ClusterNodes, cluster_file_text, free_ports
from support.auth_users import ALICE, ROOT, standard_auth_file

POLL_SECS = 15.0


def api(broker: BrokerProcess, path: str, credentials: tuple[str, str] | None = None) -> tuple[int, Any]:
    headers = {}
    if credentials is not None:
        headers["Authorization"] = "Basic " + base64.b64encode(":".join(credentials).encode()).decode()
    connection = http.client.HTTPConnection(broker.host, broker.http_port, timeout=10)
    try:
        connection.request("GET", path, headers=headers)
        response = connection.getresponse()
        return response.status, json.loads(response.read())
    finally:
        connection.close()


def poll(broker: BrokerProcess, ready: Callable[[dict[str, Any]], bool],
         credentials: tuple[str, str] | None = None) -> dict[str, Any]:
    """`/api/cluster` once `ready` holds of it (the peers are asked again at most once a second)."""
    deadline = time.monotonic() + POLL_SECS
    while True:
        status, answer = api(broker, "/api/cluster", credentials)
        assert status == 200, answer
        if ready(answer):
            return answer
        assert time.monotonic() < deadline, answer
        time.sleep(0.2)


def by_node(answer: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {node["name"]: node for node in answer["nodes"]}


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterNodes]:
    with ClusterNodes(tmp_path_factory.mktemp("cdash"), ["a", "b", "c"],
                      args=["--durability", "os", "--http-port", "0"]) as started:
        yield started


def test_a_node_shows_the_map_what_each_node_holds_and_who_holds_each_queue(nodes: ClusterNodes) -> None:
    cluster = ClusterMap.from_toml(nodes.map_path.read_text())
    with Client(nodes["b"].url) as b, Client(nodes["c"].url) as c:
        b.enqueue_many([{"queue": "work", "data": b"x"} for _ in range(3)])
        c.enqueue("work", b"y")
        c.enqueue("other", b"z")
        leased = c.lease("other", max_tasks=1, lease_secs=60)
    assert len(leased) == 1

    def settled(answer: dict[str, Any]) -> bool:
        found = by_node(answer)
        return (found["b"]["tasks"], found["c"]["tasks"], found["c"]["leased"]) == (3, 2, 1) and \
            {entry["queue"]: entry["nodes"] for entry in answer["holders"]} == {"work": ["b", "c"]}

    answer = poll(nodes["a"], settled)
    assert (answer["node"], answer["epoch"], answer["slots"]) == ("a", cluster.epoch, cluster.slots)
    assert [(node["name"], node["address"], node["slots"]) for node in answer["nodes"]] == [
        (name, str(cluster.address_of(name)), len(cluster.slots_of(name))) for name in ("a", "b", "c")]
    assert answer["up"] == 3 and answer["healthy"] and answer["tasks"] == 5
    found = by_node(answer)
    assert found["a"]["self"] and not found["b"]["self"]
    assert [found[name]["epoch"] for name in "abc"] == [cluster.epoch] * 3
    assert (found["a"]["queues"], found["a"]["tasks"]) == (0, 0)
    assert (found["b"]["queues"], found["b"]["available"], found["b"]["leased"]) == (1, 3, 0)
    assert (found["c"]["queues"], found["c"]["available"], found["c"]["leased"]) == (2, 1, 1)
    assert [found[name]["holding"] for name in "abc"] == [0, 1, 1]
    assert answer["load_deviation"] == round(load_deviation([0, 3, 2]), 2)
    assert answer["holders_total"] == 1
    for peer in ("b", "c"):  # the peers announced to a, and a's announcements reached them
        assert found[peer]["last_heard_at"] is not None and found[peer]["last_told_at"] is not None
        assert found[peer]["error"] is None

    status, overview = api(nodes["b"], "/api/overview")
    assert status == 200 and overview["broker"]["node"] == "b"


def test_every_metric_series_of_each_node_carries_its_own_name(nodes: ClusterNodes) -> None:
    for name in ("a", "b"):
        connection = http.client.HTTPConnection(nodes[name].host, nodes[name].http_port, timeout=10)
        try:
            connection.request("GET", "/metrics")
            text = connection.getresponse().read().decode()
        finally:
            connection.close()
        series = [line for line in text.splitlines() if line.startswith("kittiwake_")]
        assert series and all(f'node="{name}"' in line for line in series), \
            [line for line in series if f'node="{name}"' not in line][:3]


def test_a_node_down_is_shown_down_with_why(nodes: ClusterNodes) -> None:
    nodes["c"].kill()  # the module's last test: c stays down
    answer = poll(nodes["a"], lambda answer: not by_node(answer)["c"]["up"])
    found = by_node(answer)
    assert found["c"]["error"] and found["c"]["epoch"] is None
    assert answer["up"] == 2 and not answer["healthy"]
    assert found["a"]["up"] and found["b"]["up"]


def test_a_broker_that_is_no_node_has_no_cluster_page(tmp_path: Path) -> None:
    with BrokerProcess(tmp_path / "data", args=["--http-port", "0"]) as plain:
        status, answer = api(plain, "/api/cluster")
        assert status == 404, answer
        assert api(plain, "/api/overview")[1]["broker"]["node"] is None


def test_a_viewer_sees_only_the_queues_it_administers(tmp_path: Path) -> None:
    auth = standard_auth_file(tmp_path / "users.json")
    args = ["--durability", "os", "--http-port", "0", "--auth-file", str(auth),
            "--cluster-user", ROOT[0], "--cluster-token", ROOT[1]]
    with ClusterNodes(tmp_path / "nodes", ["a", "b", "c"], args=args) as three:
        root_url = three["b"].url.replace("kw://", f"kw://{ROOT[0]}:{ROOT[1]}@")
        with Client(root_url) as b:
            b.enqueue_many([{"queue": "alice.jobs", "data": b"a"}, {"queue": "alice.jobs", "data": b"b"},
                            {"queue": "bob.secret", "data": b"c"}])
        assert api(three["a"], "/api/cluster")[0] == 401

        def held(answer: dict[str, Any]) -> bool:
            return by_node(answer)["b"]["tasks"] == 3 and len(answer["holders"]) == 2

        as_root = poll(three["a"], held, ROOT)
        assert [entry["queue"] for entry in as_root["holders"]] == ["alice.jobs", "bob.secret"]
        status, as_alice = api(three["a"], "/api/cluster", ALICE)
        assert status == 200
        assert "bob.secret" not in json.dumps(as_alice)
        assert as_alice["holders"] == [{"queue": "alice.jobs", "nodes": ["b"]}] and as_alice["holders_total"] == 1
        found = by_node(as_alice)
        assert (found["b"]["queues"], found["b"]["tasks"], found["b"]["holding"]) == (1, 2, 1)
        assert as_alice["tasks"] == 2
        assert [node["name"] for node in as_alice["nodes"]] == ["a", "b", "c"]  # the map is everyone's


def test_the_peers_are_asked_at_most_once_per_second_however_many_pages_ask() -> None:
    ports = free_ports(3)  # nothing listens there: each peer refuses at once
    cluster = ClusterMap.from_toml(cluster_file_text([(name, f"127.0.0.1:{port}") for name, port in zip("abc", ports)]))
    now = [100.0]
    dashboard = NodeDashboard(ClusterNode(cluster, "a"), clock=lambda: now[0])

    async def scenario() -> list[int]:
        rounds = []
        try:
            answers = await asyncio.gather(*(dashboard.snapshot() for _ in range(20)))
            assert all(answer is answers[0] for answer in answers)
            rounds.append(dashboard.rounds)
            now[0] += 0.5
            await dashboard.snapshot()
            rounds.append(dashboard.rounds)
            now[0] += 0.6
            later = await dashboard.snapshot()
            rounds.append(dashboard.rounds)
            assert [node.up for node in later.nodes] == [False, False, False]  # a was never started
            assert all(node.error for node in later.nodes)
        finally:
            await dashboard.close()
        return rounds

    assert asyncio.run(scenario()) == [1, 1, 2]

"""Three broker processes as the nodes of one cluster, over real sockets: each answers the map and its
own name, refuses keys another node owns with WRONG_SHARD and the epoch, learns from its peers which
spread queues they hold, issues ids in its residue class across a restart, and keeps its store its own."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

from kittiwake import Client, errors
from kittiwake.client.calls import Call, request
from kittiwake.cluster.cluster_map import ID_STRIDE, ClusterMap
from kittiwake.cluster.routing import Owned, route
from kittiwake.protocol.replies import result_decoder
from kittiwake.testing import BrokerDidNotStart, BrokerProcess
from kittiwake.testing.cluster_nodes import ClusterNodes

POLL_SECS = 10.0


def cluster_call(client: Client, op: str, **fields: Any) -> Any:
    return client._run(Call(request(op, fields), result_decoder(op)), None)


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterNodes]:
    with ClusterNodes(tmp_path_factory.mktemp("cluster"), ["a", "b", "c"], args=["--durability", "os"]) as started:
        yield started


@pytest.fixture(scope="module")
def cluster(nodes: ClusterNodes) -> ClusterMap:
    return ClusterMap.from_toml(nodes.map_path.read_text())


def group_owned_by(cluster: ClusterMap, node: str) -> str:
    for index in range(10_000):
        queue = f"g{index}#work"
        decision = route(cluster, queue)
        if isinstance(decision, Owned) and decision.node == node:
            return queue
    raise AssertionError(f"no group of node {node}")


def test_every_node_answers_the_map_with_its_own_name(nodes: ClusterNodes, cluster: ClusterMap) -> None:
    for name in ("a", "b", "c"):
        with Client(nodes[name].url) as client:
            answer = cluster_call(client, "cluster_map")
        assert (answer.node, answer.epoch, answer.slots) == (name, cluster.epoch, cluster.slots)
        assert [(node.name, node.address) for node in answer.nodes] == list(nodes.addresses.items())
        assert f"cluster node '{name}'" in nodes[name].log_path.read_text()


def test_a_key_owned_elsewhere_is_refused_with_the_epoch(nodes: ClusterNodes, cluster: ClusterMap) -> None:
    queue = group_owned_by(cluster, "a")
    with Client(nodes["b"].url) as b, Client(nodes["a"].url) as a:
        with pytest.raises(errors.WrongShard) as refused:
            b.enqueue(queue, b"x", pid="p1")
        assert refused.value.epoch == cluster.epoch and "'a'" in refused.value.message
        with pytest.raises(errors.WrongShard):
            b.enqueue(queue, b"fifo into a group")
        with pytest.raises(errors.WrongShard):
            b.peek(queue)
        assert not a.enqueue(queue, b"x", pid="p1").collapsed
        assert a.get(queue, "p1").pid == "p1"
        assert b.enqueue("spread", b"anywhere").pid  # a FIFO push to a spread queue: any node


def test_holders_learn_of_a_peers_tasks(nodes: ClusterNodes, cluster: ClusterMap) -> None:
    with Client(nodes["a"].url) as a, Client(nodes["b"].url) as b:
        a.enqueue("held.on.a", b"x")
        deadline = time.monotonic() + POLL_SECS
        while True:
            seen = cluster_call(b, "holders", queues=["held.on.a"])
            if seen.holders["held.on.a"] == ["a"] or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert seen.epoch == cluster.epoch and seen.holders == {"held.on.a": ["a"]}
        assert cluster_call(a, "holders", queues=["held.on.a"]).holders == {"held.on.a": ["a"]}
        [task] = a.lease("held.on.a")
        a.dequeue(task)
        deadline = time.monotonic() + POLL_SECS
        while cluster_call(b, "holders", queues=["held.on.a"]).holders["held.on.a"] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert cluster_call(b, "holders", queues=["held.on.a"]).holders == {"held.on.a": []}


def test_a_deleted_queue_is_no_longer_held_once_its_delete_commits(nodes: ClusterNodes) -> None:
    # A delete left no move in the pass's tally, so no flip: node a went on telling its peers (and
    # itself) that it held the queue until its next full refresh (5 s; before those recomputed what a
    # node holds from its engine, forever), and every consumer of another node asked it in vain. The
    # tally now names the queues a pass deleted, and they flip as the pass commits.
    def held(client: Client) -> list[str]:
        holders: list[str] = cluster_call(client, "holders", queues=["deleted.on.a"]).holders["deleted.on.a"]
        return holders

    with Client(nodes["a"].url) as a, Client(nodes["b"].url) as b:
        a.enqueue("deleted.on.a", b"x")
        deadline = time.monotonic() + POLL_SECS
        while held(b) != ["a"] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert held(b) == ["a"]
        a.delete_queue("deleted.on.a")
        assert held(a) == []  # the pass that deleted it flipped it
        deadline = time.monotonic() + 2.0  # far below the full refresh (5 s)
        while (held(a) or held(b)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert (held(a), held(b)) == ([], [])


def test_a_restarted_node_learns_what_its_peers_hold_at_once(nodes: ClusterNodes) -> None:
    # A peer sent its full holdings at once only to a node *name* it had never heard: a node that
    # restarted while its peers were idle knew nothing of them until their next full refresh (5 s),
    # and its consumers swept every node meanwhile. Peers now key what they heard by broker process.
    def held(client: Client) -> list[str]:
        holders: list[str] = cluster_call(client, "holders", queues=["held.across.restart"]).holders[
            "held.across.restart"]
        return holders

    with Client(nodes["a"].url) as a:
        a.enqueue("held.across.restart", b"x")
    with Client(nodes["b"].url) as b:
        deadline = time.monotonic() + POLL_SECS
        while held(b) != ["a"]:
            assert time.monotonic() < deadline
            time.sleep(0.05)
    nodes["b"].restart()
    with Client(nodes["b"].url) as b:
        deadline = time.monotonic() + 1.0  # far below the full refresh (5 s)
        while held(b) != ["a"] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert held(b) == ["a"]


def test_node_b_issues_ids_of_residue_one_across_a_restart(nodes: ClusterNodes) -> None:
    residues = set()
    for _ in range(2):
        with Client(nodes["b"].url) as b:
            for _ in range(5):
                residues.add(int(b.enqueue("ids", b"x").pid) % ID_STRIDE)
            for task in b.lease("ids", max_tasks=3):
                residues.add(task.lease_id % ID_STRIDE)
                residues.add(int(task.pid) % ID_STRIDE)
        nodes["b"].restart()
    assert residues == {1}


def run_broker(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kittiwake.broker", "--durability", "os", *args],
                          capture_output=True, text=True, timeout=60)


def test_a_store_stays_its_nodes(nodes: ClusterNodes, tmp_path: Path) -> None:
    b = nodes["b"]
    b.terminate()
    try:
        address = nodes.addresses["c"]
        host, port = address.rsplit(":", 1)
        wrong = BrokerProcess(b.data_dir, host=host, port=int(port), log_path=tmp_path / "wrong.log",
                              args=["--cluster", str(nodes.map_path), "--node", "c"])
        plain = BrokerProcess(b.data_dir, log_path=tmp_path / "plain.log")
        for broker, expected in ((wrong, "belongs to cluster node 'b'.*not to node 'c'"), (plain, "--node b")):
            with pytest.raises(BrokerDidNotStart) as failed:
                broker.start()
            assert failed.value.returncode == 1
            assert re.search("cannot start: .*" + expected, broker.log_tail()), broker.log_tail()
    finally:
        b.restart()


def test_a_name_or_an_address_the_map_does_not_have_is_a_usage_error(nodes: ClusterNodes, tmp_path: Path) -> None:
    host, port = nodes.addresses["a"].rsplit(":", 1)
    unknown = run_broker("--data", str(tmp_path / "x"), "--cluster", str(nodes.map_path), "--node", "zz",
                         "--port", port)
    assert unknown.returncode == 2 and "no node 'zz'" in unknown.stderr
    elsewhere = run_broker("--data", str(tmp_path / "y"), "--cluster", str(nodes.map_path), "--node", "a",
                           "--port", "1")
    assert elsewhere.returncode == 2 and "--port" in elsewhere.stderr
    bad = tmp_path / "bad.toml"
    bad.write_text("[nodes]\na = 5\n")
    broken = run_broker("--data", str(tmp_path / "z"), "--cluster", str(bad), "--node", "a")
    assert broken.returncode == 2 and "host:port" in broken.stderr


def test_every_metric_series_of_a_node_carries_its_name(tmp_path: Path) -> None:
    import urllib.request

    with ClusterNodes(tmp_path, ["solo"], args=["--durability", "os", "--http-port", "0"]) as one:
        with Client(one["solo"].url) as client:
            client.enqueue("q", b"x")
        url = f"http://{one['solo'].host}:{one['solo'].http_port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as response:
            text = response.read().decode()
    series = [line for line in text.splitlines() if line.startswith("kittiwake_")]
    assert series and all('node="solo"' in line for line in series), [s for s in series if 'node="solo"' not in s][:3]
    assert any(line.startswith('kittiwake_queue_tasks{node="solo",queue="q"') for line in series)


def test_an_announcement_from_no_peer_or_with_an_overlong_instance_is_refused(
    nodes: ClusterNodes, cluster: ClusterMap
) -> None:
    with Client(nodes["a"].url) as a:
        for fields, wanted in (({"node": "z"}, "not a peer"), ({"node": "b", "instance": "i" * 65}, "instance id")):
            with pytest.raises(errors.BadRequest, match=wanted):
                cluster_call(a, "announce", epoch=cluster.epoch, full=True, holding=["told.by.nobody"], **fields)
        assert cluster_call(a, "holders", queues=["told.by.nobody"]).holders["told.by.nobody"] == []  # neither changed a's view
        assert a.ping()  # and the node serves on


def test_with_auth_files_nodes_announce_with_their_own_credentials(tmp_path: Path) -> None:
    auth_file = tmp_path / "users.json"
    for user, rights in (("node", "*=all"), ("app", "jobs*=produce,consume"), ("narrow", "?=admin")):
        subprocess.run([sys.executable, "-m", "kittiwake", "auth", "add-user", user, "--rights", rights,
                        "--token", f"{user}-token-0123456789", "--file", str(auth_file)],
                       check=True, capture_output=True, timeout=60)
    args = ["--durability", "os", "--auth-file", str(auth_file),
            "--cluster-user", "node", "--cluster-token", "node-token-0123456789"]
    with ClusterNodes(tmp_path / "nodes", ["a", "b"], args=args) as two:
        a_url = two["a"].url.replace("kw://", "kw://app:app-token-0123456789@")
        b_url = two["b"].url.replace("kw://", "kw://app:app-token-0123456789@")
        with Client(a_url) as a, Client(b_url) as b:
            a.enqueue("jobs", b"x")
            deadline = time.monotonic() + POLL_SECS
            while cluster_call(b, "holders", queues=["jobs"]).holders["jobs"] != ["a"]:
                assert time.monotonic() < deadline, two["a"].log_tail()
                time.sleep(0.05)
            with pytest.raises(errors.Forbidden, match="announce"):
                cluster_call(b, "announce", node="a", epoch="0" * 16, full=True)
        # `?` matches the one-character name "*", which the check used to ask about
        with Client(b_url.replace("app:app-token", "narrow:narrow-token")) as narrow:
            with pytest.raises(errors.Forbidden, match="announce"):
                cluster_call(narrow, "announce", node="a", epoch="0" * 16, full=True)

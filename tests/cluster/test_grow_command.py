"""`kittiwake cluster grow` and `kittiwake cluster status`, run as the real CLI against real nodes
and their stores: growing 2 → 3 puts every task on the node the new map names, loses none, doubles
none, drops the leases the new map routes elsewhere, moves nothing when run again, survives a
SIGKILL half-way, and the three nodes then start on the new map (the epochs grow recorded); status
says a stopped node is down.

The stores are filled by two real nodes (`kittiwake broker --cluster FILE --node NAME`, started by
`ClusterNodes`) through a cluster client, so they hold what a 2-node cluster's do: FIFO pids and
lease ids of the nodes' residues, and each node's identity record."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kittiwake import Client
from kittiwake.cluster.cluster_map import Address, ClusterMap, Node
from kittiwake.cluster.grow import CRASH_ENV, recorded_identity
from kittiwake.cluster.growth import destination
from kittiwake.cluster.routing import Owned, lease_route, route, slot_of, tagged
from kittiwake.engine.mutations import PutTask, SetCounter
from kittiwake.model import NewTask, Task
from kittiwake.store.sqlite import SqliteStore
from kittiwake.testing import BrokerDidNotStart
from kittiwake.testing import BrokerProcess as NodeProcess
from kittiwake.testing.cluster_nodes import ClusterNodes, cluster_file_text, free_ports
from support.broker_process import BrokerProcess

SLOTS = 64
KEYED = 60
FIFO_EACH = 10


def cluster_file(path: Path, count: int) -> Path:
    nodes = tuple(Node(name, Address("127.0.0.1", 17001 + index)) for index, name in enumerate("abc"[:count]))
    path.write_text(ClusterMap(nodes, SLOTS).to_toml())
    return path


def kittiwake(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environment = {name: value for name, value in os.environ.items() if name != "KITTIWAKE_URL"}
    environment.update(env or {})
    return subprocess.run([sys.executable, "-m", "kittiwake", *args], capture_output=True, text=True,
                          timeout=120, env=environment)


def contents(directory: Path) -> dict[tuple[str, str], Task]:
    """Every task of the SQLite store in `directory`, read with no broker running."""
    store = SqliteStore(directory)
    try:
        found: dict[tuple[str, str], Task] = {}
        for summary in store.recover(0.0).queues:
            for task in store.scan(summary.queue, None, 100_000):
                found[(task.queue, task.pid)] = task
        return found
    finally:
        store.close()


def fill(nodes: ClusterNodes) -> None:
    """Tasks of every kind, enqueued through a cluster client of the running nodes: keyed, FIFO,
    named groups, a DAG under one tag, delayed entries, dead letters, and leases still held."""
    with Client(nodes.url) as client:
        for index in range(KEYED):
            client.enqueue("jobs", f"data {index}", pid=f"k{index}", sender="s", headers={"h": str(index)},
                           max_attempts=5)
            client.enqueue(f"g{index % 7}#q", b"grouped", pid=f"t{index}")
            client.enqueue("jobs.delayed", b"later", pid=f"{1_700_000_000_000_000 + index:017d}-k{index}")
        for _ in range(3 * FIFO_EACH):
            client.enqueue("fifo", b"pushed")  # spread over the nodes, each pid of its node's residue
        parent, child = tagged("job-1", "parent"), tagged("job-1", "child")
        client.enqueue_many([NewTask("dag", b"p", pid=parent), NewTask("dag", b"c", pid=child, after=[("dag", parent)])])
        for index in range(12):  # dead letters: one attempt each, failed
            client.enqueue("fail", b"doomed", pid=f"f{index}", max_attempts=1)
        for _ in range(10):
            leased = client.lease("fail", max_tasks=100, lease_secs=60)
            if not leased:
                break
            client.release(leased, "no luck")
        for _ in range(4):  # held across the move
            client.lease("jobs", max_tasks=5, lease_secs=600)
        client.lease("g0#q", max_tasks=2, lease_secs=600)


def new_map_file(old: ClusterNodes, path: Path) -> Path:
    """The old map with node c appended, at a free port."""
    [port] = free_ports(1)
    path.write_text(cluster_file_text([*old.addresses.items(), ("c", f"127.0.0.1:{port}")]))
    return path


def check_placed(new: ClusterMap, directories: dict[str, Path], before: dict[tuple[str, str], Task]) -> None:
    after: dict[tuple[str, str], Task] = {}
    for name, directory in directories.items():
        for key, task in contents(directory).items():
            found = destination(new, task)
            assert found is None or found.node == name, f"{key} on {name}, owner {found}"
            assert key not in after, f"{key} twice"
            after[key] = task
    assert set(after) == set(before)
    for key, task in before.items():
        moved = after[key]
        assert (moved.data, moved.headers, moved.sender, moved.attempts, moved.max_attempts, moved.enqueued_at,
                moved.waiting_on, moved.children) == (task.data, task.headers, task.sender, task.attempts,
                                                      task.max_attempts, task.enqueued_at, task.waiting_on,
                                                      task.children), key


def everything(directories: dict[str, Path]) -> dict[tuple[str, str], Task]:
    found: dict[tuple[str, str], Task] = {}
    for directory in directories.values():
        found.update(contents(directory))
    return found


def grow_args(old_file: Path, new_file: Path, directories: dict[str, Path], *extra: str) -> list[str]:
    stores = [arg for name, directory in directories.items() for arg in ("--store", f"{name}={directory}")]
    return ["cluster", "grow", "--from", str(old_file), "--to", str(new_file), *stores, *extra]


@pytest.fixture
def two_nodes(tmp_path: Path) -> tuple[ClusterMap, ClusterMap, Path, Path, dict[str, Path]]:
    old_nodes = ClusterNodes(tmp_path / "old", ["a", "b"], args=["--durability", "os"])
    with old_nodes:
        fill(old_nodes)
        for node in old_nodes:
            node.terminate()
    old_file, new_file = old_nodes.map_path, new_map_file(old_nodes, tmp_path / "new.toml")
    old, new = (ClusterMap.from_toml(path.read_text()) for path in (old_file, new_file))
    directories = {name: old_nodes[name].data_dir for name in "ab"} | {"c": tmp_path / "store-c"}
    return old, new, old_file, new_file, directories


def test_growing_two_nodes_to_three_puts_every_task_on_its_owner_and_loses_none(
    two_nodes: tuple[ClusterMap, ClusterMap, Path, Path, dict[str, Path]],
) -> None:
    old, new, old_file, new_file, directories = two_nodes
    before = everything(directories)
    assert any(task.lease_expires_at is not None for task in before.values())
    assert {int(pid) % 32 for queue, pid in before if queue == "fifo"} == {0, 1}
    assert any(queue == "fail.dead" for queue, _ in before)
    done = kittiwake(*grow_args(old_file, new_file, directories, "--json", "--batch", "7"))
    assert done.returncode == 0, done.stderr
    report: dict[str, Any] = json.loads(done.stdout)
    assert report["moved"] > 0 and report["tasks_before"] == report["tasks_after"] == len(before)
    assert {row["to"] for row in report["by_node"]} == {"c"}
    assert not any(label.startswith("misplaced") for label in report["by_range"])
    assert report["leases_kept"] + report["leases_dropped"] > 0
    check_placed(new, directories, before)
    on_c = contents(directories["c"])
    assert any(queue.endswith("#q") for queue, _ in on_c) and any(queue == "jobs" for queue, _ in on_c)
    for key, task in on_c.items():  # a lease is kept only where the new map routes it to its task
        was = before[key]
        if was.lease_expires_at is not None:
            kept = lease_route(new, was.queue, was.pid, was.lease_id).node == "c"
            assert (task.lease_expires_at is not None) == kept, key
            assert task.lease_id == (was.lease_id if kept else 0)

    again = kittiwake(*grow_args(old_file, new_file, directories, "--json"))
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["moved"] == 0
    check_placed(new, directories, before)

    assert sorted(json.loads(done.stdout)["epochs_recorded"]) == ["a", "b", "c"]
    for name in "abc":
        store = SqliteStore(directories[name])
        counters = store.recover(0.0).counters
        store.close()
        assert recorded_identity(counters)[:2] == (name, new.epoch)

    nodes = started_nodes(new, new_file, directories)  # the grown stores serve again, as nodes of the new map
    try:
        with Client("kw://" + ",".join(str(node.address) for node in new.nodes)) as client:
            assert sum(stats.size for stats in client.stats()) == len(before)
            for node in new.node_names:  # every task on its new owner, as that node sees it
                with Client(nodes[node].url) as direct:
                    for key in [key for key, task in before.items() if key[0] == "jobs"]:
                        found = destination(new, before[key])
                        if found is not None and found.node == node:
                            assert direct.get(*key).pid == key[1]
    finally:
        for node in nodes.values():
            node.kill()
    old_node = NodeProcess(directories["a"], port=old.address_of("a").port, log_path=directories["a"].parent / "old-a.log",
                           args=["--durability", "os", "--cluster", str(old_file), "--node", "a"])
    with pytest.raises(BrokerDidNotStart) as refused:
        old_node.start()
    assert refused.value.returncode == 1 and "older map" in old_node.log_tail(), old_node.log_tail()


def started_nodes(cluster: ClusterMap, map_file: Path, directories: dict[str, Path]) -> dict[str, NodeProcess]:
    nodes: dict[str, NodeProcess] = {}
    try:
        for name in cluster.node_names:
            address = cluster.address_of(name)
            nodes[name] = NodeProcess(directories[name], host=address.host, port=address.port,
                                      log_path=directories[name].parent / f"{name}-new.log",
                                      args=["--durability", "os", "--cluster", str(map_file), "--node", name])
            nodes[name].start()
    except BaseException:
        for node in nodes.values():
            node.kill()
        raise
    return nodes


def test_a_grow_killed_half_way_and_run_again_loses_nothing_and_doubles_nothing(
    two_nodes: tuple[ClusterMap, ClusterMap, Path, Path, dict[str, Path]],
) -> None:
    old, new, old_file, new_file, directories = two_nodes
    before = everything(directories)
    killed = kittiwake(*grow_args(old_file, new_file, directories, "--json", "--batch", "3"),
                       env={CRASH_ENV: "2"})
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    halfway = {key for directory in directories.values() for key in contents(directory)}
    assert halfway == set(before)  # nothing lost, some on both stores
    done = kittiwake(*grow_args(old_file, new_file, directories, "--json", "--batch", "3"))
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["already_there"] >= 1
    check_placed(new, directories, before)


def test_grow_refuses_a_served_store_and_a_map_that_does_not_append(tmp_path: Path) -> None:
    old_file, new_file = cluster_file(tmp_path / "old.toml", 2), cluster_file(tmp_path / "new.toml", 3)
    directories = {name: tmp_path / f"store-{name}" for name in "abc"}
    broker = BrokerProcess(directories["a"])
    try:
        done = kittiwake(*grow_args(old_file, new_file, directories))
        assert done.returncode == 1
        assert "a broker serves" in done.stderr and "stop every node" in done.stderr
    finally:
        broker.terminate()
    swapped = tmp_path / "swapped.toml"
    swapped.write_text('slots = 64\n[nodes]\nb = "127.0.0.1:17002"\na = "127.0.0.1:17001"\nc = "127.0.0.1:17003"\n')
    done = kittiwake(*grow_args(old_file, swapped, directories))
    assert done.returncode == 1 and "same order" in done.stderr
    done = kittiwake(*grow_args(old_file, new_file, {"a": directories["a"], "b": directories["b"]}))
    assert done.returncode == 1 and "no store for c" in done.stderr


def test_status_says_a_stopped_node_is_down_and_exits_1(tmp_path: Path) -> None:
    brokers = [BrokerProcess(tmp_path / f"store-{name}") for name in "ab"]
    try:
        nodes = tuple(Node(name, Address("127.0.0.1", broker.port)) for name, broker in zip("ab", brokers))
        path = tmp_path / "cluster.toml"
        path.write_text(ClusterMap(nodes, SLOTS).to_toml())
        with Client(brokers[0].url) as client:
            client.enqueue("q", b"x", pid="p")
        brokers[1].terminate()
        for args in (["--cluster", str(path)], ["--url", f"kw://127.0.0.1:{brokers[0].port},127.0.0.1:{brokers[1].port}"]):
            done = kittiwake("cluster", "status", *args, "--json", "--timeout", "1")
            assert done.returncode == 1, done.stderr
            report = json.loads(done.stdout)
            up = {node["address"]: node["up"] for node in report["nodes"]}
            assert up == {f"127.0.0.1:{brokers[0].port}": True, f"127.0.0.1:{brokers[1].port}": False}
            first = report["nodes"][0]
            assert first["tasks"] == 1 and first["epoch"] is None  # a plain broker is no node
            assert set(report) >= {"nodes", "epoch", "load_deviation"}
        table = kittiwake("cluster", "status", "--cluster", str(path), "--timeout", "1")
        assert table.returncode == 1 and "down" in table.stdout
    finally:
        for broker in brokers:
            if broker.alive:
                broker.terminate()


def test_grow_records_the_new_epoch_where_stores_record_node_identities(tmp_path: Path) -> None:
    old_file, new_file = cluster_file(tmp_path / "old.toml", 2), cluster_file(tmp_path / "new.toml", 3)
    old, new = (ClusterMap.from_toml(path.read_text()) for path in (old_file, new_file))
    directories = {name: tmp_path / f"store-{name}" for name in "abc"}
    for name in "ab":
        store = SqliteStore(directories[name])
        owned = [f"k{index}" for index in range(40) if route(old, "jobs", f"k{index}") == Owned(
            name, slot_of(f"jobs\0k{index}", SLOTS), f"jobs\0k{index}")]
        store.write([PutTask(Task("jobs", pid, b"x", 1.0)) for pid in owned])
        store.write([SetCounter(f"cluster_node:{name}:{old.epoch}", 1)])
        store.commit()
        store.close()
    done = kittiwake(*grow_args(old_file, new_file, directories, "--json"))
    assert done.returncode == 0, done.stderr
    assert sorted(json.loads(done.stdout)["epochs_recorded"]) == ["a", "b", "c"]
    for name in "abc":
        store = SqliteStore(directories[name])
        counters = store.recover(0.0).counters
        store.close()
        assert recorded_identity(counters) == (name, new.epoch, 1 if name == "c" else 2)
    again = kittiwake(*grow_args(old_file, new_file, directories, "--json"))
    assert again.returncode == 0 and json.loads(again.stdout)["epochs_recorded"] == []
    swapped = {"a": directories["b"], "b": directories["a"], "c": directories["c"]}
    refused = kittiwake(*grow_args(old_file, new_file, swapped))
    assert refused.returncode == 1 and "belongs to node" in refused.stderr


def test_grow_moves_tasks_into_a_postgresql_node(tmp_path: Path) -> None:
    from kittiwake.store.location import open_store, parse_store_url
    from support.postgres import fresh_schema

    old_file, new_file = cluster_file(tmp_path / "old.toml", 2), cluster_file(tmp_path / "new.toml", 3)
    old, new = (ClusterMap.from_toml(path.read_text()) for path in (old_file, new_file))
    directories = {name: tmp_path / f"store-{name}" for name in "ab"}
    keys = {(f"g{index}#q" if index % 2 else "jobs", f"k{index}") for index in range(60)}
    for name in "ab":
        store = SqliteStore(directories[name])
        store.write([PutTask(Task(queue, pid, pid.encode(), 1.0)) for queue, pid in sorted(keys)
                     if isinstance(found := route(old, queue, pid), Owned) and found.node == name])
        store.commit()
        store.close()
    with fresh_schema() as (dsn, schema):
        url = f"{dsn}{'&' if '?' in dsn else '?'}schema={schema}"
        args = grow_args(old_file, new_file, directories, "--json") + ["--store", f"c={url}"]
        done = kittiwake(*args)
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["moved"] > 0
        store = open_store(parse_store_url(url))
        try:
            on_c = {(task.queue, task.pid) for summary in store.recover(0.0).queues
                    for task in store.scan(summary.queue, None, 1000)}
        finally:
            store.close()
    assert on_c and all(isinstance(found := route(new, q, p), Owned) and found.node == "c" for q, p in on_c)
    rest = set(contents(directories["a"])) | set(contents(directories["b"]))
    assert rest | on_c == keys and not rest & on_c


def test_a_node_holding_tasks_refuses_a_map_no_grow_recorded_and_an_empty_new_node_starts(
    two_nodes: tuple[ClusterMap, ClusterMap, Path, Path, dict[str, Path]],
) -> None:
    """Started on the grown map before `cluster grow` ran, an old node would serve a store whose tasks
    the new map routes elsewhere: invisible to get, enqueued again without dedupe. It refuses."""
    old, new, old_file, new_file, directories = two_nodes
    skipped = NodeProcess(directories["a"], port=new.address_of("a").port, log_path=directories["a"].parent / "a-skip.log",
                          args=["--durability", "os", "--cluster", str(new_file), "--node", "a"])
    with pytest.raises(BrokerDidNotStart) as refused:
        skipped.start()
    assert refused.value.returncode == 1, skipped.log_tail()
    assert "CLUSTER_IDENTITY" in skipped.log_tail() and "kittiwake cluster grow" in skipped.log_tail()
    fresh = NodeProcess(directories["c"], port=new.address_of("c").port, log_path=directories["c"].parent / "c-early.log",
                        args=["--durability", "os", "--cluster", str(new_file), "--node", "c"])
    fresh.start()  # a new, empty store may still be claimed
    fresh.terminate()
    done = kittiwake(*grow_args(old_file, new_file, directories, "--json"))
    assert done.returncode == 0, done.stderr
    nodes = started_nodes(new, new_file, directories)  # grow recorded the epoch: every node starts
    for node in nodes.values():
        node.kill()


def test_nodes_holding_tasks_take_a_map_that_changes_only_their_addresses(
    two_nodes: tuple[ClusterMap, ClusterMap, Path, Path, dict[str, Path]],
) -> None:
    """Moving a node to another port (or turning tls on) changes the map's epoch, not where any slot
    lies: the nodes start on it without a grow and serve every task they held."""
    old, _, old_file, _, directories = two_nodes
    before = everything({name: directories[name] for name in "ab"})
    ports = free_ports(len(old.nodes))
    moved = ClusterMap(tuple(Node(node.name, Address(node.address.host, port))
                             for node, port in zip(old.nodes, ports)), old.slots)
    assert moved.epoch != old.epoch and moved.placement == old.placement
    moved_file = old_file.parent / "moved.toml"
    moved_file.write_text(moved.to_toml())
    nodes = {name: NodeProcess(directories[name], port=moved.address_of(name).port,
                               log_path=directories[name].parent / f"{name}-moved.log",
                               args=["--durability", "os", "--cluster", str(moved_file), "--node", name])
             for name in "ab"}
    try:
        for node in nodes.values():
            node.start()
        url = "kw://" + ",".join(str(node.address) for node in moved.nodes)
        with Client(url) as client:
            assert sum(row.size for row in client.stats()) > 0
    finally:
        for node in nodes.values():
            node.kill()
    assert everything({name: directories[name] for name in "ab"}) == before


def test_grow_refuses_a_missing_store_of_an_old_node_and_creates_nothing(
    two_nodes: tuple[ClusterMap, ClusterMap, Path, Path, dict[str, Path]],
) -> None:
    old, new, old_file, new_file, directories = two_nodes
    before = everything(directories)
    typo = directories | {"a": directories["a"].parent / "node-A"}
    done = kittiwake(*grow_args(old_file, new_file, typo, "--json"))
    assert done.returncode == 1, done.stdout
    assert f"no store at {typo['a']}" in done.stderr, done.stderr
    assert not typo["a"].exists()
    assert everything(directories) == before  # nothing moved, no epoch recorded
    for name in "ab":
        store = SqliteStore(directories[name])
        counters = store.recover(0.0).counters
        store.close()
        assert recorded_identity(counters)[:2] == (name, old.epoch)


def test_grow_stops_at_another_task_under_a_moving_key_on_its_new_node(
    two_nodes: tuple[ClusterMap, ClusterMap, Path, Path, dict[str, Path]],
) -> None:
    """A task already on its new node is the old one's copy (a run interrupted before) only if it is
    the same task; another task under that key (enqueued on a node started early) stops the move, and
    the old copy stays."""
    old, new, old_file, new_file, directories = two_nodes
    before = everything(directories)
    moving = sorted(pid for queue, pid in before if queue == "jobs" and destination(new, before[("jobs", pid)]).node == "c")
    assert moving
    early = NodeProcess(directories["c"], port=new.address_of("c").port, log_path=directories["c"].parent / "c-early.log",
                        args=["--durability", "os", "--cluster", str(new_file), "--node", "c"])
    early.start()
    try:
        with Client(early.url) as client:
            assert not client.enqueue("jobs", b"another task", pid=moving[0]).collapsed
    finally:
        early.terminate()
    done = kittiwake(*grow_args(old_file, new_file, directories, "--json", "--batch", "1000"))
    assert done.returncode == 1, done.stdout
    assert repr(moving[0]) in done.stderr and "data differs" in done.stderr, done.stderr
    old_copy = before[("jobs", moving[0])]
    found = [contents(directories[name]).get(("jobs", moving[0])) for name in "ab"]
    assert any(task is not None and task.data == old_copy.data for task in found)
    assert contents(directories["c"])[("jobs", moving[0])].data == b"another task"


def groups_parted_by_growth(old: ClusterMap, new: ClusterMap) -> tuple[str, str]:
    """A group G that node a owns and the grow moves to c, and a group H that a owns before and after."""
    def owner(cluster: ClusterMap, group: str) -> str:
        found = route(cluster, f"{group}#x")
        assert isinstance(found, Owned)
        return found.node

    moving = next(f"G{i}" for i in range(1000) if owner(old, f"G{i}") == "a" and owner(new, f"G{i}") == "c")
    staying = next(f"H{i}" for i in range(1000) if owner(old, f"H{i}") == "a" and owner(new, f"H{i}") == "a")
    return moving, staying


def test_a_join_named_outside_its_job_queues_slot_is_refused_and_a_grouped_join_survives_a_grow(tmp_path: Path) -> None:
    """A join's declaration moves with its job queue while drop_join, purge_join and declare_join go by
    its name: named in another group, a grow could part them (drop_join then found nothing and the join
    still started jobs). A cluster refuses such a join; one named in its job queue's group is dropped,
    purged and declared again after the grow."""
    from kittiwake import errors

    old_nodes = ClusterNodes(tmp_path / "old", ["a", "b"], args=["--durability", "os"])
    new_file = new_map_file(old_nodes, tmp_path / "new.toml")
    old, new = ClusterMap.from_toml(old_nodes.map_path.read_text()), ClusterMap.from_toml(new_file.read_text())
    moving, staying = groups_parted_by_growth(old, new)
    with old_nodes:
        with Client(old_nodes.url) as client:
            with pytest.raises(errors.BadRequest) as refused:
                client.declare_join(f"{staying}#join", f"{moving}#job", required={"x": f"{moving}#px"})
            assert repr(staying) in refused.value.message and repr(moving) in refused.value.message
            assert client.declare_join(f"{moving}#join", f"{moving}#job",
                                       required={"x": f"{moving}#px", "y": f"{moving}#py"}) == "created"
            client.enqueue(f"{moving}#px", b"tok", pid="run1")
            client.enqueue(f"{moving}#px", b"tok", pid="run2")
        for node in old_nodes:
            node.terminate()
    directories = {name: old_nodes[name].data_dir for name in "ab"} | {"c": tmp_path / "store-c"}
    done = kittiwake(*grow_args(old_nodes.map_path, new_file, directories, "--json"))
    assert done.returncode == 0, done.stderr
    nodes = started_nodes(new, new_file, directories)
    try:
        with Client("kw://" + ",".join(str(node.address) for node in new.nodes)) as client:
            assert [join.name for join in client.list_joins()] == [f"{moving}#join"]
            client.purge_join(f"{moving}#join", "run2")
            assert client.declare_join(f"{moving}#join", f"{moving}#job",
                                       required={"x": f"{moving}#px", "y": f"{moving}#py"}) == "unchanged"
            assert client.drop_join(f"{moving}#join") is True
            assert client.list_joins() == []
            client.enqueue(f"{moving}#py", b"tok", pid="run1")
            assert client.peek(f"{moving}#job", 5) == []  # a dropped join starts nothing
    finally:
        for node in nodes.values():
            node.kill()


def test_grow_stops_at_a_join_declared_before_the_rule_that_it_would_part_from_its_name(tmp_path: Path) -> None:
    import msgspec

    from kittiwake.constants import JOINS_QUEUE
    from kittiwake.join_spec import JoinPort, JoinSpec

    old_file, new_file = cluster_file(tmp_path / "old.toml", 2), cluster_file(tmp_path / "new.toml", 3)
    old, new = (ClusterMap.from_toml(path.read_text()) for path in (old_file, new_file))
    moving, staying = groups_parted_by_growth(old, new)
    directories = {name: tmp_path / f"store-{name}" for name in "abc"}
    spec = JoinSpec(f"{staying}#join", f"{moving}#job", [JoinPort("x", f"{moving}#px")])
    for name in "ab":
        store = SqliteStore(directories[name])
        if name == "a":
            store.write([PutTask(Task(JOINS_QUEUE, spec.name, msgspec.msgpack.encode(spec), 1.0))])
        store.commit()
        store.close()
    done = kittiwake(*grow_args(old_file, new_file, directories, "--json"))
    assert done.returncode == 1, done.stdout
    assert repr(spec.name) in done.stderr and "drop it on the old map" in done.stderr, done.stderr
    assert (JOINS_QUEUE, spec.name) in contents(directories["a"])

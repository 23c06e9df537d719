"""A node SIGKILLed under load and restarted, over real processes: three nodes, each a host of its
own (a network namespace where root allows, else a loopback port: `hosts`), three producers and
three consumers with their own clients over `kw://a,b,c` (`cluster_load`).

What must hold: the queue checker finds lost 0 and unexpected 0 across the
cluster; the only repeated deliveries are the at-least-once redeliveries the docs allow (the
node died while the task was leased, or a lease ran out) plus, for a keyed push tried again after
an outcome it could not know, its task made again once the first had been dequeued (a pid
collapses repeats only while its task exists); while the node is down, FIFO pushes go to the
live nodes and keyed pushes to its slots fail with a transient error and succeed when retried
after it returns; the consumers of the other nodes never stall more than a second while live
nodes hold available tasks (`ClusterLoad.longest_stall`).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kittiwake import errors
from kittiwake.cluster.cluster_map import ID_STRIDE, ClusterMap
from kittiwake.cluster.routing import Owned, route
from support.checker import AFTER_ACK, EXPLAINED_REASONS, check

from .cluster_load import QUEUE, ClusterLoad, drain
from .hosts import TestHost, cluster_url, host_nodes
from .hosts import test_hosts as make_hosts

KILLED = "b"
MAX_VALUES = 4000  # per producer; the run is bounded by time first
BACKLOG_SECS = 1.0
BEFORE_KILL_SECS = 0.5
DOWN_SECS = 1.5
AFTER_RESTART_SECS = 2.5
MAX_STALL_SECS = 1.0
WORK_SECS = {"a": 0.0, "b": 0.05, "c": 0.05}  # a's consumer empties its node and steals from the others
TRANSIENT_CODES = {errors.BrokerUnreachable.code, errors.ConnectionLost.code, errors.RequestTimeout.code}


@pytest.fixture
def hosts() -> Iterator[list[TestHost]]:
    with make_hosts(3) as made:
        yield made


def test_a_node_killed_under_load_loses_nothing_and_the_others_keep_draining(
    tmp_path: Path, hosts: list[TestHost]
) -> None:
    with host_nodes(tmp_path, hosts, args=["--durability", "os"]) as nodes:
        cluster = ClusterMap.from_toml((tmp_path / "cluster.toml").read_text())
        url = cluster_url(hosts)
        load = ClusterLoad(url, {name: node.url for name, node in nodes.items()}, MAX_VALUES, WORK_SECS, seed=29)
        load.start_producers()
        try:
            time.sleep(BACKLOG_SECS)  # a backlog on every node, so consumers have tasks to find when b dies
            started = time.time()
            load.start_consumers()
            time.sleep(BEFORE_KILL_SECS)
            nodes[KILLED].kill()
            killed_at = load.history.crash(f"SIGKILL node {KILLED}").at
            time.sleep(DOWN_SECS)
            restarting_at = time.time()  # until here the node listened nowhere; it may answer before restart() returns
            nodes[KILLED].restart()
            restarted_at = time.time()
            time.sleep(AFTER_RESTART_SECS)
            producing_ended = time.time()
            load.finish_producing()
            time.sleep(0.5)
        finally:
            load.finish()
        drained = drain(url)
        result = check(load.history, drained)
        print(result.format())
        print("client errors:", dict(load.errors))

        assert result.valid, result.format()
        assert not result.failed_present, result.format()
        assert result.acknowledged > 500, result.format()
        # repeats: at-least-once redeliveries, or a keyed task made again by a retry after an unknown outcome
        for value in result.unexplained:
            assert value in load.keyed_unknown, (value, result.format())
        assert set(result.duplicate_reasons) <= {*EXPLAINED_REASONS, AFTER_ACK}, result.format()
        assert not load.keyed_pending, sorted(load.keyed_pending)[:5]

        # while the node was down: FIFO pushes went to the live nodes, keyed pushes to its slots failed
        killed_index = cluster.index_of(KILLED)
        while_down = [pushed for pushed in load.fifo_pushed if killed_at < pushed.at < restarting_at]
        assert while_down, "no FIFO push was acknowledged while the node was down"
        assert all(int(pushed.pid) % ID_STRIDE != killed_index for pushed in while_down)
        assert {int(pushed.pid) % ID_STRIDE for pushed in load.fifo_pushed} == {0, 1, 2}
        refused = [failure for failure in load.keyed_failures if killed_at <= failure.at]
        assert refused, "no keyed push to the dead node's slots failed"
        for failure in refused:
            owner = route(cluster, QUEUE, failure.value)
            assert isinstance(owner, Owned) and owner.node == KILLED, failure
            assert failure.error in TRANSIENT_CODES, failure

        # the consumers of the other nodes never stalled while live nodes held tasks
        stalls = {
            consumer: load.longest_stall(consumer, started, producing_ended,
                                         excluded=[(killed_at, restarted_at)] if consumer.endswith(KILLED) else [])
            for consumer in load.leases_at
        }
        print("longest stall while tasks were available on live nodes:", stalls)
        assert all(stall <= MAX_STALL_SECS for stall in stalls.values()), stalls

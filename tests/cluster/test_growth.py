"""Growing a cluster, the pure part: only appending grows; what moves goes to a new node only;
nothing moves between old nodes; FIFO pids of old nodes' residues stay; leases kept only where the
new map still routes them to the task; the status summary's figures."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kittiwake import errors
from kittiwake.cluster.cluster_map import ID_STRIDE, Address, ClusterMap, Node
from kittiwake.cluster.growth import (
    check_growth, destination, drop_lease, how_they_differ, keeps_lease, moved_slots, moved_task, parted_join, range_of,
    same_task,
)
from kittiwake.cluster.routing import Owned, route, tagged
from kittiwake.balance import load_deviation
from kittiwake.cluster.status import NodeStatus, node_urls, summarize, url_of
from kittiwake.constants import JOINS_QUEUE
from kittiwake.join_spec import JoinPort, JoinSpec
from kittiwake.model import Task

NAMES = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789_.:@/-", min_size=1, max_size=20).filter(
    lambda name: name != JOINS_QUEUE)  # the broker's own queue of join declarations, placed by their spec
PIDS = st.text(min_size=1, max_size=24).filter(lambda pid: "\0" not in pid)
GROUPS = st.text(alphabet="abcdefghij", min_size=1, max_size=6)


def cluster_of(count: int, slots: int = 256) -> ClusterMap:
    return ClusterMap(tuple(Node(f"n{i}", Address("127.0.0.1", 7000 + i)) for i in range(count)), slots)


def task(queue: str, pid: str, **fields: object) -> Task:
    return Task(queue, pid, b"x", 1.0, **fields)  # type: ignore[arg-type]


def owner(cluster: ClusterMap, queue: str, pid: str) -> str:
    found = destination(cluster, task(queue, pid))
    assert found is not None
    return found.node


QUEUES = st.one_of(NAMES, st.builds(lambda g, q: f"{g}#{q}", GROUPS, NAMES),
                   st.builds(lambda q: q + ".dead", NAMES), st.builds(lambda q: q + ".delayed", NAMES))
FIFO_PIDS = st.integers(min_value=10**16, max_value=10**17 - 1).map(str)
ANY_PIDS = st.one_of(PIDS, FIFO_PIDS, st.builds(tagged, GROUPS, PIDS),
                     st.builds(lambda p, t: f"{p}~{t}", FIFO_PIDS, st.integers(0, 10**9)))


@settings(max_examples=400, deadline=None)
@given(old=st.integers(1, 8), added=st.integers(1, 4), queue=QUEUES, pid=ANY_PIDS)
def test_a_key_that_moves_goes_to_a_new_node_and_never_between_old_ones(old: int, added: int, queue: str,
                                                                       pid: str) -> None:
    before, after = cluster_of(old), cluster_of(old + added)
    was, now = owner(before, queue, pid), owner(after, queue, pid)
    if was != now:
        assert after.index_of(now) >= old, (queue, pid, was, now)


@settings(max_examples=300, deadline=None)
@given(old=st.integers(1, 8), added=st.integers(1, 4), queue=NAMES, number=st.integers(10**16, 10**17 - 1))
def test_fifo_pids_of_old_residues_never_move(old: int, added: int, queue: str, number: int) -> None:
    before, after = cluster_of(old), cluster_of(old + added)
    pid = str(number)
    if number % ID_STRIDE < old:
        assert owner(before, queue, pid) == owner(after, queue, pid) == before.nodes[number % ID_STRIDE].name
    elif number % ID_STRIDE < old + added:  # a residue no old node had: now the new node's own
        assert owner(after, queue, pid) == after.nodes[number % ID_STRIDE].name


@settings(max_examples=200, deadline=None)
@given(old=st.integers(1, 6), group=GROUPS, queues=st.lists(NAMES, min_size=1, max_size=5), pid=ANY_PIDS)
def test_a_named_group_moves_whole(old: int, group: str, queues: list[str], pid: str) -> None:
    after = cluster_of(old + 1)
    owners = {owner(after, f"{group}#{queue}", pid) for queue in queues}
    owners.add(owner(after, f"{group}#{queues[0]}", "other"))
    assert len(owners) == 1


@settings(max_examples=200, deadline=None)
@given(old=st.integers(1, 6), queue=NAMES, pid=PIDS, death=st.integers(0, 10**9))
def test_dead_letters_and_delayed_entries_move_with_their_task(old: int, queue: str, pid: str, death: int) -> None:
    after = cluster_of(old + 1)
    home = owner(after, queue, pid)
    assert owner(after, queue + ".dead", f"{pid}~{death}") == home
    assert owner(after, queue + ".delayed", f"{death:017d}-{pid}") == home


def test_moved_slots_are_the_new_nodes_share_in_ranges() -> None:
    before, after = cluster_of(2, 64), cluster_of(3, 64)
    ranges = moved_slots(before, after)
    assert sum(r.count for r in ranges) == 64 // 3
    assert {r.target for r in ranges} == {"n2"}
    assert {r.source for r in ranges} == {"n0", "n1"}
    for slot in range(64):
        found = range_of(ranges, slot)
        assert (found is not None) == (before.owner(slot) != after.owner(slot))
        if found is not None:
            assert found.first <= slot <= found.last


def test_only_appending_grows() -> None:
    a, b, c = (Node(n, Address("127.0.0.1", 7000 + i)) for i, n in enumerate("abc"))
    old = ClusterMap((a, b), 64)
    check_growth(old, ClusterMap((a, b, c), 64))
    refusals = {
        "order": ClusterMap((b, a, c), 64),
        "slot count": ClusterMap((a, b, c), 128),
        "drops": ClusterMap((a,), 64),
        "adds no node": ClusterMap((a, b), 64),
        "addresses": ClusterMap((a, Node("b", Address("127.0.0.1", 9999)), c), 64),
    }
    for word, new in refusals.items():
        with pytest.raises(errors.BadRequest, match=word):
            check_growth(old, new)


def test_a_join_declaration_follows_its_job_queues_group_and_a_default_group_join_stays() -> None:
    after = cluster_of(3)
    spec = JoinSpec("j", "grp#jobs", [JoinPort("x", "grp#x")])
    declaration = Task(JOINS_QUEUE, "j", msgspec.msgpack.encode(spec), 1.0)
    found = destination(after, declaration)
    assert found is not None and found.node == owner(after, "grp#jobs", "j")
    spread = JoinSpec("k", "jobs", [JoinPort("x", "x")])
    assert destination(after, Task(JOINS_QUEUE, "k", msgspec.msgpack.encode(spread), 1.0)) is None


def test_a_lease_is_kept_only_where_the_new_map_routes_it_to_the_tasks_new_node() -> None:
    after = cluster_of(3)
    leased = dict(lease_id=32 * 5 + 0, lease_owner="w", leased_at=1.0, lease_expires_at=99.0, deliveries=1)
    group_task = task("grp#q", "p", **leased)
    home = owner(after, "grp#q", "p")
    assert keeps_lease(after, group_task, home)
    assert moved_task(after, group_task, home) is group_task
    spread_task = task("q", "p", **leased)  # its lease id names node n0 (residue 0)
    decision = route(after, "q", "p")
    assert isinstance(decision, Owned)
    if decision.node != "n0":
        moved = moved_task(after, spread_task, decision.node)
        assert moved.lease_expires_at is None and moved.lease_owner is None and moved.lease_id == 0
        assert (moved.attempts, moved.deliveries, moved.data) == (spread_task.attempts, 1, b"x")
    assert drop_lease(spread_task).lease_expires_at is None
    assert keeps_lease(after, task("q", "p"), "n2")  # no lease: nothing to drop


def test_load_deviation_and_health() -> None:
    assert load_deviation([]) == 0.0
    assert load_deviation([0, 0]) == 0.0
    assert load_deviation([90, 110]) == pytest.approx(10.0)
    up = [NodeStatus("a", "h:1", up=True, epoch="e", node=True, tasks=90),
          NodeStatus("b", "h:2", up=True, epoch="e", node=True, tasks=110)]
    assert summarize(up, "e").healthy
    assert not summarize(up, "other").healthy
    down = [up[0], NodeStatus("b", "h:2")]
    report = summarize(down, "e")
    assert not report.healthy and report.load_deviation == 0.0 and report.tasks == 90
    plain = [NodeStatus("a", "h:1", up=True), NodeStatus("b", "h:2", up=True)]
    assert not summarize(plain, None).epochs_agree


def test_cluster_urls_split_into_node_urls_with_their_credentials() -> None:
    scheme, credentials, addresses = node_urls("kw://u:t@127.0.0.1:1,[::1]:2")
    assert addresses == ["127.0.0.1:1", "[::1]:2"]
    assert url_of(scheme, credentials, addresses[1]) == "kw://u:t@[::1]:2"
    scheme, credentials, addresses = node_urls("kws://h:1,h:2?ca=/x.pem")
    assert url_of(scheme, credentials, "h:2") == "kws://h:2?ca=/x.pem"
    with pytest.raises(errors.BadRequest):
        node_urls("http://h:1")
    with pytest.raises(errors.BadRequest):
        node_urls("kw://h:1,nohost")


def test_a_copy_is_the_same_task_whatever_its_lease_and_another_enqueue_is_not() -> None:
    task = Task("jobs", "k1", b"v1", 10.0, sender="s", headers={"h": "1"}, max_attempts=3)
    leased = Task("jobs", "k1", b"v1", 10.0, sender="s", headers={"h": "1"}, max_attempts=3, attempts=1,
                  deliveries=2, lease_id=7, lease_expires_at=99.0)
    assert same_task(task, drop_lease(leased)) and same_task(task, leased)
    other = Task("jobs", "k1", b"v2", 11.0, sender="s", headers={"h": "1"}, max_attempts=3)
    assert not same_task(task, other)
    assert how_they_differ(task, other) == "data differs, enqueued_at differs"


def test_a_join_declared_apart_from_its_names_group_is_reported_when_a_grow_would_part_them() -> None:
    before, after = cluster_of(2), cluster_of(3)
    moving = next(f"g{i}" for i in range(1000) if owner(before, f"g{i}#x", "p") != owner(after, f"g{i}#x", "p"))
    staying = next(f"h{i}" for i in range(1000) if owner(after, f"h{i}#x", "p") != owner(after, f"{moving}#x", "p"))
    spec = JoinSpec(f"{staying}#j", f"{moving}#jobs", [JoinPort("x", f"{moving}#x")])
    declaration = Task(JOINS_QUEUE, spec.name, msgspec.msgpack.encode(spec), 1.0)
    assert "drop it on the old map" in (parted_join(after, declaration) or "")
    together = JoinSpec(f"{moving}#j", f"{moving}#jobs", [JoinPort("x", f"{moving}#x")])
    assert parted_join(after, Task(JOINS_QUEUE, together.name, msgspec.msgpack.encode(together), 1.0)) is None
    assert parted_join(after, Task("jobs", "p", b"", 1.0)) is None

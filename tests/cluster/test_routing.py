"""Routing: stable slots, a named group whole on one node, a (queue, pid) always on one node,
derived queues beside their task, tags together, and FIFO spreading within one task of even."""

from __future__ import annotations

import hashlib
import random
import subprocess
import sys
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kittiwake import errors
from kittiwake.cluster.cluster_map import ID_STRIDE, Address, ClusterMap, Node
from kittiwake.cluster.routing import (
    FifoSpreader,
    Owned,
    Spread,
    fold,
    is_fifo_pid,
    lease_route,
    route,
    slot_of,
    tag_key,
    tag_of,
    tagged,
    task_key,
)

NAMES = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789_.:@/-", min_size=1, max_size=30)
PIDS = st.text(min_size=1, max_size=30).filter(lambda pid: "\0" not in pid)


def cluster_of(count: int, slots: int = 1024) -> ClusterMap:
    return ClusterMap(tuple(Node(f"n{i}", Address("127.0.0.1", 7000 + i)) for i in range(count)), slots)


CLUSTER = cluster_of(5)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_slot_of_is_blake2b_of_the_utf8_and_the_same_in_another_process() -> None:
    keys = ["q\0p", "G", "é#ü", "\0job-1"]
    here = [slot_of(key, 1024) for key in keys]
    # another interpreter with another hash seed computes the same slots
    code = "import sys; from kittiwake.cluster.routing import slot_of; print([slot_of(k, 1024) for k in %r])" % keys
    there = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={"PYTHONHASHSEED": "12345", "PYTHONPATH": ":".join(sys.path)}).stdout
    assert there.strip() == str(here)
    assert here[0] == int.from_bytes(hashlib.blake2b(b"q\0p", digest_size=8).digest(), "big") % 1024


def test_slot_of_refuses_no_slots() -> None:
    with pytest.raises(errors.BadRequest):
        slot_of("q", 0)


@settings(max_examples=100, deadline=None)
@given(st.text(min_size=1, max_size=20, alphabet="abcdefghij_.-"), st.lists(NAMES, min_size=1, max_size=8), PIDS)
def test_a_named_groups_queues_all_live_on_one_node(group: str, names: list[str], pid: str) -> None:
    routes = {route(CLUSTER, f"{group}#{name}", pid) for name in names}
    routes |= {route(CLUSTER, f"{group}#{name}") for name in names}
    routes |= {route(CLUSTER, f"{group}#{names[0]}", "{job-1}" + pid)}
    assert len(routes) == 1
    only = routes.pop()
    assert isinstance(only, Owned) and only.key == group and only.slot == slot_of(group, CLUSTER.slots)


@settings(max_examples=100, deadline=None)
@given(NAMES, PIDS)
def test_the_same_queue_and_pid_always_go_to_one_node(queue: str, pid: str) -> None:
    decision = route(CLUSTER, queue, pid)
    assert isinstance(decision, Owned)
    assert decision == route(CLUSTER, queue, pid) == route(ClusterMap.from_toml(CLUSTER.to_toml()), queue, pid)
    if tag_of(pid) is None and not is_fifo_pid(pid) and fold(queue, pid) == (queue, pid):
        assert decision.node == CLUSTER.owner(slot_of(queue + "\0" + pid, CLUSTER.slots))


@settings(max_examples=100, deadline=None)
@given(NAMES, PIDS, st.integers(min_value=0, max_value=10**16))
def test_a_tasks_marker_dead_letters_and_delayed_entry_go_where_the_task_does(queue: str, pid: str, when: int) -> None:
    home = route(CLUSTER, queue, pid)
    assert route(CLUSTER, queue + ".ticks-done", pid) == home
    assert route(CLUSTER, queue + ".dead", f"{pid}~{when:016d}") == home
    assert route(CLUSTER, queue + ".delayed", f"{when:016d}-{pid}") == home
    assert task_key(queue + ".dead", f"{pid}~{when:016d}") == task_key(queue, pid)
    assert task_key(queue + ".delayed", f"{when:016d}-{pid}") == task_key(queue, pid)


def test_tasks_sharing_a_tag_go_together_whatever_their_queue_and_pid() -> None:
    decisions = {route(CLUSTER, queue, tagged("job-42", pid)) for queue in ("stage1", "stage2", "sink")
                 for pid in ("a", "b", "", "x{y}")}
    decisions |= {route(CLUSTER, "sink.dead", tagged("job-42", "a") + "~00000000000000001")}
    assert decisions == {Owned(CLUSTER.owner(slot_of("\0job-42", 1024)), slot_of("\0job-42", 1024), tag_key("job-42"))}
    assert tag_of("a{}b{t}c{u}") == "t" and tag_of("{") is None and tag_of("plain") is None
    # a tag key never equals a (queue, pid) key or a group's
    assert tag_key("q") != task_key("q", "") and tag_key("G").startswith("\0")


def test_a_fifo_pid_and_a_lease_id_name_the_node_that_issued_them() -> None:
    for index, node in enumerate(CLUSTER.node_names):
        number = 1_732_000_000_000_000 + index + ID_STRIDE * 1000
        pid = str(number).zfill(17)
        assert is_fifo_pid(pid)
        assert route(CLUSTER, "emails", pid).node == node  # type: ignore[union-attr]
        assert route(CLUSTER, "emails.dead", pid + "~" + "9" * 17).node == node  # type: ignore[union-attr]
        assert lease_route(CLUSTER, "emails", "anything", number).node == node
    # a residue no node of the map has falls back to the slot
    beyond = str(1_732_000_000_000_000 + 31).zfill(17)
    assert route(CLUSTER, "emails", beyond) == Owned(CLUSTER.owner(slot_of("emails\0" + beyond, 1024)),
                                                    slot_of("emails\0" + beyond, 1024), "emails\0" + beyond)
    # a group's lease goes to the group's owner whatever its id
    assert lease_route(CLUSTER, "g#q", "p", 3).node == CLUSTER.owner(slot_of("g", 1024))


def test_a_map_has_at_most_id_stride_nodes() -> None:
    with pytest.raises(errors.BadRequest, match="at most"):
        cluster_of(ID_STRIDE + 1)
    assert cluster_of(ID_STRIDE).index_of(f"n{ID_STRIDE - 1}") == ID_STRIDE - 1


def test_a_fifo_task_and_a_queue_wide_call_of_the_default_group_are_spread() -> None:
    assert route(CLUSTER, "emails") == Spread("emails")
    assert route(CLUSTER, "_replies.app-1") == Spread("_replies.app-1")


def test_a_named_group_named_like_a_tag_is_still_routed_by_its_group() -> None:
    decision = route(CLUSTER, "a#b#c", "p")
    assert isinstance(decision, Owned) and decision.key == "a#b"  # the group is all before the last '#'


@settings(max_examples=60, deadline=None)
@given(st.integers(min_value=1, max_value=9), st.integers(min_value=0, max_value=500), st.integers())
def test_fifo_spreading_stays_within_one_task_of_even(nodes: int, pushes: int, seed: int) -> None:
    names = [f"n{i}" for i in range(nodes)]
    spreader = FifoSpreader(names, rng=random.Random(seed), clock=FakeClock())
    counts = Counter(spreader.choose() for _ in range(pushes))
    per_node = [counts[name] for name in names]
    assert sum(per_node) == pushes and max(per_node) - min(per_node) <= 1


def test_spreaders_start_at_random_so_producers_started_together_do_not_pile_on_one_node() -> None:
    firsts = {FifoSpreader(["a", "b", "c"], rng=random.Random(seed), clock=FakeClock()).choose() for seed in range(40)}
    assert firsts == {"a", "b", "c"}


def test_a_node_marked_down_is_skipped_until_its_time_is_up_and_all_down_is_unreachable() -> None:
    clock = FakeClock()
    spreader = FifoSpreader(["a", "b", "c"], rng=random.Random(0), clock=clock, down_secs=2.0)
    spreader.mark_down("b")
    assert spreader.live() == ("a", "c")
    counts = Counter(spreader.choose() for _ in range(10))
    assert counts == Counter({"a": 5, "c": 5})
    clock.now += 2.0
    assert spreader.live() == ("a", "b", "c")
    assert {spreader.choose() for _ in range(3)} == {"a", "b", "c"}
    for node in "abc":
        spreader.mark_down(node)
    with pytest.raises(errors.BrokerUnreachable):
        spreader.choose()
    spreader.mark_up("c")
    assert spreader.choose() == "c"


def test_a_spreader_needs_a_node() -> None:
    with pytest.raises(errors.BadRequest):
        FifoSpreader([], rng=random.Random(0), clock=FakeClock())


def test_wrong_shard_is_a_stable_code_carrying_the_epoch() -> None:
    refusal = errors.WrongShard("slot 7 is n2's", epoch=CLUSTER.epoch)
    assert (refusal.code, refusal.epoch) == ("WRONG_SHARD", CLUSTER.epoch)
    assert not isinstance(refusal, errors.Transient)
    assert type(errors.error_for_code("WRONG_SHARD", "x")) is errors.WrongShard

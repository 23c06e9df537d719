"""A store records the cluster node it belongs to: recorded once, kept, moved forward by a new epoch,
and every other start refused with CLUSTER_IDENTITY naming both."""

from __future__ import annotations

import pytest

from kittiwake import errors
from kittiwake.engine.identity import NodeIdentity, claim, recorded, refuse_unrecorded

A1 = NodeIdentity("a", "1111111111111111")
A2 = NodeIdentity("a", "2222222222222222")
B1 = NodeIdentity("b", "1111111111111111")


def marks_after(*steps: NodeIdentity) -> dict[str, int]:
    marks: dict[str, int] = {"lease_id": 5}
    for step in steps:
        for counter in claim(marks, step, False, "the store"):
            marks[counter.name] = max(marks.get(counter.name, 0), counter.value)
    return marks


def test_an_empty_store_is_recorded_and_then_kept() -> None:
    marks = marks_after(A1)
    assert recorded(marks).current == A1
    assert claim(marks, A1, True, "the store") == []
    refuse_unrecorded({"lease_id": 5}, "the store")  # a plain broker's store: fine


def test_another_node_an_unrecorded_store_with_tasks_and_a_plain_broker_are_refused() -> None:
    marks = marks_after(A1)
    with pytest.raises(errors.ClusterIdentity, match="belongs to cluster node 'a'.*not to node 'b'"):
        claim(marks, B1, False, "the store")
    with pytest.raises(errors.ClusterIdentity, match="holds tasks"):
        claim({}, A1, True, "the store")
    with pytest.raises(errors.ClusterIdentity, match="--node a"):
        refuse_unrecorded(marks, "the store")


def test_a_new_epoch_moves_forward_and_the_old_one_is_refused_after() -> None:
    marks = marks_after(A1, A2)
    assert recorded(marks).current == A2
    with pytest.raises(errors.ClusterIdentity, match="moved on"):
        claim(marks, A1, False, "the store")


def test_a_store_holding_tasks_takes_no_new_epoch_grow_did_not_record() -> None:
    marks = marks_after(A1)
    with pytest.raises(errors.ClusterIdentity, match="kittiwake cluster grow"):
        claim(marks, A2, True, "the store")
    assert claim(marks, A2, False, "the store") == claim(marks, A2, False, "the store") != []  # nothing to move
    grown = marks | {"cluster_node:a:2222222222222222": 2}  # as `cluster grow` records it
    assert claim(grown, A2, True, "the store") == []


def test_a_new_epoch_of_the_same_placement_is_taken_by_a_store_holding_tasks() -> None:
    """A map that changes only addresses or tls keeps every key on its node: a node holding tasks
    takes its epoch once the placement it was recorded with is known, never another placement's."""
    marks = {"lease_id": 5}
    for counter in claim(marks, A1, False, "the store", "p1"):
        marks[counter.name] = counter.value
    assert marks["cluster_placement:1111111111111111:p1"] == 1
    taken = claim(marks, A2, True, "the store", "p1")
    assert {counter.name for counter in taken} == {"cluster_node:a:2222222222222222",
                                                   "cluster_placement:2222222222222222:p1"}
    with pytest.raises(errors.ClusterIdentity, match="kittiwake cluster grow"):
        claim(marks, A2, True, "the store", "p2")  # the slots lie elsewhere: grow moves them
    older = marks_after(A1)  # recorded before placements were: refused until a start on its own map
    with pytest.raises(errors.ClusterIdentity, match="kittiwake cluster grow"):
        claim(older, A2, True, "the store", "p1")
    assert [counter.name for counter in claim(older, A1, True, "the store", "p1")] == [
        "cluster_placement:1111111111111111:p1"]

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

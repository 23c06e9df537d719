"""Client calls, sans-IO: arguments become the protocol's request Structs, reply results typed records.

`received(call)` is the request as the broker decodes it from the bytes the call sends."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from kittiwake import errors
from kittiwake.client import EnqueueOutcome, ItemOutcome, LeasedTask, QueueStats, TaskView, UpdateResult, calls
from kittiwake.client.wire import encode_call
from kittiwake.model import LeaseRef, NewTask
from kittiwake.protocol import FrameReader, decode_request
from kittiwake.protocol import messages as m


def reply(value: Any) -> bytes:
    """The msgpack bytes of a result, as the broker sends them."""
    return msgspec.msgpack.encode(value)


def received(call: calls.Call[Any]) -> Any:
    """The request of a call as the broker decodes it (sent as request 1)."""
    return decode_request(encode_call(call, 1)[4:])


def leased(pid: str = "p1", lease_id: int = 7) -> LeasedTask:
    return LeasedTask(queue="q", pid=pid, data=b"x", lease_id=lease_id, expires_at=100.0)


def test_enqueue_leaves_unset_options_out() -> None:
    call = calls.enqueue("q", b"hello")
    assert call.op == "enqueue"
    assert received(call) == m.Enqueue(id=1, op="enqueue", tasks=[m.TaskIn(queue="q", data=b"hello")])
    [body] = FrameReader().feed(encode_call(call, 1))
    assert msgspec.msgpack.decode(body) == {"id": 1, "op": "enqueue", "tasks": [{"queue": "q", "data": b"hello"}]}


def test_enqueue_sends_str_data_as_utf8() -> None:
    call = calls.enqueue("q", "héllo", pid="a", headers={"k": "v"}, max_attempts=3)
    assert received(call).tasks[0] == m.TaskIn(
        queue="q", data="héllo".encode(), pid="a", headers={"k": "v"}, max_attempts=3,
    )


def test_enqueue_takes_handles_and_pairs_as_parents() -> None:
    parent = leased("p0")
    call = calls.enqueue("q", b"x", after=[parent, ("q", "p1"), {"queue": "q", "pid": "p2"}], unless=[("q", "p3")])
    task = received(call).tasks[0]
    assert (task.after, task.unless) == ([("q", "p0"), ("q", "p1"), ("q", "p2")], [("q", "p3")])
    with pytest.raises(errors.BadRequest, match="names a task"):
        calls.enqueue("q", b"x", after=[object()])
    with pytest.raises(errors.BadRequest, match="list of tasks"):
        calls.enqueue("q", b"x", after="q/p1")


@pytest.mark.parametrize(
    "kwargs",
    [
        {"queue": 5, "data": b"x"},
        {"queue": "q", "data": 5},
        {"queue": "q", "data": b"x", "pid": 1},
        {"queue": "q", "data": b"x", "headers": {"k": 1}},
        {"queue": "q", "data": b"x", "max_attempts": True},
        {"queue": "q", "data": b"x", "after": [("q", 5)]},
    ],
)
def test_enqueue_refuses_wrong_types_before_sending(kwargs: dict[str, Any]) -> None:
    queue, data = kwargs.pop("queue"), kwargs.pop("data")
    with pytest.raises(errors.BadRequest):
        calls.enqueue(queue, data, **kwargs)


def test_enqueue_many_takes_maps_and_new_tasks() -> None:
    call = calls.enqueue_many([{"queue": "q", "data": b"1"}, NewTask("q", b"2", pid="b", sender="s")])
    assert received(call).tasks == [
        m.TaskIn(queue="q", data=b"1"),
        m.TaskIn(queue="q", data=b"2", pid="b", sender="s"),
    ]


def test_enqueue_many_refuses_unknown_keys_and_missing_data() -> None:
    with pytest.raises(errors.BadRequest, match="unknown field `colour` - at `\\$.tasks\\[0\\]`"):
        calls.enqueue_many([{"queue": "q", "data": b"1", "colour": "red"}])
    with pytest.raises(errors.BadRequest, match="missing required field `data`"):
        calls.enqueue_many([{"queue": "q"}])
    with pytest.raises(errors.BadRequest, match="Expected `bytes`, got `null` - at `\\$.tasks\\[0\\].data`"):
        calls.enqueue_many([NewTask("q", None)])  # type: ignore[arg-type]
    with pytest.raises(errors.BadRequest):
        calls.enqueue_many({"queue": "q", "data": b"1"})  # a single map is not an iterable of tasks


def test_enqueue_decodes_the_single_outcome() -> None:
    call = calls.enqueue("q", b"x")
    outcome = call.decode(reply([{"queue": "q", "pid": "00000000000000001", "collapsed": False}]))
    assert outcome == EnqueueOutcome("q", "00000000000000001", False)


def test_lease_takes_one_name_or_many_and_marks_a_long_poll() -> None:
    assert received(calls.lease("q")).queues == ["q"]
    call = calls.lease(["a", "b"], max_tasks=5, wait_secs=2.5, receiver="r", worker="w")
    assert received(call) == m.Lease(
        id=1, op="lease", queues=["a", "b"], max_tasks=5, lease_secs=30.0, wait_secs=2.5, receiver="r", worker="w",
    )
    assert call.wait_secs == 2.5
    with pytest.raises(errors.BadRequest):
        calls.lease("q", wait_secs=-1)
    with pytest.raises(errors.BadRequest):
        calls.lease("q", max_tasks="3")  # type: ignore[arg-type]


def test_leased_task_reads_the_brokers_task_fields() -> None:
    task = {
        "queue": "q", "pid": "p", "data": b"d", "enqueued_at": 1.0, "sender": "s", "receiver": None,
        "headers": {"h": "v"}, "max_attempts": None, "attempts": 1, "deliveries": 2, "lease_id": 42,
        "lease_owner": "w1", "lease_peer": "127.0.0.1:5555", "leased_at": 9.0, "lease_expires_at": 39.0,
    }
    [got] = calls.lease("q").decode(reply([task]))
    assert (got.queue, got.pid, got.data, got.lease_id, got.expires_at) == ("q", "p", b"d", 42, 39.0)
    assert (got.attempts, got.deliveries, got.worker, got.sender, got.headers) == (1, 2, "w1", "s", {"h": "v"})
    assert got.lease_ref() == LeaseRef("q", "p", 42)


def test_one_lease_returns_its_outcome_or_raises() -> None:
    call = calls.dequeue(leased())
    assert received(call).leases == [m.LeaseRefIn(queue="q", pid="p1", lease_id=7)]
    assert call.decode(reply([{"queue": "q", "pid": "p1", "ok": True}])) == ItemOutcome("q", "p1", True)
    with pytest.raises(errors.TaskNotLeased, match="held by another"):
        call.decode(reply([{"queue": "q", "pid": "p1", "ok": False, "code": "TASK_NOT_LEASED",
                            "message": "held by another lease"}]))


def test_a_list_of_leases_returns_outcomes_and_never_raises_for_items() -> None:
    call = calls.release([leased("a"), LeaseRef("q", "b", 8), {"queue": "q", "pid": "c", "lease_id": 9}], "boom")
    assert [ref.pid for ref in received(call).leases] == ["a", "b", "c"]
    assert (received(call).reason, received(call).bury) == ("boom", False)
    outcomes = call.decode(reply([
        {"queue": "q", "pid": "a", "ok": True, "dead": True},
        {"queue": "q", "pid": "b", "ok": False, "code": "LEASE_EXPIRED", "message": "late"},
        {"queue": "q", "pid": "c", "ok": True},
    ]))
    assert [(o.ok, o.code, o.dead) for o in outcomes] == [(True, None, True), (False, "LEASE_EXPIRED", False),
                                                         (True, None, False)]


def test_renew_moves_the_expiry_of_the_tasks_it_was_given() -> None:
    first, second = leased("a"), leased("b")
    call = calls.renew([first, second], 60)
    assert received(call).lease_secs == 60.0
    call.decode(reply([
        {"queue": "q", "pid": "a", "ok": True, "expires_at": 160.0},
        {"queue": "q", "pid": "b", "ok": False, "code": "LEASE_EXPIRED", "message": "late"},
    ]))
    assert (first.expires_at, second.expires_at) == (160.0, 100.0)


def test_a_lease_ref_needs_all_three_parts() -> None:
    with pytest.raises(errors.BadRequest, match="queue, pid and lease_id"):
        calls.dequeue({"queue": "q", "pid": "p"})
    with pytest.raises(errors.BadRequest):
        calls.dequeue("q/p")  # type: ignore[arg-type]
    with pytest.raises(errors.BadRequest, match="Expected `int`, got `str` - at `\\$.leases\\[0\\].lease_id`"):
        calls.dequeue({"queue": "q", "pid": "p", "lease_id": "7"})


def test_update_builds_every_section_and_decodes_the_result() -> None:
    task = leased("a")
    call = calls.update(enqueue=[{"queue": "q", "data": b"n"}], dequeue=[leased("b")], renew=task, lease_secs=5)
    assert received(call) == m.Update(
        id=1,
        op="update",
        enqueue=[m.TaskIn(queue="q", data=b"n")],
        dequeue=[m.LeaseRefIn(queue="q", pid="b", lease_id=7)],
        renew=[m.LeaseRefIn(queue="q", pid="a", lease_id=7)],
        release=[],
        lease_secs=5.0,
    )
    result = call.decode(reply({
        "enqueued": [{"queue": "q", "pid": "n1", "collapsed": False}],
        "dequeued": [{"queue": "q", "pid": "b", "ok": True}],
        "renewed": [{"queue": "q", "pid": "a", "ok": True, "expires_at": 205.0}],
        "released": [],
    }))
    assert isinstance(result, UpdateResult)
    assert result.enqueued[0].pid == "n1" and result.dequeued[0].ok
    assert task.expires_at == 205.0


def test_inspection_calls() -> None:
    assert received(calls.peek("q", 3, "p")) == m.Peek(id=1, op="peek", queue="q", n=3, from_pid="p")
    assert received(calls.get("q", "p")) == m.Get(id=1, op="get", queue="q", pid="p")
    assert received(calls.find_by_sender("s")) == m.FindBySender(id=1, op="find_by_sender", sender="s", limit=100)
    assert received(calls.queues_for_receiver("r")) == m.QueuesForReceiver(id=1, op="queues_for_receiver", receiver="r")
    assert received(calls.list_queues("^a", 2, 5)) == m.ListQueues(
        id=1, op="list_queues", pattern="^a", min_tasks=2, limit=5
    )
    assert calls.delete_queue("q").decode(reply(12)) == 12
    assert received(calls.stats("q")) == m.Stats(id=1, op="stats", queues=["q"], sample=10)
    assert received(calls.stats(pattern="x")) == m.Stats(id=1, op="stats", pattern="x", sample=10)
    with pytest.raises(errors.BadRequest, match="Expected `int`, got `str` - at `\\$.n`"):
        calls.peek("q", "3")  # type: ignore[arg-type]


def test_task_views_and_stats_decode() -> None:
    view = {"queue": "q", "pid": "p", "data": b"d", "state": "leased", "enqueued_at": 3.0, "sender": None,
            "receiver": "r", "headers": None, "attempts": 0, "deliveries": 1, "lease_owner": "w",
            "lease_expires_at": 33.0}
    [got] = calls.peek("q").decode(reply([view]))
    assert got == TaskView(queue="q", pid="p", data=b"d", state="leased", enqueued_at=3.0, receiver="r",
                           deliveries=1, lease_owner="w", lease_expires_at=33.0)
    stats = {
        "queue": "q", "size": 3, "available": 2, "leased": 1, "dead": 0,
        "enqueue_rate_1m": 0.05, "enqueue_rate_5m": 0.01, "lease_rate_1m": 0.0, "lease_rate_5m": 0.0,
        "dequeue_rate_1m": 0.0, "dequeue_rate_5m": 0.0, "avg_lease_secs": None, "oldest_task_age_secs": 4.0,
        "leased_sample": [{"queue": "q", "pid": "p", "worker": "w", "peer": "127.0.0.1:1", "leased_at": 1.0,
                           "expires_at": 31.0}],
    }
    [got_stats] = calls.stats().decode(reply([stats]))
    assert isinstance(got_stats, QueueStats)
    assert got_stats.leased_sample[0].peer == "127.0.0.1:1"

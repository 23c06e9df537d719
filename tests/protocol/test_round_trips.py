"""Every op's round trip through bytes: client call → request frame → broker decode → dispatch →
engine → reply frame → client decode, over `support.wire_pair` (no socket, no process).

Each scenario runs through `Client` and through `AsyncClient`; the last test checks that the
scenarios here reach every op of the protocol.
"""

from __future__ import annotations

from typing import Any, Iterator

import pytest

from kittiwake import NewTask, errors
from kittiwake.client import (
    DeadLetterPage,
    EnqueueOutcome,
    ItemOutcome,
    LeasedTask,
    LeaseRef,
    LeaseSample,
    QueueInfo,
    QueueStats,
    TaskView,
    UpdateResult,
    calls,
)
from kittiwake.protocol import REQUEST_TYPES, decode_reply, encode_frame, encode_request
from kittiwake.protocol.replies import (
    AnnounceResult,
    AuthResult,
    CancelWaitResult,
    ClusterMapResult,
    HoldersResult,
    JoinInfo,
)
from support.wire_pair import PEER, START, WirePair, any_client

OPS_REACHED: set[str] = set()


@pytest.fixture
def pair() -> Iterator[WirePair]:
    made = WirePair()
    yield made
    OPS_REACHED.update(made.ops)


@pytest.fixture(params=["Client", "AsyncClient"])
def client(request: pytest.FixtureRequest, pair: WirePair) -> Any:
    return any_client(pair, request.param, worker="w1")


def test_ping_answers_the_brokers_clock(client: Any) -> None:
    assert client.ping() == {"now": START}


def test_enqueue_and_enqueue_many(client: Any) -> None:
    outcome = client.enqueue("q", "text", pid="a", sender="s", receiver="r", headers={"k": "v"}, max_attempts=3)
    assert outcome == EnqueueOutcome("q", "a", False)
    assert client.enqueue("q", b"again", pid="a").collapsed
    outcomes = client.enqueue_many([
        {"queue": "q", "data": b"b", "pid": "b"},
        NewTask("q", b"c", pid="c", after=[("q", "a")]),
    ])
    assert outcomes == [EnqueueOutcome("q", "b", False), EnqueueOutcome("q", "c", False)]
    fifo = client.enqueue("fifo", b"x")
    assert len(fifo.pid) == 17 and not fifo.collapsed
    assert client.enqueue("q", b"late", pid="z", unless=[("q", "a")]).collapsed


def test_lease_hands_out_leased_tasks(client: Any, pair: WirePair) -> None:
    client.enqueue("q", b"one", pid="a", sender="s", headers={"k": "v"}, max_attempts=4)
    client.enqueue("q", b"two", pid="b")
    tasks = client.lease("q", max_tasks=5, lease_secs=60, receiver="r")
    assert [type(task) for task in tasks] == [LeasedTask, LeasedTask]
    first = tasks[0]
    assert (first.queue, first.pid, first.data, first.sender, first.headers, first.max_attempts) == (
        "q", "a", b"one", "s", {"k": "v"}, 4)
    assert (first.attempts, first.deliveries, first.worker, first.leased_at, first.expires_at) == (
        0, 1, "w1", START, START + 60)
    assert first.lease_id > 0 and first.lease_ref() == LeaseRef("q", "a", first.lease_id)
    assert client.lease("q", wait_secs=2) == []  # nothing left: a long-poll here answers at once
    assert client.lease(["q", "other"], worker="w2") == []


def test_renew_dequeue_and_release_one_or_many(client: Any, pair: WirePair) -> None:
    client.enqueue_many([{"queue": "q", "data": b"", "pid": pid, "max_attempts": 1} for pid in "abc"])
    a, b, c = client.lease("q", max_tasks=3, lease_secs=10)
    pair.now += 5
    renewed = client.renew(a, 30, progress=0.5, note="half way")
    assert renewed == ItemOutcome("q", "a", True, expires_at=START + 35)
    assert a.expires_at == START + 35  # moved forward in place
    assert (client.get("q", "a").progress, client.get("q", "a").note) == (0.5, "half way")
    outcomes = client.renew([b, LeaseRef("q", "nope", 1)], 20)
    assert [(o.pid, o.ok, o.code) for o in outcomes] == [("b", True, None), ("nope", False, "TASK_NOT_FOUND")]
    assert b.expires_at == START + 25
    assert client.dequeue(a) == ItemOutcome("q", "a", True)
    with pytest.raises(errors.TaskNotFound):
        client.dequeue(a)
    [released] = client.release([b], "boom")
    assert (released.ok, released.dead) == (True, True)  # its only attempt
    assert client.release(c, bury=True).dead
    with pytest.raises(errors.TaskNotFound):
        client.release({"queue": "q", "pid": "c", "lease_id": c.lease_id})


def test_cancel_one_or_many(client: Any) -> None:
    client.enqueue_many([{"queue": "q", "data": b"", "pid": pid} for pid in "ab"])
    assert client.cancel(("q", "a"), "no longer wanted") == ItemOutcome("q", "a", True, dead=True)
    [outcome] = client.cancel([("q", "b")])
    assert outcome.ok
    [missing] = client.cancel([("q", "zz")])
    assert (missing.ok, missing.code) == (False, "TASK_NOT_FOUND")
    with pytest.raises(errors.TaskNotFound):
        client.cancel(("q", "zz"))


def test_update_does_every_section_at_once(client: Any, pair: WirePair) -> None:
    client.enqueue_many([{"queue": "g#in", "data": b"", "pid": pid} for pid in "abc"])
    a, b, c = client.lease("g#in", max_tasks=3, lease_secs=10)
    result = client.update(enqueue=[{"queue": "g#out", "data": b"next", "pid": "n"}], dequeue=[a], renew=b,
                           release=[c], lease_secs=50, reason="retry")
    assert isinstance(result, UpdateResult)
    assert result.enqueued == [EnqueueOutcome("g#out", "n", False)]
    assert [(o.pid, o.ok) for o in result.dequeued + result.renewed + result.released] == [
        ("a", True), ("b", True), ("c", True)]
    assert b.expires_at == START + 50
    with pytest.raises(errors.CrossGroupUpdate):
        client.update(enqueue=[{"queue": "other#x", "data": b""}], dequeue=[b])


def test_peek_get_and_find_by_sender_show_task_views(client: Any, pair: WirePair) -> None:
    client.enqueue("q", b"one", pid="a", sender="s", receiver="r", headers={"k": "v"})
    client.enqueue("q", b"two", pid="b", sender="s", after=[("q", "a")])
    client.lease("q", lease_secs=30, receiver="r")
    views = client.peek("q", 10)
    assert [type(view) for view in views] == [TaskView, TaskView]
    assert views[0] == TaskView(queue="q", pid="a", data=b"one", state="leased", enqueued_at=START, sender="s",
                                receiver="r", headers={"k": "v"}, deliveries=1, lease_owner="w1",
                                lease_expires_at=START + 30, children=1)
    assert (views[1].state, views[1].waiting_on) == ("blocked", 1)
    assert client.peek("q", 1, "b") == [views[1]]
    assert client.get("q", "b") == views[1]
    assert client.find_by_sender("s") == views
    assert client.find_by_sender("s", "elsewhere", 5) == []
    with pytest.raises(errors.TaskNotFound):
        client.get("q", "zz")


def test_queue_listings_and_stats(client: Any, pair: WirePair) -> None:
    client.enqueue_many([{"queue": "jobs", "data": b"", "pid": pid, "receiver": "r"} for pid in "abc"])
    client.enqueue("mail", b"")
    client.lease("jobs", max_tasks=2, lease_secs=30, receiver="r")
    assert client.queues_for_receiver("r") == ["jobs"]
    assert client.list_queues() == [QueueInfo("jobs", 3, 2), QueueInfo("mail", 1, 0)]
    assert client.list_queues("^j", min_tasks=3, limit=1) == [QueueInfo("jobs", 3, 2)]
    [stats] = client.stats("jobs", sample=1)
    assert isinstance(stats, QueueStats)
    counts = (stats.size, stats.available, stats.leased, stats.dead, stats.blocked)
    assert (stats.queue, counts) == ("jobs", (3, 1, 2, 0, 0))
    assert stats.enqueue_rate_1m == pytest.approx(3 / 60) and stats.oldest_task_age_secs == 0.0
    assert stats.leased_sample == [LeaseSample("jobs", "a", "w1", PEER, START, START + 30)]
    assert [s.queue for s in client.stats(pattern="^m")] == ["mail"]
    assert client.delete_queue("mail") == 1
    assert [s.queue for s in client.stats()] == ["jobs"]


def test_dead_letters_are_requeued_and_purged_by_page(client: Any) -> None:
    client.enqueue_many([{"queue": "q", "data": b"", "pid": pid} for pid in "abc"])
    for task in client.lease("q", max_tasks=3):
        client.release(task, "boom", bury=True)
    page = client.requeue_dead("q", ["a"])
    assert isinstance(page, DeadLetterPage) and page.next_pid is None
    assert [(o.queue, o.ok) for o in page.outcomes] == [("q.dead", True)]
    first = client.purge_dead("q", limit=1)
    assert len(first.outcomes) == 1 and first.next_pid is not None
    rest = client.purge_dead("q", after_pid=first.next_pid, limit=10)
    assert len(rest.outcomes) == 1 and rest.next_pid is None
    assert client.requeue_dead("q", ["zz"]).outcomes[0].code == "TASK_NOT_FOUND"
    assert [view.pid for view in client.peek("q")] == ["a"]


def test_joins_are_declared_listed_purged_and_dropped(client: Any) -> None:
    assert client.declare_join("j", "jobs", required={"a": "in.a"}, sequence={"s": "in.s"}) == "created"
    client.enqueue("in.a", b"", pid="r1")
    [info] = client.list_joins()
    assert isinstance(info, JoinInfo)
    assert (info.name, info.ports, info.tokens_waiting) == ("j", [("a", "in.a", "required"), ("s", "in.s", "sequence")], 1)
    assert client.purge_join("j", "r1") == 1
    assert client.drop_join("j") is True


def test_auth_and_cancel_wait_are_answered_with_their_records(pair: WirePair) -> None:
    assert pair.call(calls.auth("alice", "secret")) == AuthResult(None)  # no auth file: anyone is let in
    assert pair.call(calls.cancel_wait(12)) == CancelWaitResult(False)


def _cluster_call(op: str, fields: dict[str, Any]) -> Any:
    from kittiwake.protocol.replies import result_decoder

    return calls.Call(calls.request(op, fields), result_decoder(op))


def test_a_broker_that_is_no_node_answers_the_cluster_ops_as_such(pair: WirePair) -> None:
    assert pair.call(_cluster_call("cluster_map", {})) == ClusterMapResult(node=None, epoch="", slots=0, nodes=[])
    assert pair.call(_cluster_call("holders", {"queues": ["q"]})) == HoldersResult(epoch="", holders={"q": []})
    with pytest.raises(errors.BadRequest, match="no cluster node"):
        pair.call(_cluster_call("announce", {"node": "a", "epoch": "0" * 16, "holding": ["q"]}))


def test_a_node_answers_its_map_its_holders_and_its_peers_announcements() -> None:
    from kittiwake.cluster.cluster_map import ClusterMap
    from kittiwake.cluster.node import ClusterNode

    cluster = ClusterMap.from_toml('[nodes]\na = "127.0.0.1:7001"\nb = "127.0.0.1:7002"\n')
    node = ClusterNode(cluster, "b")
    pair = WirePair(extension=node)
    answer = pair.call(_cluster_call("cluster_map", {}))
    assert (answer.node, answer.epoch, answer.slots) == ("b", cluster.epoch, 1024)
    assert [(n.name, n.address) for n in answer.nodes] == [("a", "127.0.0.1:7001"), ("b", "127.0.0.1:7002")]
    announced = _cluster_call("announce", {"node": "a", "epoch": cluster.epoch, "holding": ["q", "r"], "full": True})
    assert pair.call(announced) == AnnounceResult(node="b")
    node.holdings.observe({"q": 3})
    assert pair.call(_cluster_call("holders", {"queues": ["q", "r", "s"]})) == HoldersResult(
        epoch=cluster.epoch, holders={"q": ["b", "a"], "r": ["a"], "s": []})
    with pytest.raises(errors.WrongShard) as refused:
        pair.call(_cluster_call("announce", {"node": "a", "epoch": "f" * 16}))
    assert refused.value.epoch == cluster.epoch
    with pytest.raises(errors.BadRequest, match="not a peer"):
        pair.call(_cluster_call("announce", {"node": "z", "epoch": cluster.epoch}))
    OPS_REACHED.update(pair.ops)


def test_the_brokers_refusals_come_back_as_their_errors(client: Any, pair: WirePair) -> None:
    with pytest.raises(errors.BadRequest, match="queue name"):
        client.enqueue("bad name!", b"")
    with pytest.raises(errors.BadRequest, match="lease_secs"):
        client.lease("q", lease_secs=0)
    with pytest.raises(errors.BadRequest, match="wait_secs"):
        client.lease("q", wait_secs=10_000)
    before = len(pair.requests)
    with pytest.raises(errors.BadRequest, match="Expected `str`"):
        client.get("q", 5)  # refused before anything is sent
    assert len(pair.requests) == before


def test_a_malformed_request_is_answered_with_its_error(pair: WirePair) -> None:
    frames = pair.broker_receive(encode_frame(encode_request("peek", 9, {"queue": 5})))
    reply = decode_reply(frames[4:])
    assert (reply.id, reply.ok, reply.error["code"]) == (9, False, "BAD_REQUEST")


def test_every_op_has_a_round_trip_here() -> None:
    if not OPS_REACHED:
        pytest.skip("counts the ops the other tests of this module reached: run it with them")
    missing = set(REQUEST_TYPES) - OPS_REACHED
    assert not missing, f"no round trip of {sorted(missing)} (run the whole module)"

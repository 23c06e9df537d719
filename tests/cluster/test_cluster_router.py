"""The cluster client's router, pure: conversations driven by fake nodes that answer in memory.

Each fake node keeps its queues as a dict; a send is answered by encoding what the node would
reply and decoding it with the send's own call, as a channel does.
"""

from __future__ import annotations

import random
from typing import Any, Callable

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kittiwake import errors
from kittiwake.client import calls
from kittiwake.client.cluster_channel import drive
from kittiwake.client import cluster_router as router_module
from kittiwake.client.cluster_router import AGAIN, Router, Send, Step
from kittiwake.cluster.cluster_map import Address, ClusterMap, Node
from kittiwake.cluster.routing import Owned, dead_letter_route, route
from kittiwake.model import EnqueueOutcome, ItemOutcome, QueueInfo
from kittiwake.protocol import messages as m
from kittiwake.protocol.replies import ClusterMapResult, ClusterNode, DeadLetterPage, HoldersResult

Answer = Callable[[Send], Any]


def make_map(names: str = "abc") -> ClusterMap:
    return ClusterMap(tuple(Node(name, Address("127.0.0.1", 7000 + i)) for i, name in enumerate(names)))


def make_router(cluster: ClusterMap | None = None, near: str = "a", seeds: tuple[Address, ...] = ()) -> Router:
    return Router(seeds=seeds, cluster_map=cluster, near=near, rng=random.Random(7), clock=lambda: 0.0)


def reply(send: Send, value: Any) -> Any:
    return send.call.decode(msgspec.msgpack.encode(value))


def run(router: Router, call: Any, answer: Answer, log: list[Send] | None = None) -> Any:
    def send_step(step: Step) -> list[Any]:
        if log is not None:
            log.extend(step)
        outcomes = []
        for send in step:
            try:
                outcomes.append(answer(send))
            except errors.KittiwakeError as exc:
                outcomes.append(exc)
        return outcomes

    # as the channels run a call: its direct send first where it has one, then the conversation
    send = router.direct(call, None)
    if send is None:
        return drive(router.conversation(call, None), send_step)
    outcome = send_step((send,))[0]
    result = router.settle(send, outcome)
    if result is not AGAIN:
        return result
    return drive(router.conversation(call, None, tried=(send, outcome)), send_step)


def echo_enqueue(send: Send) -> Any:
    request = send.call.request
    assert isinstance(request, m.Enqueue)
    return reply(send, [EnqueueOutcome(t.queue, t.pid or f"fifo-{send.node}", False) for t in request.tasks])


tasks_strategy = st.lists(
    st.tuples(st.sampled_from(["q", "r", "g#q", "h#r"]), st.one_of(st.none(), st.text("abcxyz{}", min_size=1, max_size=6))),
    min_size=1, max_size=30,
)


@given(tasks_strategy)
@settings(max_examples=60, deadline=None)
def test_a_split_enqueue_sends_each_keyed_task_to_its_owner_and_merges_in_order(tasks: list[tuple[str, str | None]]) -> None:
    cluster = make_map()
    router = make_router(cluster)
    log: list[Send] = []
    call = calls.enqueue_many([{"queue": queue, "data": b"", "pid": pid} for queue, pid in tasks])
    outcomes = run(router, call, echo_enqueue, log)
    assert [o.queue for o in outcomes] == [queue for queue, _ in tasks]
    for (queue, pid), outcome in zip(tasks, outcomes):
        decision = route(cluster, queue, pid)
        if isinstance(decision, Owned):
            assert outcome.pid == (pid if pid is not None else f"fifo-{decision.node}")
    assert len({send.node for send in log}) == len(log)  # one request per node, one step
    assert router.routing_stats().hops.get("enqueue", 0) == 0


def test_only_a_single_task_enqueue_goes_direct_and_it_is_counted_as_one_request() -> None:
    cluster = make_map()
    router = make_router(cluster)
    assert router.direct(calls.get("q", "k"), None) is None
    assert router.direct(calls.enqueue_many([{"queue": "q", "data": b""}] * 2), None) is None
    assert make_router(None, seeds=(Address("127.0.0.1", 7000),)).direct(calls.enqueue("q", b""), None) is None
    keyed = router.direct(calls.enqueue("q", b"", pid="k1"), None)
    owner = route(cluster, "q", "k1")
    assert keyed is not None and isinstance(owner, Owned) and keyed.node == owner.node and not keyed.quick
    fifo = router.direct(calls.enqueue("q", b""), None)
    assert fifo is not None and fifo.quick  # another node could take it
    assert router.settle(fifo, echo_enqueue(fifo)).pid == f"fifo-{fifo.node}"
    stats = router.routing_stats()
    assert (stats.calls["enqueue"], stats.requests["enqueue"], stats.hops.get("enqueue", 0)) == (1, 1, 0)


def test_fifo_pushes_spread_within_one_and_skip_an_unreachable_node() -> None:
    router = make_router(make_map())
    counts: dict[str, int] = {}

    def answer(send: Send) -> Any:
        if send.node == "b":
            raise errors.BrokerUnreachable("b is down")
        counts[send.node] = counts.get(send.node, 0) + 1
        return echo_enqueue(send)

    for _ in range(10):
        run(router, calls.enqueue("q", b""), answer)
    assert sum(counts.values()) == 10 and set(counts) == {"a", "c"}
    assert abs(counts["a"] - counts["c"]) <= 1


def test_a_keyed_task_on_an_unreachable_node_raises_the_transient_error() -> None:
    cluster = make_map()
    router = make_router(cluster)
    pid = next(p for p in (f"k{i}" for i in range(100)) if route(cluster, "q", p) == route(cluster, "q", "k0"))
    owner = route(cluster, "q", pid)
    assert isinstance(owner, Owned)

    def answer(send: Send) -> Any:
        raise errors.BrokerUnreachable("down")

    with pytest.raises(errors.BrokerUnreachable):
        run(router, calls.enqueue("q", b"", pid=pid), answer)


def test_a_split_enqueue_applied_in_part_says_its_outcome_is_unknown_not_unreachable() -> None:
    # the parts of the live nodes were committed, then the call raised BROKER_UNREACHABLE for the part
    # of a dead node: a caller retrying on that transient error enqueued the committed tasks twice
    cluster = make_map()
    router = make_router(cluster)

    def pid_on(node: str, skip: int = 0) -> str:
        found = [p for p in (f"k{i}" for i in range(1000)) if getattr(route(cluster, "q", p), "node", None) == node]
        return found[skip]

    def answer(send: Send) -> Any:
        if send.node == "c":
            raise errors.BrokerUnreachable("c is down")
        return echo_enqueue(send)

    def task(pid: str) -> dict[str, Any]:
        return {"queue": "q", "data": b"x", "pid": pid}

    with pytest.raises(errors.ConnectionLost, match="applied in part: 2 of 3"):
        run(router, calls.enqueue_many([task(pid_on("a")), task(pid_on("b")), task(pid_on("c"))]), answer)
    with pytest.raises(errors.BrokerUnreachable):  # nothing applied: the part's own error
        run(router, calls.enqueue_many([task(pid_on("c")), task(pid_on("c", 1))]), answer)


def test_a_split_enqueue_refused_by_one_node_and_cut_on_another_says_its_outcome_is_unknown() -> None:
    # FORBIDDEN says nothing of the call was applied (a producer then sends the batch again in
    # parts); the part cut mid-request may have been: that must be what the call raises
    cluster = make_map("ab")
    router = make_router(cluster)
    keys = {node: next(p for p in (f"k{i}" for i in range(1000))
                       if getattr(route(cluster, "q", p), "node", None) == node) for node in "ab"}

    def answer(send: Send) -> Any:
        if send.node == "a":
            raise errors.Forbidden("may not produce")
        raise errors.ConnectionLost("cut")

    call = calls.enqueue_many([{"queue": "q", "data": b"x", "pid": keys[node]} for node in "ab"])
    with pytest.raises(errors.ConnectionLost, match="cut"):
        run(router, call, answer)
    with pytest.raises(errors.Forbidden):  # both refused: nothing applied
        run(router, call, lambda send: (_ for _ in ()).throw(errors.Forbidden("may not produce")))


def test_a_fifo_task_after_a_parent_goes_to_its_parents_node_in_one_hop() -> None:
    # it was spread like any FIFO push, refused with WRONG_SHARD, and routed again after a map fetch
    cluster = make_map()
    router = make_router(cluster)
    parent = str(10**16 * 3 + 1)  # a FIFO pid of residue 1: node b's
    log: list[Send] = []
    for _ in range(3):
        run(router, calls.enqueue("q", b"", after=[("q", parent)]), echo_enqueue, log)
    assert [send.node for send in log] == ["b", "b", "b"]


def test_wrong_shard_refetches_the_map_and_routes_again() -> None:
    old, new = make_map("ab"), make_map("abc")
    router = make_router(old)
    pid = next(p for p in (f"k{i}" for i in range(1000)) if route(new, "q", p) != route(old, "q", p))
    new_owner = route(new, "q", pid)
    assert isinstance(new_owner, Owned)
    log: list[Send] = []

    def answer(send: Send) -> Any:
        if send.call.op == "cluster_map":
            nodes = [ClusterNode(n.name, str(n.address)) for n in new.nodes]
            return reply(send, ClusterMapResult(node=send.node, epoch=new.epoch, slots=new.slots, nodes=nodes))
        if send.node != new_owner.node:
            raise errors.WrongShard("not mine", epoch=new.epoch)
        return echo_enqueue(send)

    outcome = run(router, calls.enqueue("q", b"", pid=pid), answer, log)
    assert outcome.pid == pid
    assert [send.call.op for send in log] == ["enqueue", "cluster_map", "enqueue"]
    assert router.cluster_map == new
    assert router.routing_stats().hops["enqueue"] == 2


def test_wrong_shard_is_retried_a_bounded_number_of_times() -> None:
    cluster = make_map()
    router = make_router(cluster)

    def answer(send: Send) -> Any:
        if send.call.op == "cluster_map":
            nodes = [ClusterNode(n.name, str(n.address)) for n in cluster.nodes]
            return reply(send, ClusterMapResult(node="a", epoch=cluster.epoch, slots=cluster.slots, nodes=nodes))
        raise errors.WrongShard("never mine", epoch="x")

    with pytest.raises(errors.WrongShard):
        run(router, calls.get("q", "k"), answer)


def test_dead_letters_named_by_pid_page_on_each_node_and_a_refused_part_goes_on_from_its_cursor() -> None:
    # each node's page was matched one outcome per named pid and its next_pid dropped; here a node's
    # pages go on from its own cursor, also after the map changed under a part half walked
    old, new = make_map("ab"), make_map("abc")
    router = make_router(old)

    def owner_in(cluster: ClusterMap, pid: str) -> str:
        decision = dead_letter_route(cluster, "q", pid)
        assert isinstance(decision, Owned)
        return decision.node

    moved = next(p for p in (f"k{i}" for i in range(1000)) if owner_in(old, p) == "a" and owner_in(new, p) == "c")
    stays = next(p for p in (f"k{i}" for i in range(1000)) if owner_in(old, p) == owner_in(new, p) == "b")
    letters = sorted(f"{pid}~{n:017}" for pid in (moved, stays) for n in range(1, 6))
    served = {"a": old}  # node a answers by the old map until it has given one page, then by the new one
    log: list[Send] = []

    def answer(send: Send) -> Any:
        if send.call.op == "cluster_map":
            nodes = [ClusterNode(n.name, str(n.address)) for n in new.nodes]
            return reply(send, ClusterMapResult(node=send.node, epoch=new.epoch, slots=new.slots, nodes=nodes))
        request = send.call.request
        assert isinstance(request, m.PurgeDead) and request.pids is not None and request.limit == 2
        cluster = served.get(send.node, new)
        if any(owner_in(cluster, pid) != send.node for pid in request.pids):
            raise errors.WrongShard("not mine", epoch=new.epoch)
        served["a"] = new
        reached = [letter for letter in letters if letter.rpartition("~")[0] in request.pids
                   and (request.after_pid is None or letter > request.after_pid)]
        page = reached[:request.limit]
        return reply(send, DeadLetterPage(outcomes=[ItemOutcome("q.dead", letter, True) for letter in page],
                                          next_pid=page[-1] if len(reached) > request.limit else None))

    after = min(letters)  # the caller's cursor, honoured by every node's first request
    result = run(router, calls.dead_letters("purge_dead", "q", [moved, stays], after, 2), answer, log)
    assert [outcome.pid for outcome in result.outcomes] == [letter for letter in letters if letter > after]
    assert result.next_pid is None
    asked = [(send.node, send.call.request.after_pid) for send in log if send.call.op == "purge_dead"]
    assert asked[:2] == [("a", after), ("b", after)] or asked[:2] == [("b", after), ("a", after)]
    # a's part: one page, then WRONG_SHARD (the slot moved to c), then c from a's cursor
    part = [(node, cursor) for node, cursor in asked if node != "b"]
    assert [node for node, _ in part] == ["a", "a", "c", "c"] and part[1][1] == part[2][1] != after


def test_the_map_is_fetched_from_a_seed_first() -> None:
    cluster = make_map()
    router = make_router(None, seeds=(Address("127.0.0.1", 7001),), near="b")

    def answer(send: Send) -> Any:
        if send.call.op == "cluster_map":
            assert send.address == Address("127.0.0.1", 7001)
            nodes = [ClusterNode(n.name, str(n.address)) for n in cluster.nodes]
            return reply(send, ClusterMapResult(node="b", epoch=cluster.epoch, slots=cluster.slots, nodes=nodes))
        return reply(send, {"now": 1.0})

    run(router, calls.ping(), answer)
    assert router.cluster_map == cluster and router.near == "b"


def test_a_plain_broker_is_no_cluster_without_a_map() -> None:
    router = make_router(None, seeds=(Address("127.0.0.1", 7001),))
    with pytest.raises(errors.BadRequest, match="not a node"):
        run(router, calls.ping(), lambda send: reply(send, ClusterMapResult()))


def test_an_update_with_leases_on_two_nodes_is_refused() -> None:
    router = make_router(make_map())
    call = calls.update(dequeue=[{"queue": "q", "pid": "p", "lease_id": 32}, {"queue": "q", "pid": "r", "lease_id": 33}])
    with pytest.raises(errors.BadRequest, match="one node"):
        run(router, call, lambda send: None)


def test_an_update_enqueues_other_nodes_keyed_tasks_first_and_keeps_the_order() -> None:
    cluster = make_map()
    router = make_router(cluster)
    elsewhere = next(p for p in (f"k{i}" for i in range(100)) if route(cluster, "q", p) != Owned("a", None, ""))
    elsewhere_owner = route(cluster, "q", elsewhere)
    assert isinstance(elsewhere_owner, Owned) and elsewhere_owner.node != "a"
    log: list[Send] = []

    def answer(send: Send) -> Any:
        request = send.call.request
        if isinstance(request, m.Enqueue):
            return echo_enqueue(send)
        assert isinstance(request, m.Update) and send.node == "a"
        enqueued = [EnqueueOutcome(t.queue, t.pid or "fifo-a", False) for t in request.enqueue]
        return reply(send, {"enqueued": enqueued, "dequeued": [{"queue": "q", "pid": "x", "ok": True}]})

    call = calls.update(
        enqueue=[{"queue": "q", "data": b""}, {"queue": "q", "data": b"", "pid": elsewhere}],
        dequeue=[{"queue": "q", "pid": "x", "lease_id": 64}],  # residue 0: node a
    )
    result = run(router, call, answer, log)
    assert [o.pid for o in result.enqueued] == ["fifo-a", elsewhere]
    assert [(send.node, send.call.op) for send in log] == [(elsewhere_owner.node, "enqueue"), ("a", "update")]


def lease_answer(holding: dict[str, list[str]], holders: bool = True) -> Answer:
    """Nodes holding task pids of queue "q"; `holders` answers from that knowledge."""

    def answer(send: Send) -> Any:
        request = send.call.request
        if isinstance(request, m.Holders):
            if not holders:
                raise errors.UnknownOperation("unknown op 'holders'")
            return reply(send, HoldersResult(epoch=make_map().epoch, holders={"q": [n for n, pids in holding.items() if pids]}))
        assert isinstance(request, m.Lease)
        taken, holding[send.node] = holding[send.node][: request.max_tasks], holding[send.node][request.max_tasks:]
        return reply(send, [{"queue": "q", "pid": pid, "data": b"", "lease_id": 1} for pid in taken])

    return answer


def test_a_lease_is_served_locally_with_no_hop_then_from_a_holder_with_two() -> None:
    router = make_router(make_map(), near="a")
    answer = lease_answer({"a": ["a1"], "b": [], "c": ["c1", "c2"]})
    log: list[Send] = []
    assert [t.pid for t in run(router, calls.lease("q"), answer, log)] == ["a1"]
    assert router.routing_stats().hops.get("lease", 0) == 0
    log.clear()
    assert [t.pid for t in run(router, calls.lease("q", max_tasks=5), answer, log)] == ["c1", "c2"]
    assert [(send.node, send.call.op) for send in log] == [("a", "lease"), ("a", "holders"), ("c", "lease")]
    assert router.routing_stats().hops["lease"] == 2


def test_when_holders_name_nobody_the_others_are_swept_at_most_once_a_second() -> None:
    # a missing hint (a lost announcement, a peer forgotten while it was not heard) must not strand
    # a node's tasks: a blind sweep finds them
    now = [0.0]
    router = Router(seeds=(), cluster_map=make_map(), near="a", rng=random.Random(7), clock=lambda: now[0])
    holding = {"a": [], "b": [], "c": ["c1"]}
    held_nowhere = lease_answer(holding)

    def answer(send: Send) -> Any:
        if isinstance(send.call.request, m.Holders):
            return reply(send, HoldersResult(epoch=make_map().epoch, holders={"q": []}))
        return held_nowhere(send)

    log: list[Send] = []
    assert [t.pid for t in run(router, calls.lease("q"), answer, log)] == ["c1"]
    assert ("c", "lease") in [(send.node, send.call.op) for send in log]
    log.clear()
    assert run(router, calls.lease("q"), answer, log) == []  # nothing anywhere: the sweep has just run
    # the local node, the node the last steal came from, holders — and no sweep of b
    assert [(send.node, send.call.op) for send in log] == [("a", "lease"), ("c", "lease"), ("a", "holders")]
    now[0] += router_module.BLIND_SWEEP_SECS
    log.clear()
    assert run(router, calls.lease("q"), answer, log) == []
    assert {send.node for send in log if send.call.op == "lease"} == {"a", "b", "c"}


def test_a_lease_steals_again_from_the_last_node_that_gave_tasks_then_asks_holders() -> None:
    router = make_router(make_map(), near="a")
    answer = lease_answer({"a": [], "b": ["b1"], "c": ["c1", "c2"]})
    log: list[Send] = []
    assert [t.pid for t in run(router, calls.lease("q"), answer, log)] == ["b1"]
    log.clear()
    # b gave tasks: asked right after the local node, without `holders` (Fabriq's last known server)
    assert [t.pid for t in run(router, calls.lease("q"), answer, log)] == ["c1"]
    assert [(send.node, send.call.op) for send in log] == [("a", "lease"), ("b", "lease"), ("a", "holders"),
                                                            ("c", "lease")]
    log.clear()
    assert [t.pid for t in run(router, calls.lease("q"), answer, log)] == ["c2"]
    assert [(send.node, send.call.op) for send in log] == [("a", "lease"), ("c", "lease")]


def test_a_holder_found_empty_a_moment_ago_is_asked_last() -> None:
    now = [0.0]
    cluster = make_map("abcd")
    router = Router(seeds=(), cluster_map=cluster, near="a", rng=random.Random(7), clock=lambda: now[0])
    holding = {"a": [], "b": [], "c": ["c1"], "d": []}
    base = lease_answer(holding)

    def stale(send: Send) -> Any:  # the announcements that nodes emptied have not arrived
        if isinstance(send.call.request, m.Holders):
            return reply(send, HoldersResult(epoch=cluster.epoch, holders={"q": ["b", "c", "d"]}))
        return base(send)

    assert [t.pid for t in run(router, calls.lease("q"), stale)] == ["c1"]  # b was empty
    now[0] = 0.1
    holding.update(b=["b2"], d=["d1"])
    log: list[Send] = []
    assert [t.pid for t in run(router, calls.lease("q"), stale, log)] == ["d1"]  # c empty now; b a moment ago
    assert [(send.node, send.call.op) for send in log] == [("a", "lease"), ("c", "lease"), ("a", "holders"),
                                                            ("d", "lease")]
    now[0] = 1.0
    holding["d"] = []
    assert [t.pid for t in run(router, calls.lease("q"), stale)] == ["b2"]  # long ago: asked again


def test_processes_of_one_host_spread_over_its_nodes_by_their_seed() -> None:
    def near_of(seed: int) -> str:
        router = Router(seeds=(), cluster_map=make_map(), rng=random.Random(7), clock=lambda: 0.0,
                        is_local=lambda host: True, near_seed=seed)
        return router.near

    assert [near_of(seed) for seed in (30, 31, 32, 33)] == ["a", "b", "c", "a"]
    far = Router(seeds=(), cluster_map=make_map(), rng=random.Random(7), clock=lambda: 0.0, near_seed=31)
    assert far.near in "abc"  # no node on this host: any


def test_without_holders_a_lease_sweeps_the_others_in_turn() -> None:
    router = make_router(make_map(), near="a")
    answer = lease_answer({"a": [], "b": [], "c": ["c1"]}, holders=False)
    assert [t.pid for t in run(router, calls.lease("q"), answer)] == ["c1"]
    log: list[Send] = []
    assert run(router, calls.lease("q"), answer, log) == []
    assert "holders" not in [send.call.op for send in log]  # not asked again
    assert sorted(send.node for send in log) == ["a", "b", "c"]


def test_a_lease_skips_an_unreachable_node_and_raises_when_all_are() -> None:
    router = make_router(make_map(), near="a")
    holding = {"a": [], "b": ["b1"], "c": []}
    base = lease_answer(holding)

    def answer(send: Send) -> Any:
        if send.node == "a":
            raise errors.BrokerUnreachable("a is down")
        return base(send)

    assert [t.pid for t in run(router, calls.lease("q"), answer)] == ["b1"]

    def none(send: Send) -> Any:
        raise errors.BrokerUnreachable("down")

    with pytest.raises(errors.BrokerUnreachable):
        run(make_router(make_map()), calls.lease("q"), none)


def test_a_lease_cut_mid_request_goes_on_to_the_other_nodes() -> None:
    """A node whose connection broke before it answered a lease (CONNECTION_LOST: what it leased, if
    anything, comes back when that lease runs out) does not end the lease: the others are asked."""
    router = make_router(make_map(), near="a")
    base = lease_answer({"a": ["a1"], "b": ["b1"], "c": []})

    def answer(send: Send) -> Any:
        if send.node == "a" and send.call.op == "lease":
            raise errors.ConnectionLost("a went away mid-request")
        return base(send)

    assert [t.pid for t in run(router, calls.lease("q"), answer)] == ["b1"]


def test_a_hung_node_costs_a_lease_a_bounded_wait_and_is_skipped_after() -> None:
    """A node that accepts connections and answers nothing (SIGSTOPped) held every lease: its send had
    no timeout without a call timeout, and a TIMEOUT ended the lease though others held tasks."""
    router = make_router(make_map(), near="a")
    base = lease_answer({"a": ["a1"], "b": ["b1", "b2"], "c": []})
    log: list[Send] = []

    def answer(send: Send) -> Any:
        if send.node == "a":
            assert send.timeout_secs is not None and send.timeout_secs <= router_module.NODE_ANSWER_SECS + 1.0
            raise errors.RequestTimeout("a answered nothing")
        return base(send)

    assert [t.pid for t in run(router, calls.lease("q", wait_secs=1.0), answer, log)] == ["b1"]
    log.clear()
    assert [t.pid for t in run(router, calls.lease("q"), answer, log)] == ["b2"]
    assert log[0].node != "a"  # down for a while: asked last, if at all


def test_only_sends_another_node_could_serve_connect_quickly() -> None:
    """A dead node may cost a lease, `holders` or a FIFO push only a short connect (`Send.quick`);
    a keyed call, which only its owner serves, gets the full connect budget to wait out a restart."""
    router = make_router(make_map(), near="a")
    log: list[Send] = []
    run(router, calls.lease("q", max_tasks=5), lease_answer({"a": [], "b": ["b1"], "c": []}), log)
    assert [(send.node, send.call.op, send.quick) for send in log] == [
        ("a", "lease", True), ("a", "holders", True), ("b", "lease", True)]
    log.clear()
    run(router, calls.enqueue_many([{"queue": "q", "data": b""}] * 4), echo_enqueue, log)
    assert log and all(send.quick for send in log)
    log.clear()
    run(router, calls.enqueue("q", b"", pid="k0"), echo_enqueue, log)
    assert [send.quick for send in log] == [False]
    one = make_router(make_map("a"), near="a")
    log.clear()
    run(one, calls.enqueue("q", b""), echo_enqueue, log)
    assert [send.quick for send in log] == [False]  # no other node to go to


def test_a_lease_of_one_groups_queue_goes_to_its_owner_as_is() -> None:
    cluster = make_map()
    router = make_router(cluster)
    owner = route(cluster, "g#q")
    assert isinstance(owner, Owned)
    log: list[Send] = []
    run(router, calls.lease("g#q", wait_secs=5), lambda send: reply(send, []), log)
    assert [(send.node, send.call.wait_secs) for send in log] == [(owner.node, 5)]


node_queues = st.dictionaries(st.sampled_from("abc"), st.dictionaries(st.sampled_from([f"q{i}" for i in range(12)]),
                                                                       st.integers(1, 4), max_size=12), min_size=3)


@given(node_queues, st.integers(1, 5), st.integers(0, 6), st.one_of(st.none(), st.sampled_from(["q0", "q3", "q7"])))
@settings(max_examples=80, deadline=None)
def test_list_queues_pages_exactly(held: dict[str, dict[str, int]], limit: int, min_tasks: int,
                                   start_after: str | None) -> None:
    router = make_router(make_map())

    def answer(send: Send) -> Any:
        request = send.call.request
        assert isinstance(request, m.ListQueues) and request.min_tasks == 0
        names = sorted(q for q in held[send.node] if request.start_after is None or q > request.start_after)
        return reply(send, [QueueInfo(q, held[send.node][q], 0) for q in names[: request.limit]])

    got = run(router, calls.list_queues(None, min_tasks, limit, start_after), answer)
    totals: dict[str, int] = {}
    for queues in held.values():
        for queue, size in queues.items():
            totals[queue] = totals.get(queue, 0) + size
    expected = [q for q in sorted(totals) if totals[q] >= min_tasks and (start_after is None or q > start_after)]
    assert [(row.queue, row.size) for row in got] == [(q, totals[q]) for q in expected[:limit]]


def test_a_keyed_call_to_a_node_found_down_a_moment_ago_connects_quickly() -> None:
    """Only the first keyed call to a dead node waits out the full connect budget; while the node
    stays marked down (`DOWN_SECS`), the next ones get the short connect, and after that the full
    budget again (it may be restarting)."""
    from kittiwake.client.cluster_channel import QUICK_CONNECT_SECS, connect_budget

    cluster = make_map()
    now = [0.0]
    router = Router(seeds=(), cluster_map=cluster, near="a", rng=random.Random(7), clock=lambda: now[0])
    pid = "k0"
    owner = route(cluster, "q", pid)
    assert isinstance(owner, Owned)
    log: list[Send] = []

    def answer(send: Send) -> Any:
        raise errors.BrokerUnreachable("down")

    for _ in range(2):
        with pytest.raises(errors.BrokerUnreachable):
            run(router, calls.get("q", pid), answer, log)
    assert [(send.node, send.quick, send.down) for send in log] == [(owner.node, False, False), (owner.node, False, True)]
    assert [connect_budget(send, 2.0) for send in log] == [2.0, QUICK_CONNECT_SECS]
    now[0] += router_module.DOWN_SECS + 0.1
    log.clear()
    run(router, calls.get("q", pid), lambda send: None, log)
    assert [send.down for send in log] == [False]


def map_answer(cluster: ClusterMap) -> Answer:
    def answer(send: Send) -> Any:
        nodes = [ClusterNode(n.name, str(n.address)) for n in cluster.nodes]
        return reply(send, ClusterMapResult(node=send.node or "a", epoch=cluster.epoch, slots=cluster.slots,
                                            nodes=nodes, tls=cluster.tls))
    return answer


def test_a_plaintext_client_is_told_to_use_tls_on_a_tls_map_and_the_other_way_round() -> None:
    tls_map = ClusterMap(make_map().nodes, tls=True)
    seed = (Address("127.0.0.1", 7000),)
    plaintext = Router(seeds=seed, near="a", clock=lambda: 0.0, tls=False)
    with pytest.raises(errors.BadRequest, match="kws://"):
        drive(plaintext.conversation(calls.get("q", "k"), None), lambda step: [map_answer(tls_map)(s) for s in step])
    with pytest.raises(errors.BadRequest, match="kws://"):
        Router(seeds=(), cluster_map=tls_map, clock=lambda: 0.0, tls=False)
    over_tls = Router(seeds=seed, near="a", clock=lambda: 0.0, tls=True)
    with pytest.raises(errors.BadRequest, match="plaintext ports"):
        drive(over_tls.conversation(calls.get("q", "k"), None), lambda step: [map_answer(make_map())(s) for s in step])
    fine = Router(seeds=seed, near="a", clock=lambda: 0.0, tls=True)

    def answer(send: Send) -> Any:
        if send.call.op == "cluster_map":
            return map_answer(tls_map)(send)
        raise errors.TaskNotFound("no task k")

    with pytest.raises(errors.TaskNotFound):
        run(fine, calls.get("q", "k"), answer)
    assert fine.cluster_map == tls_map and fine.cluster_map.tls

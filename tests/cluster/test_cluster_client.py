"""A cluster through `Client` and `AsyncClient`: three real brokers, one namespace of queues.

The brokers are three nodes of one cluster (`conftest`), or plain ones named by an explicit map
where a test says so; each check asks the brokers directly where tasks landed.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from kittiwake import Client, errors
from kittiwake.client import calls
from kittiwake.client.calls import Call
from kittiwake.protocol.replies import result_decoder
from kittiwake.cluster.routing import Owned, route
from support.cluster_nodes import Cluster

def owner(cluster: Cluster, queue: str, pid: str) -> str:
    decision = route(cluster.map, queue, pid)
    assert isinstance(decision, Owned)
    return decision.node


def sizes(cluster: Cluster, queue: str, skip: str = "") -> dict[str, int]:
    """The size of `queue` on each node's broker, asked directly."""
    found = {}
    for name in cluster.brokers:
        if name == skip:
            continue
        with cluster.direct(name) as direct:
            rows = direct.list_queues(f"^{queue}$")
            found[name] = rows[0].size if rows else 0
    return found


def test_keyed_tasks_land_on_their_owner_and_collapse_through_any_entry(cluster: Cluster, make_client: Any) -> None:
    client = make_client()
    pids = [f"k{i}" for i in range(30)]
    outcomes = client.enqueue_many([{"queue": "jobs", "data": b"x", "pid": pid} for pid in pids])
    assert [(o.queue, o.pid, o.collapsed) for o in outcomes] == [("jobs", pid, False) for pid in pids]
    for pid in pids:
        with cluster.direct(owner(cluster, "jobs", pid)) as direct:
            assert direct.get("jobs", pid).pid == pid
    assert sum(sizes(cluster, "jobs").values()) == 30
    # the same pid through clients whose near node differs collapses
    for near in ("a", "b", "c"):
        other = make_client(near=near)
        assert other.enqueue("jobs", b"again", pid="k7").collapsed
        assert other.get("jobs", "k7").data == b"x"
    assert sum(sizes(cluster, "jobs").values()) == 30


def test_fifo_tasks_spread_evenly(cluster: Cluster, make_client: Any) -> None:
    client = make_client()
    for _ in range(10):
        client.enqueue("fifo", b"x")
    client.enqueue_many([{"queue": "fifo", "data": b"y"} for _ in range(20)])
    counts = sizes(cluster, "fifo")
    assert sum(counts.values()) == 30
    assert max(counts.values()) - min(counts.values()) <= 1, counts


def test_batch_outcomes_come_back_in_order(cluster: Cluster, make_client: Any) -> None:
    client = make_client()
    tasks: list[dict[str, Any]] = []
    for i in range(24):
        task: dict[str, Any] = {"queue": "mixed" if i % 3 else "g#mixed", "data": str(i)}
        if i % 2:
            task["pid"] = f"p{i}"
        tasks.append(task)
    outcomes = client.enqueue_many(tasks)
    assert [o.queue for o in outcomes] == [task["queue"] for task in tasks]
    for task, outcome in zip(tasks, outcomes):
        if "pid" in task:  # a FIFO pid names its node only when brokers run as nodes
            assert outcome.pid == task["pid"]
            assert client.get(task["queue"], outcome.pid).data == task["data"].encode()
    assert sum(sum(sizes(cluster, q).values()) for q in ("mixed", "g#mixed")) == 24


def test_a_groups_queues_live_on_one_node(cluster: Cluster, make_client: Any) -> None:
    client = make_client()
    for i in range(6):
        client.enqueue(f"grp#q{i}", b"x")
        client.enqueue(f"grp#q{i}", b"x", pid=f"p{i}")
    holding = {name for name in cluster.brokers for i in range(6) if sizes(cluster, f"grp#q{i}")[name]}
    assert len(holding) == 1
    assert [v.pid for v in client.peek("grp#q0", 10)][-1] == "p0"


def test_list_queues_merges_and_pages_exactly(cluster: Cluster, make_client: Any) -> None:
    client = make_client()
    names = [f"lq{i:02d}" for i in range(23)]
    client.enqueue_many([{"queue": name, "data": b"x", "pid": f"t{j}"} for name in names for j in range(3)])
    rows = client.list_queues("^lq")
    assert [row.queue for row in rows] == names
    assert all(row.size == 3 for row in rows)
    pages: list[str] = []
    cursor = None
    for _ in range(10):
        page = client.list_queues("^lq", limit=5, start_after=cursor)
        pages += [row.queue for row in page]
        if len(page) < 5:
            break
        cursor = page[-1].queue
    assert pages == names
    assert [row.queue for row in client.list_queues("^lq", min_tasks=3, limit=4)] == names[:4]
    assert client.list_queues("^lq", min_tasks=4) == []


def test_stats_are_summed_and_per_node_on_request(cluster: Cluster, make_client: Any) -> None:
    client = make_client()
    client.enqueue_many([{"queue": "st", "data": b"x", "pid": f"s{i}"} for i in range(12)])
    [row] = client.stats("st")
    assert (row.queue, row.size, row.available) == ("st", 12, 12)
    per_node = client.node_stats("st")
    assert set(per_node) == {"a", "b", "c"}
    assert sum(rows[0].size for rows in per_node.values() if rows) == 12
    assert [r.queue for r in client.stats(pattern="^st$")] == ["st"]


def test_lease_drains_every_node_local_first(cluster: Cluster, make_client: Any) -> None:
    client = make_client(near="a")
    pids = [f"d{i}" for i in range(30)]
    client.enqueue_many([{"queue": "drain", "data": b"x", "pid": pid} for pid in pids])
    local = sizes(cluster, "drain")["a"]
    assert local > 0
    wait_for_holders(cluster, "a", "drain", {name for name, size in sizes(cluster, "drain").items() if size})
    before = client.routing_stats()
    leased: list[Any] = []
    for _ in range(40):
        got = client.lease("drain", max_tasks=4)
        if not got:
            break
        leased += got
    assert sorted(task.pid for task in leased) == sorted(pids)
    stats = client.routing_stats()
    calls = stats.calls["lease"] - before.calls.get("lease", 0)
    hops = stats.hops["lease"] - before.hops.get("lease", 0)
    # the local node's tasks cost no hop; each later lease found it empty and went elsewhere
    first_hops = hops
    assert calls >= 30 // 4
    assert first_hops >= 1
    assert stats.per_node.get("a", 0) > 0
    # each lease id names the node that issued it: the dequeues find their way
    assert all(outcome.ok for outcome in client.dequeue(leased))
    assert sum(sizes(cluster, "drain").values()) == 0


def wait_for_holders(cluster: Cluster, node: str, queue: str, holding: set[str]) -> None:
    """Until `node` has heard (from its own commits and its peers' announcements) that `holding` hold `queue`."""
    call = Call(calls.request("holders", {"queues": [queue]}), result_decoder("holders"))
    with cluster.direct(node) as direct:
        for _ in range(200):
            if set(direct._run(call, None).holders.get(queue, [])) >= holding:
                return
            time.sleep(0.02)
    raise AssertionError(f"{node} never heard that {sorted(holding)} hold {queue}")


def test_local_tasks_are_leased_with_no_hop(cluster: Cluster, make_client: Any) -> None:
    client = make_client(near="b")
    with cluster.direct("b") as direct:
        direct.enqueue_many([{"queue": "near", "data": b"x"} for _ in range(5)])
    before = client.routing_stats()
    got = client.lease("near", max_tasks=5)
    assert len(got) == 5
    after = client.routing_stats()
    assert after.hops.get("lease", 0) == before.hops.get("lease", 0)
    assert after.per_node["b"] == before.per_node.get("b", 0) + 1


def test_long_poll_finds_a_task_on_another_node(cluster: Cluster, make_client: Any) -> None:
    client = make_client(near="a")
    assert client.lease("lp", wait_secs=0.3) == []
    with cluster.direct("c") as direct:
        late = direct.enqueue("lp", b"x").pid  # a FIFO task on c
    got = client.lease("lp", wait_secs=3)
    assert [task.pid for task in got] == [late]


def test_a_node_down_pushes_go_on_and_leases_drain_the_others(cluster: Cluster, make_client: Any) -> None:
    client = make_client(near="a")
    client.enqueue_many([{"queue": "down", "data": b"x", "pid": f"x{i}"} for i in range(12)])
    held_by_b = sizes(cluster, "down")["b"]
    cluster.brokers["b"].kill()
    outcomes = [client.enqueue("down-fifo", b"x") for _ in range(9)]
    assert len(outcomes) == 9
    assert sum(sizes(cluster, "down-fifo", skip="b").values()) == 9
    leased: list[Any] = []
    for _ in range(30):
        got = client.lease("down", max_tasks=5)
        if not got:
            break
        leased += got
    assert len(leased) == 12 - held_by_b
    b_pid = next(pid for pid in (f"x{i}" for i in range(12)) if owner(cluster, "down", pid) == "b")
    with pytest.raises(errors.BrokerUnreachable):
        client.get("down", b_pid)


def test_split_renew_dequeue_and_cancel_by_owner(cluster: Cluster, make_client: Any) -> None:
    client = make_client()
    client.enqueue_many([{"queue": "rc", "data": b"x", "pid": f"r{i}"} for i in range(9)])
    outcomes = client.cancel([("rc", f"r{i}") for i in range(9)] + [("rc", "missing")])
    assert [o.ok for o in outcomes] == [True] * 9 + [False]
    assert outcomes[-1].code == "TASK_NOT_FOUND"
    assert sum(sizes(cluster, "rc.dead").values()) == 9


def test_dead_letters_are_requeued_and_purged_by_pid_however_queue_and_pid_are_written(
    cluster: Cluster, make_client: Any
) -> None:
    # the node's guard and the client folded `q.dead` and `<pid>~<death>` differently: three of the
    # four spellings the API takes failed (WRONG_SHARD from the right node, or a false TASK_NOT_FOUND)
    client = make_client()
    spellings = [("dq", "dead"), ("dq.dead", "dead"), ("dq.dead", "original"), ("dq", "original")]
    pids = [f"d{i}" for i in range(12)]  # three per spelling: over the nodes
    client.enqueue_many([{"queue": "dq", "data": b"x", "pid": pid} for pid in pids])
    assert all(outcome.ok for outcome in client.cancel([("dq", pid) for pid in pids]))
    dead_pid = {view.headers["kittiwake-dead-pid"]: view.pid for view in client.peek("dq.dead", 100)}
    for index, (queue, form) in enumerate(spellings):
        named = [dead_pid[pid] if form == "dead" else pid for pid in pids[index * 3: index * 3 + 3]]
        page = client.requeue_dead(queue, named[:2])
        assert [outcome.ok for outcome in page.outcomes] == [True, True], (queue, form, page.outcomes)
        page = client.purge_dead(queue, named[2:])
        assert [outcome.ok for outcome in page.outcomes] == [True], (queue, form, page.outcomes)
    assert sorted(view.pid for view in client.peek("dq", 100)) == sorted(
        pid for index, pid in enumerate(pids) if index % 3 != 2)
    assert client.peek("dq.dead", 100) == []


def test_dead_letters_named_by_pid_over_nodes_come_back_whole_a_bounded_page_at_a_time(
    cluster: Cluster, make_client: Any
) -> None:
    # the client split named pids over their nodes and matched each node's outcomes one per pid:
    # a pid with several dead letters had its outcomes cut to one or pinned on other pids, and a
    # node's further pages (more than `limit` dead letters) were dropped, next_pid None — so a
    # `kittiwake dead requeue Q PID` on a cluster left dead letters behind and said nothing
    client = make_client()

    def pids_on(node: str, count: int) -> list[str]:
        return [pid for pid in (f"m{i}" for i in range(1000)) if owner(cluster, "mq", pid) == node][:count]

    [a1, a2], [b1], [c1] = pids_on("a", 2), pids_on("b", 1), pids_on("c", 1)
    deaths = {a1: 3, a2: 2, b1: 3, c1: 1}
    kept = next(pid for pid in (f"k{i}" for i in range(1000)) if owner(cluster, "mq", pid) == "a")
    for death in range(3):  # a pid dies again once its task is enqueued again
        alive = [pid for pid, times in deaths.items() if times > death] + ([kept] if death < 2 else [])
        client.enqueue_many([{"queue": "mq", "data": b"x", "pid": pid} for pid in alive])
        assert all(outcome.ok for outcome in client.cancel([("mq", pid) for pid in alive]))
    letters = {view.pid: view.headers["kittiwake-dead-pid"] for view in client.peek("mq.dead", 100)}
    named = sorted(letter for letter, pid in letters.items() if pid != kept)
    assert len(named) == 9 and sum(sizes(cluster, "mq.dead").values()) == 11
    assert {owner(cluster, "mq.dead", letter) for letter in named} == {"a", "b", "c"}

    page = client.requeue_dead("mq", [b1, a1, "nope", c1, a2], limit=2)
    assert page.next_pid is None
    # one outcome per dead letter, in pid order, each under its own pid; one requeue per pid (the
    # rest find their task back in mq); a pid naming nothing once
    assert [outcome.pid for outcome in page.outcomes] == sorted([*named, "nope"])
    requeued = [outcome.pid for outcome in page.outcomes if outcome.ok]
    assert sorted(letters[pid] for pid in requeued) == sorted(deaths)
    assert {outcome.code for outcome in page.outcomes if not outcome.ok} == {"TASK_EXISTS", "TASK_NOT_FOUND"}
    assert sorted(view.pid for view in client.peek("mq", 100)) == sorted(deaths)

    page = client.purge_dead("mq.dead", [a1, b1, a2], limit=2)  # c1's one letter went back
    assert page.next_pid is None
    assert [outcome.pid for outcome in page.outcomes] == [pid for pid in named if pid not in requeued]
    assert all(outcome.ok for outcome in page.outcomes)
    assert sorted(letters[view.pid] for view in client.peek("mq.dead", 100)) == [kept, kept]


def test_dead_letters_named_by_pid_on_a_node_down_say_how_many_were_moved(cluster: Cluster, make_client: Any) -> None:
    client = make_client()
    on_a, on_c = (next(pid for pid in (f"m{i}" for i in range(1000)) if owner(cluster, "mq", pid) == node)
                  for node in ("a", "c"))
    client.enqueue_many([{"queue": "mq", "data": b"x", "pid": pid} for pid in (on_a, on_c)])
    assert all(outcome.ok for outcome in client.cancel([("mq", on_a), ("mq", on_c)]))
    cluster.brokers["c"].kill()
    with pytest.raises(errors.BrokerUnreachable):  # nothing moved: c's own error
        client.requeue_dead("mq", [on_c])
    with pytest.raises(errors.ConnectionLost, match="1 dead letter"):  # a's part moved, c's is unknown
        client.requeue_dead("mq", [on_a, on_c])
    assert client.get("mq", on_a).pid == on_a


def test_find_by_sender_and_receivers_fan_out(cluster: Cluster, make_client: Any) -> None:
    client = make_client()
    for i in range(6):
        client.enqueue(f"fs{i}", b"x", pid=f"f{i}", sender="me", receiver="you")
    assert sorted(v.pid for v in client.find_by_sender("me")) == [f"f{i}" for i in range(6)]
    assert client.queues_for_receiver("you") == [f"fs{i}" for i in range(6)]
    assert client.delete_queue("fs0") == 1


def test_a_url_of_plain_brokers_says_they_are_no_cluster(plain_cluster: Cluster) -> None:
    cluster = plain_cluster
    url = "kw://" + ",".join(f"{b.host}:{b.port}" for b in cluster.brokers.values())
    with Client(url) as client:
        assert client.address.cluster
        with pytest.raises(errors.BadRequest, match="not a node of a cluster"):
            client.ping()
    with Client(url, cluster_map=cluster.map) as client:
        assert "now" in client.ping()
        assert client.routing_stats().calls == {"ping": 1}
    with Client(cluster.brokers["a"].url) as plain:
        assert plain.routing_stats().calls == {}

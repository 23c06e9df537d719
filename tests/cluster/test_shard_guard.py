"""WRONG_SHARD as a pure function: a node serves exactly the keys routing sends it, refuses the rest
whole with the map's epoch, and never refuses a FIFO push or a queue-wide read of a spread queue."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kittiwake import errors
from kittiwake.cluster.cluster_map import Address, ClusterMap, Node
from kittiwake.cluster.routing import Owned, lease_route, route
from kittiwake.cluster.shard_guard import refusal
from kittiwake.join_spec import JoinPort, JoinSpec
from kittiwake.model import LeaseRef, NewTask
from kittiwake.protocol import messages as m

CLUSTER = ClusterMap(tuple(Node(name, Address("127.0.0.1", 7000 + i)) for i, name in enumerate("abc")))
NODES = st.sampled_from(CLUSTER.node_names)
QUEUES = st.one_of(
    st.text(alphabet="abcdefgh.", min_size=1, max_size=12),
    st.builds(lambda g, q: f"{g}#{q}", st.text(alphabet="xyz", min_size=1, max_size=4),
              st.text(alphabet="abc", min_size=1, max_size=6)),
)
PIDS = st.one_of(st.text(alphabet="abcdef0123{}", min_size=1, max_size=12),
                 st.integers(10**16, 10**17 - 1).map(str))


def refused_by(node: str, request: m.Request) -> bool:
    error = refusal(CLUSTER, node, request)
    if error is not None:
        assert isinstance(error, errors.WrongShard) and error.epoch == CLUSTER.epoch
        assert repr(node) in error.message
    return error is not None


@settings(max_examples=300, deadline=None)
@given(node=NODES, queue=QUEUES, pid=st.one_of(st.none(), PIDS))
def test_an_enqueue_is_served_by_exactly_the_node_routing_names(node: str, queue: str, pid: str | None) -> None:
    request = m.Enqueue(id=1, op="enqueue", tasks=[NewTask(queue, b"", pid=pid)])
    decision = route(CLUSTER, queue, pid)
    if isinstance(decision, Owned):
        assert refused_by(node, request) == (decision.node != node)
    else:  # a FIFO push to a spread queue: anywhere
        assert not refused_by(node, request)


@settings(max_examples=300, deadline=None)
@given(node=NODES, queue=QUEUES, pid=PIDS, lease_id=st.integers(1, 2**62))
def test_lease_refs_go_to_the_node_that_leased(node: str, queue: str, pid: str, lease_id: int) -> None:
    owner = lease_route(CLUSTER, queue, pid, lease_id).node
    ref = LeaseRef(queue, pid, lease_id)
    for request in (m.Renew(id=1, op="renew", leases=[ref]), m.Dequeue(id=1, op="dequeue", leases=[ref]),
                    m.Release(id=1, op="release", leases=[ref]), m.Update(id=1, op="update", dequeue=[ref])):
        assert refused_by(node, request) == (owner != node)


@settings(max_examples=200, deadline=None)
@given(node=NODES, queue=QUEUES, pid=PIDS)
def test_reads_by_key_go_to_the_owner_and_queue_wide_reads_of_spread_queues_stay_local(
    node: str, queue: str, pid: str
) -> None:
    owner = route(CLUSTER, queue, pid)
    assert isinstance(owner, Owned)
    assert refused_by(node, m.Get(id=1, op="get", queue=queue, pid=pid)) == (owner.node != node)
    assert refused_by(node, m.Cancel(id=1, op="cancel", tasks=[(queue, pid)])) == (owner.node != node)
    wide = route(CLUSTER, queue)
    elsewhere = isinstance(wide, Owned) and wide.node != node
    for request in (m.Peek(id=1, op="peek", queue=queue), m.Lease(id=1, op="lease", queues=[queue]),
                    m.DeleteQueue(id=1, op="delete_queue", queue=queue),
                    m.PurgeDead(id=1, op="purge_dead", queue=queue + ".dead")):
        assert refused_by(node, request) == elsewhere


def test_a_batch_with_one_key_elsewhere_is_refused_whole() -> None:
    local = next(p for p in (f"p{i}" for i in range(100)) if route(CLUSTER, "q", p) == route(CLUSTER, "q", "p0"))
    owner = route(CLUSTER, "q", local)
    assert isinstance(owner, Owned)
    other = next(f"x{i}" for i in range(1000) if getattr(route(CLUSTER, "q", f"x{i}"), "node") != owner.node)
    tasks = [NewTask("q", b"", pid=local), NewTask("q", b""), NewTask("q", b"", pid=other)]
    assert refused_by(owner.node, m.Enqueue(id=1, op="enqueue", tasks=tasks))
    assert not refused_by(owner.node, m.Enqueue(id=1, op="enqueue", tasks=tasks[:2]))


def test_fan_out_reads_are_never_refused() -> None:
    for node in CLUSTER.node_names:
        for request in (m.Stats(id=1, op="stats", queues=["g#q", "q"]), m.ListQueues(id=1, op="list_queues"),
                        m.QueuesForReceiver(id=1, op="queues_for_receiver", receiver="r"),
                        m.FindBySender(id=1, op="find_by_sender", sender="s"), m.ListJoins(id=1, op="list_joins"),
                        m.ClusterMapRequest(id=1, op="cluster_map"), m.Ping(id=1, op="ping")):
            assert refusal(CLUSTER, node, request) is None


def test_joins_live_in_a_named_group_on_its_owner() -> None:
    spread = JoinSpec("j", "jobs", [JoinPort("a", "in.a")])
    error = refusal(CLUSTER, "a", m.DeclareJoin(id=1, op="declare_join", join=spread))
    assert isinstance(error, errors.BadRequest) and "named group" in error.message
    grouped = JoinSpec("flow#step", "flow#jobs", [JoinPort("a", "flow#in.a")])
    owner = route(CLUSTER, "flow#jobs")
    assert isinstance(owner, Owned)
    for node in CLUSTER.node_names:
        declared = refusal(CLUSTER, node, m.DeclareJoin(id=1, op="declare_join", join=grouped))
        dropped = refusal(CLUSTER, node, m.DropJoin(id=1, op="drop_join", name="flow#step"))
        assert (declared is None) == (dropped is None) == (node == owner.node)


def test_a_join_whose_name_or_port_is_outside_its_job_queues_slot_is_refused_on_every_node() -> None:
    # its declaration moves with its job queue, drop/purge go by its name: a grow must not part them
    def slot(group: str) -> int:
        found = route(CLUSTER, f"{group}#x")
        assert isinstance(found, Owned) and found.slot is not None
        return found.slot

    other = next(f"h{i}" for i in range(1000) if slot(f"h{i}") != slot("flow"))
    for spec in (JoinSpec(f"{other}#step", "flow#jobs", [JoinPort("a", "flow#in.a")]),
                 JoinSpec("step", "flow#jobs", [JoinPort("a", "flow#in.a")]),
                 JoinSpec("flow#step", "flow#jobs", [JoinPort("a", f"{other}#in.a")])):
        for node in CLUSTER.node_names:
            error = refusal(CLUSTER, node, m.DeclareJoin(id=1, op="declare_join", join=spec))
            assert isinstance(error, errors.BadRequest), (spec, node)
            assert "'flow'" in error.message
    same_slot = next(f"s{i}" for i in range(100_000) if slot(f"s{i}") == slot("flow"))
    spec = JoinSpec(f"{same_slot}#step", "flow#jobs", [JoinPort("a", "flow#in.a")])
    owner = route(CLUSTER, "flow#jobs")
    assert isinstance(owner, Owned)
    assert refusal(CLUSTER, owner.node, m.DeclareJoin(id=1, op="declare_join", join=spec)) is None


@settings(max_examples=300, deadline=None)
@given(child=st.one_of(st.none(), PIDS), parent=PIDS, queue=QUEUES)
def test_a_task_after_parents_a_grow_could_move_elsewhere_is_refused(child: str | None, parent: str,
                                                                   queue: str) -> None:
    # `cluster grow` moved a keyed parent with its edge and left its FIFO child on the old node,
    # blocked for good; a task and its parents must share a slot, or all be FIFO pids (never moved)
    def anchor(pid: str | None) -> object:
        decision = route(CLUSTER, queue, pid)
        return decision.slot if isinstance(decision, Owned) else None

    task = NewTask(queue, b"", pid=child, after=[(queue, parent)]) if child != parent else None
    if task is None:
        return
    owner = route(CLUSTER, queue, parent)
    assert isinstance(owner, Owned)
    error = refusal(CLUSTER, owner.node, m.Enqueue(id=1, op="enqueue", tasks=[task]))
    child_route = route(CLUSTER, queue, child)
    if isinstance(child_route, Owned) and child_route.node != owner.node:
        assert isinstance(error, errors.WrongShard)
    elif anchor(child) != anchor(parent):
        assert isinstance(error, errors.BadRequest) and "routing tag" in error.message
    else:
        assert error is None


def test_a_job_tagged_as_the_app_tags_it_may_wait_on_its_parents() -> None:
    parent, child = NewTask("q", b"", pid="{job1}a"), NewTask("r", b"", pid="{job1}b", after=[("q", "{job1}a")])
    owner = route(CLUSTER, "q", parent.pid)
    assert isinstance(owner, Owned)
    assert refusal(CLUSTER, owner.node, m.Enqueue(id=1, op="enqueue", tasks=[parent, child])) is None

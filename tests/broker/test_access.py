"""Authorisation: the permission each op needs on each queue it names, and cross-queue reads scoped.

The rules are checked first on decoded requests (pure, no broker), then
over a real broker with users whose rights cover their own prefixes only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import msgspec
import pytest

from kittiwake import Client, errors
from kittiwake.broker.access import ALL_PERMISSIONS, RULES, Grant, Permission, Principal, authorise
from kittiwake.protocol import REQUEST_TYPES, decode_request
from kittiwake.queue_globs import QueuePattern
from support.auth_users import write_auth_file
from support.broker_process import BrokerProcess

P, C, A = Permission.PRODUCE, Permission.CONSUME, Permission.ADMIN


def principal(**rights: set[Permission]) -> Principal:
    """`principal(**{"alice.*": {P, C}})`: one grant per pattern."""
    return Principal("tester", tuple(Grant(QueuePattern(pattern), frozenset(perms)) for pattern, perms in rights.items()))


def request(op: str, **fields: Any) -> Any:
    return decode_request(msgspec.msgpack.encode({"id": 1, "op": op, **fields}))


def task(queue: str, **more: Any) -> dict[str, Any]:
    return {"queue": queue, "data": b"x", **more}


def ref(queue: str) -> dict[str, Any]:
    return {"queue": queue, "pid": "p", "lease_id": 1}


def test_every_op_has_a_rule() -> None:
    assert set(REQUEST_TYPES.values()) <= set(RULES), set(REQUEST_TYPES.values()) - set(RULES)


# (op, fields, what the user must hold on queue "q" for it to pass; None: nothing)
CASES: list[tuple[str, dict[str, Any], set[frozenset[Permission]] | None]] = [
    ("ping", {}, None),
    ("cancel_wait", {"request_id": 3}, None),
    ("enqueue", {"tasks": [task("q")]}, {frozenset({P})}),
    ("lease", {"queues": ["q"]}, {frozenset({C})}),
    ("renew", {"leases": [ref("q")]}, {frozenset({C})}),
    ("dequeue", {"leases": [ref("q")]}, {frozenset({C})}),
    ("release", {"leases": [ref("q")], "bury": True}, {frozenset({C})}),
    ("update", {"enqueue": [task("q")]}, {frozenset({P})}),
    ("update", {"dequeue": [ref("q")]}, {frozenset({C})}),
    ("update", {"renew": [ref("q")]}, {frozenset({C})}),
    ("update", {"release": [ref("q")]}, {frozenset({C})}),
    ("peek", {"queue": "q"}, {frozenset({C})}),
    ("get", {"queue": "q", "pid": "p"}, {frozenset({C}), frozenset({P})}),
    ("cancel", {"tasks": [["q", "p"]]}, {frozenset({A})}),
    ("delete_queue", {"queue": "q"}, {frozenset({A})}),
    ("stats", {"queues": ["q"]}, {frozenset({A})}),
    ("find_by_sender", {"sender": "s", "queue": "q"}, {frozenset({A})}),
    ("cluster_map", {}, None),
    ("holders", {"queues": ["q"]}, {frozenset({C})}),
]


def test_announcing_needs_admin_on_every_queue() -> None:
    announce = request("announce", node="a", epoch="0" * 16, holding=["q"])
    authorise(principal(**{"*": {A}}), announce)
    for rights in ({"q": set(ALL_PERMISSIONS)}, {"q*": {A}, "other.*": set(ALL_PERMISSIONS)}, {"*": {P, C}}):
        with pytest.raises(errors.Forbidden, match="announce"):
            authorise(principal(**rights), announce)


@pytest.mark.parametrize("op, fields, needs", CASES, ids=[f"{case[0]}-{n}" for n, case in enumerate(CASES)])
def test_what_each_op_needs_on_the_queue_it_names(op: str, fields: dict[str, Any], needs: set | None) -> None:
    for held in [frozenset({P}), frozenset({C}), frozenset({A}), frozenset()]:
        user = principal(q=set(held), **{"other.*": set(ALL_PERMISSIONS)})
        allowed = needs is None or any(need <= held for need in needs)
        if allowed:
            authorise(user, request(op, **fields))
        else:
            with pytest.raises(errors.Forbidden, match="'q'"):
                authorise(user, request(op, **fields))


@pytest.mark.parametrize("key", ["after", "unless"])
def test_after_and_unless_need_a_permission_on_the_queues_they_name(key: str) -> None:
    enqueue = request("enqueue", tasks=[task("mine.jobs", **{key: [["theirs.jobs", "p"]]})])
    with pytest.raises(errors.Forbidden, match="theirs.jobs"):
        authorise(principal(**{"mine.*": {P}}), enqueue)
    for held in (P, C, A):
        authorise(principal(**{"mine.*": {P}, "theirs.*": {held}}), enqueue)
    update = request("update", enqueue=[task("mine.jobs", **{key: [["theirs.jobs", "p"]]})])
    with pytest.raises(errors.Forbidden):
        authorise(principal(**{"mine.*": {P}}), update)


def test_a_reply_to_header_needs_produce_on_the_queue_it_names() -> None:
    """A worker posts the task's result there with its own rights (`app.envelope`)."""
    headers = {"kittiwake-reply-to": "theirs.replies.a1"}
    for op, fields in [("enqueue", {"tasks": [task("mine.jobs", headers=headers)]}),
                       ("update", {"enqueue": [task("mine.jobs", headers=headers)]})]:
        with pytest.raises(errors.Forbidden, match="'theirs.replies.a1', named by a task's kittiwake-reply-to"):
            authorise(principal(**{"mine.*": {P}}), request(op, **fields))
        for held in (C, A):
            with pytest.raises(errors.Forbidden):
                authorise(principal(**{"mine.*": {P}, "theirs.*": {held}}), request(op, **fields))
        authorise(principal(**{"mine.*": {P}, "theirs.replies.*": {P}}), request(op, **fields))
    other = {"kittiwake-submission": "theirs.replies.a1"}  # only the reply-to names a queue
    authorise(principal(**{"mine.*": {P}}), request("enqueue", tasks=[task("mine.jobs", headers=other)]))


def test_one_forbidden_queue_refuses_the_whole_request() -> None:
    user = principal(**{"mine.*": {P, C}})
    with pytest.raises(errors.Forbidden, match="theirs"):
        authorise(user, request("enqueue", tasks=[task("mine.a"), task("theirs"), task("mine.b")]))
    with pytest.raises(errors.Forbidden, match="theirs"):
        authorise(user, request("lease", queues=["mine.a", "theirs"]))
    with pytest.raises(errors.Forbidden, match="theirs"):
        authorise(user, request("update", enqueue=[task("mine.a")], dequeue=[ref("theirs")]))


def test_a_dead_letter_queue_is_a_queue_like_any_other() -> None:
    exact = principal(**{"jobs": {C}})
    authorise(exact, request("lease", queues=["jobs"]))
    with pytest.raises(errors.Forbidden):
        authorise(exact, request("peek", queue="jobs.dead"))
    authorise(principal(**{"jobs*": {C}}), request("peek", queue="jobs.dead"))


def test_an_op_without_a_rule_is_closed_to_all_but_the_unrestricted(monkeypatch: pytest.MonkeyPatch) -> None:
    ping = request("ping")
    monkeypatch.delitem(RULES, type(ping))
    with pytest.raises(errors.Forbidden, match="needs produce, consume and admin on"):
        authorise(principal(**{"*": {P, C}}), ping)
    authorise(principal(**{"*": set(ALL_PERMISSIONS)}), ping)


def test_cross_queue_reads_become_scoped_and_named_ones_do_not() -> None:
    user = principal(**{"mine.*": {A}})
    for op, fields in [("list_queues", {}), ("stats", {}), ("find_by_sender", {"sender": "s"}),
                       ("queues_for_receiver", {"receiver": "r"})]:
        scoped = authorise(user, request(op, **fields))
        assert type(scoped).__name__.startswith("Scoped") and scoped.principal is user and scoped.id == 1
    named = authorise(user, request("stats", queues=["mine.a"]))  # scoped too: for the queues' dead letters
    assert type(named).__name__ == "ScopedStats" and named.queues == ["mine.a"]
    unrestricted = principal(**{"*": set(ALL_PERMISSIONS)})
    listing = request("list_queues")
    assert authorise(unrestricted, listing) is listing  # nothing to filter


# ------------------------------------------------------------ over a broker

ALICE = ("alice", "alice-token-0123456789abcdef")
PRODUCER = ("producer", "producer-token-0123456789ab")
ROOT = ("root", "root-token-0123456789abcdef")
CAROL = ("carol", "carol-token-0123456789abcdef")


@pytest.fixture
def secured(tmp_path: Path) -> Iterator[BrokerProcess]:
    users = write_auth_file(tmp_path / "users.json", {
        "root": (ROOT[1], {"*": ["all"]}),
        "alice": (ALICE[1], {"alice.*": ["all"], "shared.inbox": ["produce"]}),
        "producer": (PRODUCER[1], {"alice.jobs": ["produce"]}),
    })
    process = BrokerProcess(tmp_path / "data", auth_file=users)
    try:
        yield process
    finally:
        process.kill()


def test_forbidden_over_the_wire_and_nothing_of_the_request_ran(secured: BrokerProcess) -> None:
    with Client(secured.client_url(*ALICE)) as alice, Client(secured.client_url(*ROOT)) as root:
        root.enqueue("bob.jobs", b"bob's", pid="b1", sender="s1", receiver="r1")
        with pytest.raises(errors.Forbidden, match="user 'alice' may not produce into queue 'bob.jobs'"):
            alice.enqueue_many([{"queue": "alice.jobs", "data": b"1"}, {"queue": "bob.jobs", "data": b"2"}])
        assert alice.peek("alice.jobs") == []
        alice.enqueue("shared.inbox", b"hello")  # produce only
        with pytest.raises(errors.Forbidden):
            alice.peek("shared.inbox")
        for call in (lambda: alice.lease("bob.jobs"), lambda: alice.get("bob.jobs", "b1"),
                     lambda: alice.cancel(("bob.jobs", "b1")), lambda: alice.delete_queue("bob.jobs"),
                     lambda: alice.stats("bob.jobs"), lambda: alice.find_by_sender("s1", "bob.jobs")):
            with pytest.raises(errors.Forbidden):
                call()
        assert [task.pid for task in root.peek("bob.jobs")] == ["b1"]


def test_cross_queue_reads_show_only_the_users_queues(secured: BrokerProcess) -> None:
    with Client(secured.client_url(*ALICE)) as alice, Client(secured.client_url(*ROOT)) as root:
        for queue in ("alice.a", "alice.b", "bob.a", "shared.inbox"):
            root.enqueue(queue, b"x", sender="s1", receiver="r1")
        assert [info.queue for info in alice.list_queues()] == ["alice.a", "alice.b"]
        assert [info.queue for info in alice.list_queues("a$", limit=1)] == ["alice.a"]
        assert [stats.queue for stats in alice.stats()] == ["alice.a", "alice.b"]
        assert [stats.queue for stats in alice.stats(pattern="b")] == ["alice.b"]
        assert sorted(view.queue for view in alice.find_by_sender("s1")) == ["alice.a", "alice.b"]
        assert alice.queues_for_receiver("r1") == ["alice.a", "alice.b"]
        assert len(root.list_queues()) == 4


def test_a_users_find_by_sender_is_not_crowded_out_by_other_users_tasks(secured: BrokerProcess) -> None:
    """The sender's tasks in queues alice may not see sort before hers: 10,001 of them in aaron.jobs
    (more than the 10,000 the broker used to read before filtering, so she was told there were
    none), and more in bob's queues between and after hers. She gets her own, in order, all of them."""
    with Client(secured.client_url(*ALICE)) as alice, Client(secured.client_url(*ROOT)) as root:
        for start in range(0, 10_001, 5000):
            root.enqueue_many([{"queue": "aaron.jobs", "data": b"x", "pid": f"p{n:05}", "sender": "svc"}
                               for n in range(start, min(start + 5000, 10_001))])
        for queue, pid in [("alice.a", "1"), ("alice.a", "2"), ("alice.ab", "1"), ("alice.b", "1"),
                           ("alicex", "1"), ("bob.a", "1")]:
            root.enqueue(queue, b"x", pid=pid, sender="svc")
        root.enqueue("alice.a", b"x", pid="0", sender="other")
        mine = [("alice.a", "1"), ("alice.a", "2"), ("alice.ab", "1"), ("alice.b", "1")]
        assert [(view.queue, view.pid) for view in alice.find_by_sender("svc")] == mine
        assert [(view.queue, view.pid) for view in alice.find_by_sender("svc", limit=3)] == mine[:3]
        assert len(root.find_by_sender("svc", limit=10_000)) == 10_000  # unscoped: as it was


def test_a_users_find_by_sender_needing_too_many_reads_is_refused_not_answered_short(tmp_path: Path) -> None:
    """Carol administers q.*.carol, whose names lie around other queues of the sender: a read of
    the sender's index each, and at most `access.MAX_SENDER_READS` (1,000) reads a request. Past 999
    of them, a search that must read on to know it found all of hers says so (BAD_REQUEST)."""
    users = write_auth_file(tmp_path / "users.json", {
        "root": (ROOT[1], {"*": ["all"]}),
        "carol": (CAROL[1], {"q.*.carol": ["all"]}),
    })
    process = BrokerProcess(tmp_path / "data", auth_file=users)
    try:
        with Client(process.client_url(*CAROL)) as carol, Client(process.client_url(*ROOT)) as root:
            root.enqueue("q.0.carol", b"x", pid="1", sender="svc")
            root.enqueue("q.9999.carol", b"x", pid="1", sender="svc")
            root.enqueue_many([{"queue": f"q.{n:04}.bob", "data": b"x", "sender": "svc"} for n in range(1, 1000)])
            assert [view.queue for view in carol.find_by_sender("svc")] == ["q.0.carol", "q.9999.carol"]
            root.enqueue("q.1000.bob", b"x", sender="svc")
            with pytest.raises(errors.BadRequest, match="name the queue"):
                carol.find_by_sender("svc")
            assert [view.queue for view in carol.find_by_sender("svc", limit=1)] == ["q.0.carol"]
            assert [view.queue for view in carol.find_by_sender("svc", "q.9999.carol")] == ["q.9999.carol"]
    finally:
        process.kill()


def test_a_producer_may_enqueue_and_look_up_its_task_but_not_take_it(secured: BrokerProcess) -> None:
    with Client(secured.client_url(*PRODUCER)) as producer, Client(secured.client_url(*ALICE)) as alice:
        producer.enqueue("alice.jobs", b"work", pid="w1")
        assert producer.get("alice.jobs", "w1").data == b"work"
        with pytest.raises(errors.Forbidden):
            producer.lease("alice.jobs")
        with pytest.raises(errors.Forbidden):
            producer.peek("alice.jobs")
        assert producer.list_queues("jobs") == []  # no admin: it sees no queue
        [task] = alice.lease("alice.jobs")
        alice.release(task, bury=True)  # the broker moves it into alice.jobs.dead: alice's rights cover it
        assert [view.headers["kittiwake-dead-pid"] for view in alice.peek("alice.jobs.dead")] == ["w1"]


def test_a_users_listing_pages_past_a_name_through_queues_it_may_not_see(tmp_path: Path) -> None:
    """Carol administers `*.mine`: 2 of 2,500 queues, 1,200 apart, so a page of hers walks past more
    queues than the broker's scoped listing asks the engine for at once (`SCOPED_LIST_STEP`)."""
    users = write_auth_file(tmp_path / "users.json", {
        "root": (ROOT[1], {"*": ["all"]}),
        "carol": (CAROL[1], {"*.mine": ["all"]}),
        "producer": (PRODUCER[1], {"*": ["produce"]}),
    })
    names = [f"q.{index:04d}" + (".mine" if index % 1200 == 1199 else "") for index in range(2500)]
    mine = [name for name in names if name.endswith(".mine")]
    with BrokerProcess(tmp_path / "data", auth_file=users) as broker, \
            Client(broker.client_url(*ROOT)) as root, Client(broker.client_url(*CAROL)) as carol, \
            Client(broker.client_url(*PRODUCER)) as producer:
        root.enqueue_many([{"queue": name, "data": b"x"} for name in names])
        listed: list[str] = []
        after = None
        for _ in range(len(mine) + 1):
            page = carol.list_queues(limit=2, start_after=after)
            listed += [row.queue for row in page]
            if len(page) < 2:
                break
            after = page[-1].queue
        assert listed == mine
        assert mine == ["q.1199.mine", "q.2399.mine"]
        assert [row.queue for row in carol.list_queues(limit=1)] == ["q.1199.mine"]
        assert [row.queue for row in carol.list_queues("q[.]2", start_after="q.0000")] == ["q.2399.mine"]
        assert carol.list_queues(start_after=mine[-1]) == []
        assert producer.list_queues(start_after="q.0000") == []  # no admin anywhere: nothing, whatever the cursor
        with pytest.raises(errors.BadRequest, match="start_after"):
            carol.list_queues(start_after="no spaces!")
        assert len(root.list_queues(limit=5000, start_after="q.1999")) == 500
        for user in (ROOT, CAROL):  # a cursor is checked on the wire for every user, rights or not
            with broker.connect() as raw:
                assert raw.auth(*user).ok
                for bad in (42, "", "nul\x00", "a#b#c", "x" * 300, ["q.0001"]):
                    reply = raw.request("list_queues", start_after=bad)
                    assert not reply.ok and reply.error["code"] == "BAD_REQUEST", (user[0], bad, reply)
                assert [row["queue"] for row in raw.call("list_queues", start_after="q.2398", limit=1)] == [
                    "q.2399.mine"]


def test_stats_of_a_named_queue_count_its_dead_letters_only_for_who_may_see_them(tmp_path: Path) -> None:
    # a right on `shared` does not cover `shared.dead`: stats of `shared` showed its dead count anyway
    users = write_auth_file(tmp_path / "users.json", {
        "root": (ROOT[1], {"*": ["all"]}),
        "carol": (CAROL[1], {"shared": ["all"], "mine*": ["all"]}),
    })
    with BrokerProcess(tmp_path / "data", auth_file=users) as broker:
        with Client(broker.client_url(*CAROL)) as carol, Client(broker.client_url(*ROOT)) as root:
            for queue in ("shared", "mine"):
                root.enqueue(queue, b"x", pid="p")
                root.cancel((queue, "p"))  # a dead letter in <queue>.dead
            root.enqueue("shared", b"y")
            assert [(row.queue, row.dead) for row in root.stats(["shared", "mine"])] == [("shared", 1), ("mine", 1)]
            assert [(row.queue, row.size, row.dead) for row in carol.stats(["shared", "mine"])] == [
                ("shared", 1, 0), ("mine", 0, 1)]
            # by pattern, queues holding tasks: `mine` holds none (its dead letter is `mine.dead`'s task)
            assert [(row.queue, row.dead) for row in carol.stats()] == [("mine.dead", 0), ("shared", 0)]

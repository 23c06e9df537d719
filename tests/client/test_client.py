"""Every client operation against a real broker, through `Client` and `AsyncClient`.

The scenarios follow TaskMaster's data model (queues, pids, leases, atomic
updates) and Paštas' receivers; the `client` fixture runs each one through
both clients.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from kittiwake import NewTask, errors, pid_at
from kittiwake.client import LeaseRef

DEAD_REASON_HEADER = "kittiwake-dead-reason"


def pids(tasks: list[Any]) -> list[str]:
    return [task.pid for task in tasks]


# ---------------------------------------------------------------- enqueue


def test_enqueue_returns_where_the_task_landed(client: Any) -> None:
    outcome = client.enqueue("jobs", b"payload")
    assert outcome.queue == "jobs"
    assert outcome.pid and not outcome.collapsed
    task = client.get("jobs", outcome.pid)
    assert (task.data, task.state) == (b"payload", "available")


def test_enqueue_with_an_existing_pid_collapses_into_the_first_task(client: Any) -> None:
    first = client.enqueue("jobs", b"first", pid="order-17")
    again = client.enqueue("jobs", b"second", pid="order-17")
    assert (first.collapsed, again.collapsed) == (False, True)
    assert again.pid == "order-17"
    assert client.get("jobs", "order-17").data == b"first"
    assert len(client.peek("jobs")) == 1


def test_enqueue_many_takes_maps_and_new_tasks_and_answers_in_order(client: Any) -> None:
    outcomes = client.enqueue_many([
        {"queue": "a", "data": b"1", "pid": "p1"},
        NewTask("b", b"2", pid="p2", headers={"kind": "x"}),
        {"queue": "a", "data": b"3", "pid": "p1"},
    ])
    assert [(o.queue, o.pid, o.collapsed) for o in outcomes] == [("a", "p1", False), ("b", "p2", False),
                                                                  ("a", "p1", True)]
    assert client.get("b", "p2").headers == {"kind": "x"}


def test_metadata_travels_with_the_task(client: Any) -> None:
    client.enqueue("jobs", "text is sent as UTF-8 ✓", sender="alice", headers={"trace": "t1"}, max_attempts=3)
    [task] = client.lease("jobs")
    assert task.data == "text is sent as UTF-8 ✓".encode()
    assert (task.sender, task.headers, task.max_attempts) == ("alice", {"trace": "t1"}, 3)
    assert (task.attempts, task.deliveries, task.worker) == (0, 1, "test-worker")
    assert task.enqueued_at <= task.leased_at <= time.time() + 1
    assert task.expires_at == pytest.approx(task.leased_at + 30, abs=0.01)


# ------------------------------------------------------------------ order


def test_tasks_without_pid_are_served_first_in_first_out(client: Any) -> None:
    enqueued = [client.enqueue("fifo", f"task {n}").pid for n in range(20)]
    assert enqueued == sorted(enqueued)
    leased = client.lease("fifo", max_tasks=20)
    assert pids(leased) == enqueued
    assert [task.data for task in leased] == [f"task {n}".encode() for n in range(20)]


def test_smaller_pid_is_served_first(client: Any) -> None:
    for pid in ["m", "c", "x", "a"]:
        client.enqueue("prio", pid, pid=pid)
    assert pids(client.lease("prio", max_tasks=2)) == ["a", "c"]
    assert pids(client.lease("prio", max_tasks=5)) == ["m", "x"]


def test_lease_across_queues_takes_the_smallest_pids_of_all(client: Any) -> None:
    client.enqueue("left", b"", pid="2")
    client.enqueue("right", b"", pid="1")
    client.enqueue("right", b"", pid="3")
    leased = client.lease(["left", "right"], max_tasks=2)
    assert [(task.queue, task.pid) for task in leased] == [("right", "1"), ("left", "2")]


def test_max_pid_leases_only_what_is_due(client: Any) -> None:
    now = time.time()
    client.enqueue("timers", b"later", pid=pid_at(now + 3600))
    client.enqueue("timers", b"due", pid=pid_at(now - 5))
    client.enqueue("timers", b"fifo now")  # FIFO pids are the broker's clock: due at once
    leased = client.lease("timers", max_tasks=10, max_pid=pid_at(time.time()))
    assert [task.data for task in leased] == [b"due", b"fifo now"]
    assert [task.data for task in client.peek("timers")] == [b"due", b"fifo now", b"later"]
    assert client.lease("timers", max_pid=pid_at(time.time())) == []


def test_an_empty_queue_leases_nothing(client: Any) -> None:
    assert client.lease("nothing-here", max_tasks=5) == []


# ----------------------------------------------------------------- leases


def test_a_leased_task_is_not_leased_again(client: Any) -> None:
    client.enqueue("jobs", b"x")
    assert len(client.lease("jobs", lease_secs=30)) == 1
    assert client.lease("jobs") == []


def test_renew_extends_the_lease(client: Any) -> None:
    client.enqueue("jobs", b"x")
    [task] = client.lease("jobs", lease_secs=1)
    first_expiry = task.expires_at
    outcome = client.renew(task, 30)
    assert outcome.ok and outcome.expires_at > first_expiry + 20
    assert task.expires_at == outcome.expires_at  # the LeasedTask holds the new expiry
    time.sleep(1.3)  # past the first expiry
    assert client.lease("jobs") == []
    assert client.dequeue(task).ok
    assert client.peek("jobs") == []


def test_release_counts_attempts_and_dead_letters_at_max_attempts(client: Any) -> None:
    client.enqueue("work", b"flaky", pid="t1", max_attempts=2)
    [first] = client.lease("work")
    outcome = client.release(first, reason="boom 1")
    assert outcome.ok and not outcome.dead
    [second] = client.lease("work")
    assert (second.attempts, second.deliveries) == (1, 2)
    outcome = client.release(second, reason="boom 2")
    assert outcome.ok and outcome.dead
    assert client.peek("work") == []
    [dead] = client.peek("work.dead")
    assert (dead.headers["kittiwake-dead-pid"], dead.data, dead.attempts) == ("t1", b"flaky", 2)
    assert dead.pid.startswith("t1~")
    assert dead.headers[DEAD_REASON_HEADER] == "boom 2"
    assert client.stats("work")[0].dead == 1


def test_late_dequeue_of_an_expired_lease_succeeds_if_nobody_leased_the_task_since(client: Any) -> None:
    client.enqueue("jobs", b"slow")
    [task] = client.lease("jobs", lease_secs=0.3)
    time.sleep(0.5)  # the broker compares expiry with its clock: 0.2 s past it is past it
    assert client.dequeue(task).ok
    assert client.peek("jobs") == []


def test_a_stale_lease_id_is_rejected_after_the_task_was_leased_again(client: Any) -> None:
    client.enqueue("jobs", b"x")
    [stale] = client.lease("jobs", lease_secs=0.3, worker="sleepy")
    time.sleep(0.5)
    [fresh] = client.lease("jobs", worker="awake")
    assert fresh.pid == stale.pid and fresh.lease_id != stale.lease_id
    with pytest.raises(errors.TaskNotLeased) as caught:
        client.dequeue(stale)
    assert caught.value.code == "TASK_NOT_LEASED"
    [outcome] = client.dequeue([stale])  # a list reports instead of raising
    assert (outcome.ok, outcome.code) == (False, "TASK_NOT_LEASED")
    assert client.dequeue(fresh).ok


def test_renew_after_expiry_is_lease_expired(client: Any) -> None:
    client.enqueue("jobs", b"x")
    [task] = client.lease("jobs", lease_secs=0.3)
    time.sleep(0.5)  # the broker compares expiry with its clock: 0.2 s past it is past it
    with pytest.raises(errors.LeaseExpired):
        client.renew(task, 30)
    with pytest.raises(errors.LeaseExpired):
        client.release(task)


def test_a_batch_reports_each_item(client: Any) -> None:
    client.enqueue_many([{"queue": "jobs", "data": b"", "pid": pid} for pid in "abc"])
    leased = client.lease("jobs", max_tasks=3)
    missing = LeaseRef("jobs", "nope", 1)
    outcomes = client.dequeue([leased[0], missing, {"queue": "jobs", "pid": "c", "lease_id": leased[2].lease_id}])
    assert [(o.pid, o.ok, o.code) for o in outcomes] == [("a", True, None), ("nope", False, "TASK_NOT_FOUND"),
                                                         ("c", True, None)]
    renewed = client.renew(leased, 60)
    assert [o.ok for o in renewed] == [False, True, False]
    released = client.release([leased[1]], reason="later")
    assert released[0].ok
    assert pids(client.peek("jobs")) == ["b"]


# ---------------------------------------------------------------- update


def test_update_moves_a_task_to_the_next_stage_atomically(client: Any) -> None:
    client.enqueue("pipe#fetch", b"url")
    [task] = client.lease("pipe#fetch", lease_secs=5)
    result = client.update(
        dequeue=[task], enqueue=[{"queue": "pipe#extract", "data": b"page"}], lease_secs=10
    )
    assert [o.ok for o in result.dequeued] == [True]
    assert [(o.queue, o.collapsed) for o in result.enqueued] == [("pipe#extract", False)]
    assert (result.renewed, result.released) == ([], [])
    assert client.peek("pipe#fetch") == []
    assert [t.data for t in client.peek("pipe#extract")] == [b"page"]


def test_update_renews_and_releases(client: Any) -> None:
    client.enqueue_many([{"queue": "g#q", "data": b"", "pid": pid} for pid in "ab"])
    keep, give_back = client.lease("g#q", max_tasks=2, lease_secs=5)
    before = keep.expires_at
    result = client.update(renew=[keep], release=[give_back], lease_secs=60, reason="not now")
    assert result.renewed[0].ok and result.released[0].ok
    assert keep.expires_at > before + 30
    assert [(t.pid, t.state, t.attempts) for t in client.peek("g#q")] == [("a", "leased", 0), ("b", "available", 1)]


def test_a_failing_update_changes_nothing(client: Any) -> None:
    client.enqueue("g1#a", b"x")
    [task] = client.lease("g1#a")
    bogus = LeaseRef("g1#a", "no-such-pid", 1)
    with pytest.raises(errors.TaskNotFound):
        client.update(dequeue=[task], release=[bogus], enqueue=[{"queue": "g1#b", "data": b"next"}])
    assert client.peek("g1#b") == []
    assert [t.state for t in client.peek("g1#a")] == ["leased"]
    assert client.dequeue(task).ok  # the lease survived the refused update


def test_an_update_across_consistency_groups_is_refused(client: Any) -> None:
    with pytest.raises(errors.CrossGroupUpdate) as caught:
        client.update(enqueue=[{"queue": "g1#a", "data": b"1"}, {"queue": "g2#b", "data": b"2"}])
    assert caught.value.code == "CROSS_GROUP_UPDATE"
    assert client.list_queues() == []


# ------------------------------------------------------------- receivers


def test_a_directed_task_is_leased_only_by_its_receiver(client: Any) -> None:
    client.enqueue("mail", b"for R", pid="1", receiver="R")
    client.enqueue("mail", b"for all", pid="2")
    assert [t.data for t in client.lease("mail", max_tasks=5, receiver="S")] == [b"for all"]
    assert client.lease("mail", max_tasks=5) == []
    [mine] = client.lease("mail", max_tasks=5, receiver="R")
    assert (mine.data, mine.receiver) == (b"for R", "R")


def test_a_broadcast_task_is_leased_by_anyone(client: Any) -> None:
    client.enqueue("mail", b"anyone")
    assert [t.data for t in client.lease("mail", receiver="R")] == [b"anyone"]


def test_queues_for_receiver(client: Any) -> None:
    client.enqueue("inbox-1", b"", receiver="R")
    client.enqueue("inbox-2", b"", receiver="R")
    client.enqueue("inbox-3", b"", receiver="other")
    client.enqueue("inbox-4", b"")
    assert sorted(client.queues_for_receiver("R")) == ["inbox-1", "inbox-2"]
    assert client.queues_for_receiver("nobody") == []


def test_find_by_sender(client: Any) -> None:
    client.enqueue("q1", b"a1", sender="alice")
    client.enqueue("q2", b"a2", sender="alice")
    client.enqueue("q1", b"b1", sender="bob")
    assert sorted(t.data for t in client.find_by_sender("alice")) == [b"a1", b"a2"]
    assert [t.data for t in client.find_by_sender("alice", queue="q2")] == [b"a2"]
    assert len(client.find_by_sender("alice", limit=1)) == 1
    assert client.find_by_sender("carol") == []


# ------------------------------------------------------------- inspection


def test_peek_does_not_lease(client: Any) -> None:
    client.enqueue_many([{"queue": "jobs", "data": b"", "pid": str(n)} for n in range(5)])
    assert pids(client.peek("jobs", n=3)) == ["0", "1", "2"]
    assert pids(client.peek("jobs", n=10, from_pid="3")) == ["3", "4"]
    assert {t.state for t in client.peek("jobs")} == {"available"}
    assert len(client.lease("jobs", max_tasks=10)) == 5


def test_get_a_missing_task_is_task_not_found(client: Any) -> None:
    with pytest.raises(errors.TaskNotFound):
        client.get("jobs", "nope")


def test_list_queues_by_regex_and_size(client: Any) -> None:
    for queue, count in [("orders#eu", 3), ("orders#us", 1), ("logs", 2)]:
        client.enqueue_many([{"queue": queue, "data": b""}] * count)
    client.lease("orders#eu")
    everything = client.list_queues()
    assert [(q.queue, q.size, q.leased) for q in everything] == [("logs", 2, 0), ("orders#eu", 3, 1),
                                                                 ("orders#us", 1, 0)]
    assert [q.queue for q in client.list_queues(pattern="^orders#")] == ["orders#eu", "orders#us"]
    assert [q.queue for q in client.list_queues(min_tasks=2)] == ["logs", "orders#eu"]
    assert [q.queue for q in client.list_queues(pattern="orders", min_tasks=2)] == ["orders#eu"]
    assert len(client.list_queues(limit=1)) == 1


def test_list_queues_pages_by_the_last_name_of_each_page(client: Any) -> None:
    names = [f"page.{index:02d}" for index in range(25)]
    client.enqueue_many([{"queue": name, "data": b""} for name in names])
    client.enqueue_many([{"queue": "page.07", "data": b""}] * 2)
    listed: list[str] = []
    after = None
    for _ in range(10):
        page = client.list_queues("^page[.]", limit=4, start_after=after)
        listed += [row.queue for row in page]
        if len(page) < 4:
            break
        after = page[-1].queue
    assert listed == names
    assert [row.queue for row in client.list_queues(min_tasks=2, start_after="page.00")] == ["page.07"]
    assert [row.queue for row in client.list_queues(limit=2, start_after="page.10x")] == ["page.11", "page.12"]
    assert client.list_queues(start_after="page.24") == []
    for bad in ("not a queue!", "", "x" * 300):
        with pytest.raises(errors.BadRequest, match="start_after"):
            client.list_queues(start_after=bad)


def test_delete_queue_empties_it_and_the_name_can_be_used_again(client: Any) -> None:
    client.enqueue_many([{"queue": "doomed", "data": b"old"}] * 4)
    client.lease("doomed")
    assert client.delete_queue("doomed") == 4
    assert client.peek("doomed") == []
    assert client.lease("doomed") == []
    assert client.list_queues(pattern="doomed") == []
    assert client.delete_queue("doomed") == 0
    client.enqueue("doomed", b"new")
    assert [t.data for t in client.lease("doomed", max_tasks=5)] == [b"new"]


def test_stats_report_every_field(client: Any) -> None:
    client.enqueue_many([{"queue": "stats-q", "data": b""}] * 4)
    leased = client.lease("stats-q", max_tasks=2, worker="w-7")
    client.dequeue(leased[0])
    [stats] = client.stats("stats-q")
    assert (stats.queue, stats.size, stats.available, stats.leased, stats.dead) == ("stats-q", 3, 2, 1, 0)
    assert stats.enqueue_rate_1m == pytest.approx(4 / 60)
    assert stats.enqueue_rate_5m == pytest.approx(4 / 300)
    assert stats.lease_rate_1m == pytest.approx(2 / 60)
    assert stats.dequeue_rate_1m == pytest.approx(1 / 60)
    assert stats.dequeue_rate_5m == pytest.approx(1 / 300)
    assert stats.avg_lease_secs is not None and 0 <= stats.avg_lease_secs < 5
    assert stats.oldest_task_age_secs is not None and 0 <= stats.oldest_task_age_secs < 30
    [sample] = stats.leased_sample
    assert (sample.pid, sample.worker) == (leased[1].pid, "w-7")
    assert sample.peer and sample.peer.startswith("127.0.0.1:")
    assert sample.expires_at == pytest.approx(leased[1].expires_at)


def test_stats_by_name_list_and_pattern(client: Any) -> None:
    client.enqueue("s#a", b"")
    client.enqueue("s#b", b"")
    client.enqueue("other", b"")
    assert [s.queue for s in client.stats(["s#a", "s#b"])] == ["s#a", "s#b"]
    assert [s.queue for s in client.stats(pattern="^s#")] == ["s#a", "s#b"]
    assert sorted(s.queue for s in client.stats()) == ["other", "s#a", "s#b"]
    [empty] = client.stats("never-used")
    assert (empty.size, empty.leased_sample) == (0, [])


def test_ping_answers_with_the_brokers_clock(client: Any) -> None:
    answer = client.ping()
    assert abs(answer["now"] - time.time()) < 5


# ------------------------------------------------------------------ errors


def test_the_broker_refuses_bad_names_with_bad_request(client: Any) -> None:
    with pytest.raises(errors.BadRequest) as caught:
        client.enqueue("not a queue!", b"x")
    assert caught.value.code == "BAD_REQUEST"
    with pytest.raises(errors.BadRequest):
        client.lease("q", lease_secs=-1)
    with pytest.raises(errors.BadRequest):
        client.list_queues(pattern="(")


def test_wrong_types_are_refused_before_sending(client: Any) -> None:
    with pytest.raises(errors.BadRequest, match="data must be bytes"):
        client.enqueue("q", 12)
    with pytest.raises(errors.BadRequest, match="lease_id"):
        client.dequeue({"queue": "q", "pid": "p"})


def test_a_request_over_the_brokers_frame_limit_is_frame_too_large_at_once(client: Any) -> None:
    # the broker refuses the frame from its length, says FRAME_TOO_LARGE without an id and closes: that is
    # the request's answer (not applied), not a broken connection to retry on fresh ones
    started = time.monotonic()
    with pytest.raises(errors.FrameTooLarge, match="over the limit of 16777216"):
        client.enqueue_many([NewTask("big", b"x" * 1_000_000) for _ in range(20)])
    assert time.monotonic() - started < 5
    client.enqueue("big", b"small")  # the client goes on
    assert client.stats(queues=["big"])[0].size == 1

"""Leases (engine/leases.py): exclusive, renewable, fenced by their id, lazily expired (TaskMaster
§3.3, §5.6, Program 2).

TaskMaster §5.6 lets a worker dequeue a task whose lease *ran out* as long as nobody leased it
since. A worker that *released* its task asked for a retry: its old lease id must not finish the
task, or the retry is lost although an attempt was counted. What a failed attempt leads to at
max_attempts is in test_failures.py; how lease ids are made, in test_ids.py.
"""

from __future__ import annotations

from kittiwake.engine import DEAD_REASON_HEADER, Engine, SetLease
from kittiwake.model import DEAD_PID_HEADER, LeaseRef, LeaseRequest, Limits, NewTask
from kittiwake.store.memory import MemoryStore

from .harness import codes, pids, put, ref, take

NOW = 1_000_000.0
MIB = 1 << 20


# ------------------------------------------------------------------------ lease


def test_program_2_lease_ten_tasks_for_five_minutes(engine, clock):
    put(engine, clock.now, "google.com#fetch_stage", *(f"http://site{i:02}.example/" for i in range(12)))
    request = LeaseRequest(["google.com#fetch_stage"], max_tasks=10, lease_secs=300)
    leased = engine.lease(request, clock.now)
    assert pids(leased) == [f"http://site{i:02}.example/" for i in range(10)]
    assert all(task.lease_expires_at == clock.now + 300 for task in leased)
    assert len({task.lease_id for task in leased}) == 10
    assert [task.deliveries for task in leased] == [1] * 10


def test_leases_are_exclusive(engine, clock):
    put(engine, clock.now, "q", "a", "b", "c")
    first = take(engine, clock.now, "q", max_tasks=2)
    second = take(engine, clock.now, "q", max_tasks=2)
    third = take(engine, clock.now, "q", max_tasks=2)
    assert (pids(first), pids(second), third) == (["a", "b"], ["c"], [])


def test_a_lease_over_several_queues_takes_the_smallest_pids_of_all(engine, clock):
    put(engine, clock.now, "crawl#fetch.us", "1", "4", "6")
    put(engine, clock.now, "crawl#fetch.eu", "2", "3", "5")
    leased = take(engine, clock.now, "crawl#fetch.us", "crawl#fetch.eu", "crawl#fetch.us", max_tasks=4)
    assert [(t.queue, t.pid) for t in leased] == [
        ("crawl#fetch.us", "1"), ("crawl#fetch.eu", "2"), ("crawl#fetch.eu", "3"), ("crawl#fetch.us", "4")]


def test_max_pid_filters_at_the_head(engine, clock):
    put(engine, clock.now, "q", "a", "b", "c", "d")
    assert pids(take(engine, clock.now, "q", max_tasks=10, max_pid="b")) == ["a", "b"]
    assert take(engine, clock.now, "q", max_tasks=10, max_pid="b") == []


def test_unknown_and_empty_queues_lease_nothing(engine, clock):
    assert take(engine, clock.now, "nobody-here") == []
    put(engine, clock.now, "q", "a")
    take(engine, clock.now, "q")
    assert take(engine, clock.now, "q") == []


def test_a_task_with_a_receiver_goes_only_to_that_receiver(engine, clock):
    put(engine, clock.now, "inbox", "1", receiver="ada")
    put(engine, clock.now, "inbox", "2")  # broadcast
    put(engine, clock.now, "inbox", "3", receiver="bob")
    assert pids(take(engine, clock.now, "inbox", max_tasks=10, receiver="carl")) == ["2"]
    assert pids(take(engine, clock.now, "inbox", max_tasks=10)) == []
    assert pids(take(engine, clock.now, "inbox", max_tasks=10, receiver="bob")) == ["3"]
    assert pids(take(engine, clock.now, "inbox", max_tasks=10, receiver="ada")) == ["1"]


def test_a_receiver_gets_its_own_and_broadcast_tasks_in_pid_order(engine, clock):
    put(engine, clock.now, "inbox", "2", "4")
    put(engine, clock.now, "inbox", "1", "3", receiver="ada")
    assert pids(take(engine, clock.now, "inbox", max_tasks=3, receiver="ada")) == ["1", "2", "3"]


def test_lease_of_large_tasks_stops_at_the_reply_budget() -> None:
    engine = Engine(MemoryStore(), limits=Limits(max_reply_data_bytes=4 * MIB))
    engine.enqueue([NewTask("big", b"x" * MIB, pid=f"p{n:02d}") for n in range(10)], NOW)
    first = engine.lease(LeaseRequest(["big"], max_tasks=10), NOW)
    assert [t.pid for t in first] == ["p00", "p01", "p02", "p03"]
    second = engine.lease(LeaseRequest(["big"], max_tasks=10), NOW)
    assert [t.pid for t in second] == ["p04", "p05", "p06", "p07"]


def test_one_task_is_always_leased_even_over_the_budget() -> None:
    engine = Engine(MemoryStore(), limits=Limits(max_reply_data_bytes=10))
    engine.enqueue([NewTask("q", b"y" * 100, pid="a"), NewTask("q", b"y" * 100, pid="b")], NOW)
    assert [t.pid for t in engine.lease(LeaseRequest(["q"], max_tasks=5), NOW)] == ["a"]


def test_a_reply_size_limit_leases_only_what_fits_and_the_estimate_is_an_upper_bound() -> None:
    from kittiwake.protocol import encode_ok

    engine = Engine(MemoryStore())
    headers = {"trace": "t" * 40}
    engine.enqueue([NewTask("q", b"z" * 200, pid=f"p{n:02d}", sender="s", headers=headers) for n in range(20)], NOW)
    engine.enqueue([NewTask("q", b"z" * 5000, pid="p99")], NOW)
    request = LeaseRequest(["q"], max_tasks=21, worker="w1", peer="127.0.0.1:50000", max_reply_bytes=1388)
    leased = engine.lease(request, NOW)
    assert 1 < len(leased) < 20 and leased.too_large == 0  # stopped before the task over what is left
    assert len(encode_ok(2**62, leased, too_large=2**32 - 1)) <= 1388  # what the broker sends fits the limit
    assert [t.pid for t in leased] == [f"p{n:02d}" for n in range(len(leased))]


def test_a_reply_size_limit_passes_over_a_task_that_alone_would_not_fit() -> None:
    engine = Engine(MemoryStore())
    engine.enqueue([NewTask("q", data, pid=pid) for pid, data in (("a", b"y"), ("b", b"y" * 5000), ("c", b"y"))], NOW)
    leased = engine.lease(LeaseRequest(["q"], max_tasks=5, max_reply_bytes=1388), NOW)
    assert [t.pid for t in leased] == ["a", "c"] and leased.too_large == 1
    passed_over = engine.get("q", "b", NOW)
    assert (passed_over["state"], passed_over["attempts"], passed_over["deliveries"]) == ("available", 0, 0)
    assert [t.pid for t in engine.lease(LeaseRequest(["q"], max_tasks=5), NOW)] == ["b"]  # no bound: leased


def test_a_reply_size_limit_below_any_task_leases_nothing_and_says_why() -> None:
    engine = Engine(MemoryStore())
    engine.enqueue([NewTask("q", b"y", pid="a"), NewTask("q", b"y", pid="b")], NOW)
    leased = engine.lease(LeaseRequest(["q"], max_tasks=5, max_reply_bytes=100), NOW)
    assert leased == [] and leased.too_large == 2
    assert [t.pid for t in engine.lease(LeaseRequest(["q"], max_tasks=5), NOW)] == ["a", "b"]


# ------------------------------------------------------ renew, release, dequeue


def test_renew_extends_a_running_lease_without_limit(engine, clock):
    put(engine, clock.now, "q", "p")
    [task] = take(engine, clock.now, "q", lease_secs=10)
    for _ in range(5):
        clock.advance(9)
        [outcome] = engine.renew([ref(task)], 10, clock.now)
        assert outcome.ok and outcome.expires_at == clock.now + 10
    assert take(engine, clock.now, "q") == []
    assert engine.get("q", "p", clock.now)["attempts"] == 0


def test_renew_records_progress_and_note() -> None:
    engine = Engine(MemoryStore())
    engine.enqueue([NewTask("q", b"", pid="a")], NOW)
    [task] = engine.lease(LeaseRequest(["q"]), NOW)
    engine.renew([LeaseRef("q", "a", task.lease_id)], 30, NOW, progress=0.4, note="halfway")
    view = engine.get("q", "a", NOW)
    assert (view["progress"], view["note"]) == (0.4, "halfway")


def test_renew_and_release_of_an_expired_lease_are_refused(engine, clock):
    put(engine, clock.now, "q", "p")
    [task] = take(engine, clock.now, "q", lease_secs=10)
    clock.advance(10)  # expiry is inclusive: at expires_at the lease is over
    assert codes(engine.renew([ref(task)], 10, clock.now)) == ["LEASE_EXPIRED"]
    assert codes(engine.release([ref(task)], None, clock.now)) == ["LEASE_EXPIRED"]


def test_release_gives_the_task_back_at_once_and_counts_an_attempt(engine, clock):
    put(engine, clock.now, "q", "p")
    [task] = take(engine, clock.now, "q")
    [outcome] = engine.release([ref(task)], "transient error", clock.now)
    assert outcome.ok and not outcome.dead
    [again] = take(engine, clock.now, "q")
    assert (again.pid, again.attempts) == ("p", 1)


def test_a_lease_id_shown_twice_in_one_dequeue_finishes_the_task_once(engine, clock):
    put(engine, clock.now, "q", "p", "other")
    [task] = take(engine, clock.now, "q")
    assert codes(engine.dequeue([ref(task), ref(task)], clock.now)) == [None, "TASK_NOT_FOUND"]
    assert engine.list_queues(None, 0, 10)[0].size == 1


def test_refs_to_missing_tasks_and_made_up_lease_ids(engine, clock):
    put(engine, clock.now, "q", "p")
    assert codes(engine.dequeue([LeaseRef("nowhere", "p", 1)], clock.now)) == ["TASK_NOT_FOUND"]
    assert codes(engine.dequeue([LeaseRef("q", "missing", 1)], clock.now)) == ["TASK_NOT_FOUND"]
    assert codes(engine.dequeue([LeaseRef("q", "p", 1)], clock.now)) == ["TASK_NOT_LEASED"]  # never leased
    [task] = take(engine, clock.now, "q")
    wrong = LeaseRef("q", "p", task.lease_id + 1)
    assert codes(engine.renew([wrong], 5, clock.now)) == ["TASK_NOT_LEASED"]


def test_outcomes_are_per_item(engine, clock):
    put(engine, clock.now, "q", "a", "b")
    a, b = take(engine, clock.now, "q", max_tasks=2)
    outcomes = engine.dequeue([ref(a), LeaseRef("q", "zz", 9), ref(b)], clock.now)
    assert [(o.pid, o.ok, o.code) for o in outcomes] == [("a", True, None), ("zz", False, "TASK_NOT_FOUND"), ("b", True, None)]


# ---------------------------------------------------------------------- fencing


def test_lease_fencing_a_stale_worker_cannot_touch_a_task_leased_again(engine, clock):
    """docs/testing.md: a worker stalls past its lease, another takes the task, the first wakes and acks."""
    put(engine, clock.now, "q", "p")
    [stale] = take(engine, clock.now, "q", lease_secs=10, worker="w1")
    clock.advance(30)
    [fresh] = take(engine, clock.now, "q", lease_secs=10, worker="w2")
    assert codes(engine.dequeue([ref(stale)], clock.now)) == ["TASK_NOT_LEASED"]
    assert codes(engine.renew([ref(stale)], 10, clock.now)) == ["TASK_NOT_LEASED"]
    assert codes(engine.release([ref(stale)], None, clock.now)) == ["TASK_NOT_LEASED"]
    assert codes(engine.dequeue([ref(fresh)], clock.now)) == [None]  # the task completes once


def test_a_late_dequeue_succeeds_while_nobody_leased_the_task_again(engine, clock):
    """TaskMaster §5.6: a worker that overran its lease may still dequeue."""
    put(engine, clock.now, "q", "p")
    [task] = take(engine, clock.now, "q", lease_secs=10)
    clock.advance(60)
    assert codes(engine.dequeue([ref(task)], clock.now)) == [None]
    assert engine.list_queues(None, 0, 10) == []


def test_a_late_dequeue_also_works_after_the_expiry_was_swept(engine, clock):
    put(engine, clock.now, "q", "p", "q")
    [task] = take(engine, clock.now, "q", lease_secs=10)
    clock.advance(60)
    assert engine.sweep(clock.now) == 1
    assert codes(engine.dequeue([ref(task)], clock.now)) == [None]
    assert pids(take(engine, clock.now, "q", max_tasks=5)) == ["q"]


def test_a_lease_that_ran_out_may_still_dequeue_until_somebody_leases_again(engine, clock):
    put(engine, clock.now, "q", "late", "stolen")
    late, stolen = take(engine, clock.now, "q", max_tasks=2, lease_secs=5)
    clock.advance(6)
    assert codes(engine.renew([ref(late)], 30, clock.now)) == ["LEASE_EXPIRED"]
    [again] = take(engine, clock.now, "q", max_tasks=1)  # sweeps both; re-leases "late"
    assert again.pid == "late"
    assert codes(engine.dequeue([ref(late)], clock.now)) == ["TASK_NOT_LEASED"]
    assert codes(engine.dequeue([ref(stolen)], clock.now)) == [None]  # ran out, not re-leased


def test_a_released_lease_cannot_dequeue_and_the_retry_still_runs(engine, clock):
    put(engine, clock.now, "q", "p")
    [task] = take(engine, clock.now, "q", lease_secs=60)
    assert codes(engine.release([ref(task)], None, clock.now)) == [None]
    assert codes(engine.dequeue([ref(task)], clock.now)) == ["TASK_NOT_LEASED"]
    assert codes(engine.renew([ref(task)], 30, clock.now)) == ["TASK_NOT_LEASED"]
    assert codes(engine.release([ref(task)], None, clock.now)) == ["TASK_NOT_LEASED"]
    [retry] = take(engine, clock.now, "q")
    assert (retry.pid, retry.attempts) == ("p", 1)


# ----------------------------------------------------------------------- expiry


def test_an_expired_lease_makes_the_task_available_and_counts_an_attempt(engine, clock):
    put(engine, clock.now, "q", "p")
    [first] = take(engine, clock.now, "q", lease_secs=10)
    clock.advance(11)
    [second] = take(engine, clock.now, "q", lease_secs=10)
    assert second.pid == "p"
    assert second.attempts == 1 and second.deliveries == 2
    assert second.lease_id > first.lease_id


def test_lease_expiry_is_lazy_and_persisted_by_the_sweep():
    store = MemoryStore()
    engine = Engine(store)
    put(engine, 1_000.0, "q", "p")
    take(engine, 1_000.0, "q", lease_secs=10)
    assert engine.next_expiry() == 1_010.0
    assert engine.sweep(1_009.0) == 0
    store.writes.clear()
    assert engine.sweep(1_010.0) == 1
    [mutation] = store.writes
    assert isinstance(mutation, SetLease)
    assert (mutation.attempts, mutation.lease_expires_at) == (1, None)
    assert engine.next_expiry() is None or engine.next_expiry() > 1_010.0


def test_a_renewed_lease_is_not_expired_by_its_old_deadline(engine, clock):
    put(engine, clock.now, "q", "p")
    [task] = take(engine, clock.now, "q", lease_secs=10)
    engine.renew([ref(task)], 100, clock.now)
    clock.advance(50)
    assert engine.sweep(clock.now) == 0
    assert codes(engine.dequeue([ref(task)], clock.now)) == [None]


def test_heartbeats_on_a_long_lease_keep_the_expiry_queue_small(engine, clock):
    """A worker renews an hour-long lease every five seconds: its old deadlines must not pile up."""
    put(engine, clock.now, "q", "p", "other")
    [task] = take(engine, clock.now, "q", lease_secs=3600)
    [other] = take(engine, clock.now, "q", lease_secs=3600)
    for _ in range(5000):
        clock.advance(5)
        assert engine.renew([ref(task)], 3600, clock.now)[0].ok
    assert len(engine.state.expiry) <= 2048
    clock.advance(3600)
    assert engine.sweep(clock.now) == 2
    assert sorted(pids(take(engine, clock.now, "q", max_tasks=5))) == ["other", "p"]
    assert engine.get("q", "p", clock.now)["attempts"] == 1
    assert codes(engine.dequeue([ref(other)], clock.now)) == ["TASK_NOT_LEASED"]


def test_take_ready_names_queues_that_gained_available_tasks(engine, clock):
    engine.take_ready()
    put(engine, clock.now, "a", "p")
    [task] = take(engine, clock.now, "a")
    assert engine.take_ready() == {"a"}
    engine.release([ref(task)], None, clock.now)
    assert engine.take_ready() == {"a"}
    assert engine.take_ready() == set()


# --------------------------------------------------------------------- restarts


def test_leases_are_persisted_so_a_restart_does_not_hand_them_out_again(engine, clock, restart):
    """TaskMaster §5.2: forgetting leases on restart would duplicate work."""
    put(engine, clock.now, "q", "a", "b")
    [held] = take(engine, clock.now, "q", lease_secs=60)
    engine = restart(engine)
    assert pids(take(engine, clock.now, "q", max_tasks=10)) == ["b"]
    assert codes(engine.renew([ref(held)], 60, clock.now)) == [None]
    assert codes(engine.dequeue([ref(held)], clock.now)) == [None]


def test_a_lease_that_ran_out_while_the_broker_was_down_counts_its_attempt(engine, clock, restart):
    put(engine, clock.now, "q", "once", max_attempts=1)
    put(engine, clock.now, "q", "retry")
    take(engine, clock.now, "q", max_tasks=2, lease_secs=10)
    engine.store.commit()
    clock.advance(3600)  # the broker is down for an hour
    engine = restart(engine)
    [again] = take(engine, clock.now, "q", max_tasks=10)
    assert (again.pid, again.attempts) == ("retry", 1)
    assert engine.get("q.dead", "once", clock.now)["headers"] == {
        DEAD_REASON_HEADER: "LEASE_EXPIRED", DEAD_PID_HEADER: "once"}


def test_a_lease_that_ran_out_while_the_broker_was_down_can_still_be_dequeued_late(engine, clock, restart):
    put(engine, clock.now, "q", "p")
    [task] = take(engine, clock.now, "q", lease_secs=10)
    clock.advance(3600)
    engine = restart(engine)
    assert codes(engine.dequeue([ref(task)], clock.now)) == [None]

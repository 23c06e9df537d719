"""Every dead letter is kept, found by the pid that failed, and can be requeued or purged."""

from __future__ import annotations

from kittiwake.model import DEAD_PID_HEADER, DEAD_REASON_HEADER

from .harness import codes, put, ref, take


def bury(engine, clock, queue: str, pid: str, data: bytes, reason: str) -> None:
    put(engine, clock.now, queue, pid, data=data)
    [task] = take(engine, clock.now, queue)
    assert engine.release([ref(task)], reason, clock.now, bury=True)[0].dead
    clock.advance(1)


def letters(engine, queue: str) -> list[tuple[str, bytes, str]]:
    return [
        (view["headers"][DEAD_PID_HEADER], view["data"], view["headers"][DEAD_REASON_HEADER])
        for view in engine.peek(queue, 100, None, 0.0)
    ]


def test_burying_a_pid_twice_keeps_both_failures(engine, clock):
    bury(engine, clock, "q", "p", b"first", "boom 1")
    bury(engine, clock, "q", "p", b"second", "boom 2")
    assert letters(engine, "q.dead") == [("p", b"first", "boom 1"), ("p", b"second", "boom 2")]
    assert engine.stats(["q"], None, 0, clock.now)[0].dead == 2
    assert engine.get("q.dead", "p", clock.now)["data"] == b"second"  # the original pid finds the newest


def test_reaching_max_attempts_twice_and_cancelling_twice_keep_every_dead_letter(engine, clock, restart):
    for data in (b"one", b"two"):
        put(engine, clock.now, "q", "p", data=data, max_attempts=1)
        take(engine, clock.now, "q", lease_secs=5)
        clock.advance(6)
        engine.sweep(clock.now)
    for data in (b"three", b"four"):
        put(engine, clock.now, "q", "p", data=data)
        engine.cancel([("q", "p")], None, clock.now)
        clock.advance(1)
    engine = restart(engine)
    assert letters(engine, "q.dead") == [
        ("p", b"one", "LEASE_EXPIRED"), ("p", b"two", "LEASE_EXPIRED"),
        ("p", b"three", "CANCELLED"), ("p", b"four", "CANCELLED")]


def test_a_requeued_dead_letter_runs_again_under_its_own_pid_with_fresh_attempts(engine, clock):
    put(engine, clock.now, "q", "p", data=b"work", headers={"trace": "t1"}, max_attempts=2)
    for _ in range(2):
        [task] = take(engine, clock.now, "q")
        engine.release([ref(task)], "flaky", clock.now)
    page = engine.requeue_dead("q", ["p"], clock.now)
    assert [(o.ok, o.code) for o in page.outcomes] == [(True, None)]
    assert engine.peek("q.dead", 10, None, clock.now) == []
    [task] = take(engine, clock.now, "q")
    assert (task.pid, task.data, task.attempts, task.headers, task.max_attempts) == ("p", b"work", 0, {"trace": "t1"}, 2)


def test_requeue_never_destroys_a_dead_letter_it_cannot_move(engine, clock):
    bury(engine, clock, "q", "a", b"held", "boom")
    bury(engine, clock, "q", "p", b"old", "boom")
    bury(engine, clock, "q", "p", b"new", "boom")
    [held] = take(engine, clock.now, "q.dead")  # a consumer of the dead-letter queue holds "a"
    page = engine.requeue_dead("q", None, clock.now)
    assert [(o.pid.split("~")[0], o.ok, o.code) for o in page.outcomes] == [
        ("a", False, "TASK_LEASED"),
        ("p", True, None),  # the older "p" moves back ...
        ("p", False, "TASK_EXISTS"),  # ... so the newer collapses into it and stays
    ]
    assert letters(engine, "q.dead") == [("a", b"held", "boom"), ("p", b"new", "boom")]
    assert engine.get("q", "p", clock.now)["data"] == b"old"
    assert [(o.ok, o.code) for o in engine.requeue_dead("q", ["nope"], clock.now).outcomes] == [
        (False, "TASK_NOT_FOUND")]
    engine.dequeue([ref(held)], clock.now)
    assert [o.code for o in engine.requeue_dead("q.dead", ["a"], clock.now).outcomes] == ["TASK_NOT_FOUND"]


def test_requeue_and_purge_walk_a_large_dead_letter_queue_a_page_at_a_time(engine, clock):
    for i in range(25):
        bury(engine, clock, "q", f"p{i:02}", b"x", "boom")
    moved, after = 0, None
    while True:
        page = engine.requeue_dead("q", None, clock.now, after_pid=after, limit=10)
        moved += sum(o.ok for o in page.outcomes)
        if page.next_pid is None:
            break
        after = page.next_pid
    assert moved == 25 and engine.stats(["q"], None, 0, clock.now)[0].size == 25


def test_purge_deletes_the_named_dead_letters_even_when_held(engine, clock):
    bury(engine, clock, "q", "a", b"a", "boom")
    bury(engine, clock, "q", "b", b"b", "boom")
    bury(engine, clock, "q", "b", b"b2", "boom")
    [held] = take(engine, clock.now, "q.dead")
    page = engine.purge_dead("q", ["a", "b"], clock.now)
    assert [o.ok for o in page.outcomes] == [True, True, True]
    assert engine.peek("q.dead", 10, None, clock.now) == []
    assert codes(engine.dequeue([ref(held)], clock.now)) == ["TASK_NOT_FOUND"]


def test_a_child_of_a_parent_that_died_twice_is_still_born_dead(engine, clock):
    bury(engine, clock, "q", "parent", b"1", "boom")
    bury(engine, clock, "q", "parent", b"2", "boom")
    [outcome] = put(engine, clock.now, "q", "child", after=[("q", "parent")])
    assert engine.get("q.dead", "child", clock.now)["headers"][DEAD_REASON_HEADER] == "PARENT_FAILED q/parent"


def test_a_dead_letter_named_twice_in_one_purge_is_purged_once(engine, clock, restart):
    """Its own pid and its original pid both name it: counted out of the queue twice, the
    queue's size went wrong and another dead letter vanished from list_queues and stats."""
    bury(engine, clock, "q", "a", b"a", "boom")
    bury(engine, clock, "q", "b", b"b", "boom")
    [letter] = engine.dead_letters_of("q.dead", "a")
    page = engine.purge_dead("q", [letter.pid, "a"], clock.now)
    assert [(o.pid, o.ok) for o in page.outcomes] == [(letter.pid, True)]
    assert [(q.queue, q.size) for q in engine.list_queues(None, 0, 10)] == [("q.dead", 1)]
    assert [(q.queue, q.size) for q in restart(engine).list_queues(None, 0, 10)] == [("q.dead", 1)]


def test_a_dead_letter_named_twice_in_one_requeue_is_moved_once(engine, clock):
    bury(engine, clock, "q", "a", b"a", "boom")
    [letter] = engine.dead_letters_of("q.dead", "a")
    page = engine.requeue_dead("q.dead", ["a", letter.pid], clock.now)
    assert [(o.pid, o.ok) for o in page.outcomes] == [(letter.pid, True)]
    assert [(q.queue, q.size) for q in engine.list_queues(None, 0, 10)] == [("q", 1)]

"""Every dead letter is kept, found by the pid that failed, and can be requeued or purged."""

from __future__ import annotations

import pytest

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


def forge(engine, clock, queue: str, pid: str, original: str, **headers: str) -> None:
    """A task put straight into a dead-letter queue, as a client with rights on it may."""
    put(engine, clock.now, queue, pid, headers={DEAD_PID_HEADER: original, **headers})


def walk(call, queue: str, pids, limit: int) -> list[list[tuple[str, bool, str | None]]]:
    """Every page of a requeue or purge of `pids`: the outcomes of each request."""
    pages, after = [], None
    while True:
        page = call(queue, pids, 0.0, after_pid=after, limit=limit)
        pages.append([(o.pid, o.ok, o.code) for o in page.outcomes])
        if page.next_pid is None:
            return pages
        after = page.next_pid


def test_one_request_by_pid_reaches_at_most_limit_dead_letters_and_the_next_goes_on(engine, clock):
    """Every dead letter of a pid used to be acted on in one request, however many: one request
    held the broker's loop for all of them. Now a request reads at most `limit` rows of the
    dead-letter queue; `next_pid` says where the next goes on, and the pages, in pid order,
    together reach each named dead letter once and each pid that names nothing once."""
    for n in range(25):
        forge(engine, clock, "q.dead", f"p~{n:017}", "p")
    forge(engine, clock, "q.dead", "a~00000000000000001", "a")
    forge(engine, clock, "q.dead", "p~x~00000000000000001", "p~x")  # in p's range, but another pid's
    pages = walk(engine.purge_dead, "q", ["p", "nope", "a"], 10)
    # 10 rows read: a's letter, 9 of p's (and "nope", whose place holds nothing); 10 of p's; the
    # last 6 and "p~x~…", read and left
    assert [len(page) for page in pages] == [11, 10, 6]
    outcomes = [outcome for page in pages for outcome in page]
    assert outcomes[:2] == [("a~00000000000000001", True, None), ("nope", False, "TASK_NOT_FOUND")]
    assert [pid for pid, ok, _ in outcomes[2:] if ok] == [f"p~{n:017}" for n in range(25)]
    assert [view["pid"] for view in engine.peek("q.dead", 10, None, clock.now)] == ["p~x~00000000000000001"]


def test_a_range_cut_before_its_pids_first_letter_is_left_whole_to_the_next_request(engine, clock):
    """"p" has no dead letter of its own, only "p~x"'s in its range. A page that ran out of rows
    inside that range would not know whether "p" names anything: it stops before the range, so the
    next request walks it whole and says TASK_NOT_FOUND once."""
    for n in range(2):
        forge(engine, clock, "q.dead", f"a~{n:017}", "a")
        forge(engine, clock, "q.dead", f"p~x~{n:017}", "p~x")
    pages = walk(engine.purge_dead, "q", ["a", "p"], 3)
    assert pages == [[(f"a~{n:017}", True, None) for n in range(2)], [("p", False, "TASK_NOT_FOUND")]]
    assert len(engine.peek("q.dead", 10, None, clock.now)) == 2


def test_a_dead_letter_that_cannot_go_back_stays_and_the_others_go_back(engine, clock):
    """A dead letter whose original-pid header is not a pid stopped a requeue midway: those
    before it were requeued, the reply was an error (and a refusal of the whole request would hold
    up every page after it for good). Every dead letter a request reaches is checked first; that one
    stays with the outcome BAD_DEAD_LETTER, naming it, and the others go back."""
    for pids in ([None, "b~00000000000000001"], None):
        bury(engine, clock, "q", "a", b"good", "boom")
        [good] = engine.dead_letters_of("q.dead", "a")
        forge(engine, clock, "q.dead", "b~00000000000000001", "b\x01")
        named = [good.pid, "b~00000000000000001"] if pids is not None else None
        outcomes = engine.requeue_dead("q", named, clock.now).outcomes
        assert [(o.pid, o.ok, o.code) for o in outcomes] == [
            (good.pid, True, None), ("b~00000000000000001", False, "BAD_DEAD_LETTER")]
        assert "q.dead/b~00000000000000001" in outcomes[1].message
        assert [view["pid"] for view in engine.peek("q", 10, None, clock.now)] == ["a"]
        assert [view["pid"] for view in engine.peek("q.dead", 10, None, clock.now)] == ["b~00000000000000001"]
        engine.purge_dead("q", None, clock.now)
        [task] = take(engine, clock.now, "q")
        engine.dequeue([ref(task)], clock.now)


def test_a_dead_letter_of_a_dead_letter_goes_back_under_its_long_pid(engine, clock):
    """A cancelled dead letter of `q.dead` dies into `q.dead.dead`; its original pid is a dead-letter
    pid, longer than a task's pid may be, and goes back to `q.dead` as such (it was refused)."""
    long_pid = "p" * engine.limits.max_pid_bytes
    bury(engine, clock, "q", long_pid, b"x", "boom")
    [letter] = engine.dead_letters_of("q.dead", long_pid)
    engine.cancel([("q.dead", letter.pid)], None, clock.now)
    page = engine.requeue_dead("q.dead.dead", [letter.pid], clock.now)
    assert [(o.ok, o.code) for o in page.outcomes] == [(True, None)]
    assert engine.get("q.dead", letter.pid, clock.now)["data"] == b"x"

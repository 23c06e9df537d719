"""The tally (engine/tally.py): each move a task makes is counted once, on the queue it happens in,
with the wait before its first lease and the run from lease to dequeue."""

from __future__ import annotations

from kittiwake.engine import Engine
from kittiwake.engine.tally import DEAD_LETTERED, DEQUEUED, ENQUEUED, EXPIRED, LEASED, MOVES, RELEASED, Tally
from kittiwake.join_spec import JoinPort, JoinSpec
from kittiwake.model import NewTask

from .harness import finish, put, ref, take


def moves(engine: Engine, queue: str) -> dict[str, int]:
    row = engine.state.tally.counts.get(queue, [0] * len(MOVES))
    return {name: count for name, count in zip(MOVES, row) if count}


def test_each_move_is_counted_on_its_queue(engine, clock):
    put(engine, clock.now, "q", "a", "b", "c", "d", max_attempts=1)
    put(engine, clock.now, "q", "a")  # collapses: no new task
    clock.advance(2.0)
    a, b, c, d = take(engine, clock.now, "q", max_tasks=4, lease_secs=5.0)
    clock.advance(0.5)
    finish(engine, clock.now, [a])
    engine.release([ref(b)], None, clock.now, reject=True)  # back without an attempt
    engine.release([ref(c)], "no", clock.now)  # its one attempt: dead
    clock.advance(10.0)
    engine.sweep(clock.now)  # d's lease ran out: its one attempt, dead too
    assert moves(engine, "q") == {"enqueued": 4, "leased": 4, "dequeued": 1, "released": 2, "dead_lettered": 2,
                                  "expired": 1}
    assert moves(engine, "q.dead") == {}
    assert engine.state.tally.wait_secs["q"] == [2.0] * 4
    assert engine.state.tally.run_secs["q"] == [0.5]


def test_only_the_first_lease_observes_a_wait(engine, clock):
    put(engine, clock.now, "q", "a")
    first = take(engine, clock.now, "q")
    engine.release([ref(first[0])], None, clock.now)
    clock.advance(3.0)
    second = take(engine, clock.now, "q")
    assert second[0].deliveries == 2
    clock.advance(1.0)
    finish(engine, clock.now, second)
    assert moves(engine, "q") == {"enqueued": 1, "leased": 2, "released": 1, "dequeued": 1}
    assert engine.state.tally.wait_secs["q"] == [0.0]
    assert engine.state.tally.run_secs["q"] == [1.0]


def test_a_late_dequeue_counts_but_observes_no_run(engine, clock):
    put(engine, clock.now, "q", "a")
    leased = take(engine, clock.now, "q", lease_secs=1.0)
    clock.advance(2.0)
    engine.sweep(clock.now)
    finish(engine, clock.now, leased)  # nobody leased it since: the late dequeue finishes it
    assert moves(engine, "q") == {"enqueued": 1, "leased": 1, "expired": 1, "dequeued": 1}
    assert "q" not in engine.state.tally.run_secs


def test_dead_letters_count_on_their_queue_and_a_requeue_is_an_enqueue(engine, clock):
    put(engine, clock.now, "q", "a", "b")
    engine.cancel([("q", "a")], None, clock.now)
    put(engine, clock.now, "kids", "k", after=[("q", "b")])
    engine.cancel([("q", "b")], None, clock.now)  # its child fails with it
    put(engine, clock.now, "kids", "late", after=[("q", "b")])  # after a parent that failed: born dead
    assert moves(engine, "q") == {"enqueued": 2, "dead_lettered": 2}
    assert moves(engine, "kids") == {"enqueued": 2, "dead_lettered": 2}
    engine.requeue_dead("q", ["a"], clock.now)
    assert moves(engine, "q") == {"enqueued": 3, "dead_lettered": 2}
    assert moves(engine, "q.dead") == {}


def test_an_update_counts_its_halves(engine, clock):
    put(engine, clock.now, "q", "a", "b")
    a, b = take(engine, clock.now, "q", max_tasks=2)
    engine.update(enqueue=[NewTask("q", b"next", pid="c")], dequeue=[ref(a)], release=[ref(b)], now=clock.now)
    assert moves(engine, "q") == {"enqueued": 3, "leased": 2, "dequeued": 1, "released": 1}


def test_a_join_counts_its_job_as_enqueued(engine, clock):
    spec = JoinSpec("pairs", "g#jobs", [JoinPort("left", "g#left"), JoinPort("right", "g#right")])
    engine.declare_join(spec, clock.now)
    put(engine, clock.now, "g#left", "k1")
    put(engine, clock.now, "g#right", "k1")
    assert moves(engine, "g#jobs") == {"enqueued": 1}


def test_a_tally_sums_a_move_over_queues():
    tally = Tally()
    assert not tally
    tally.count("a", ENQUEUED, 3)
    tally.count("b", ENQUEUED)
    tally.count("b", LEASED)
    for move in (DEQUEUED, RELEASED, DEAD_LETTERED, EXPIRED):
        tally.count("a", move)
    tally.waited("a", -1.0)  # the wall clock stepped back
    assert tally and tally.total(ENQUEUED) == 4 and tally.total(LEASED) == 1
    assert tally.wait_secs == {"a": [0.0]}

"""A client's reads answered from the engine's state at `now` (engine/reads.py): the same answers as
the engine's own calls, in pieces when asked, for the names a reader sees, and nothing changed."""

from __future__ import annotations

import pytest

from kittiwake import errors
from kittiwake.engine import Engine
from kittiwake.engine import reads
from kittiwake.model import Limits
from kittiwake.store.memory import MemoryStore

from .harness import Clock, pids, put, take


def fill(engine: Engine, now: float) -> None:
    put(engine, now, "alpha", "a", "b", "c")
    put(engine, now, "alpha.dead", "x")
    put(engine, now, "beta", "a")
    put(engine, now, "flow.one#runs", "r1", "r2")
    put(engine, now, "flow.two#runs", "r3")
    put(engine, now, "gamma", "a", "b")


@pytest.mark.parametrize(("pattern", "min_tasks", "limit"), [
    (None, 0, 1000), (None, 2, 1000), (None, 0, 2), ("a", 0, 1000), (r"^flow\.[a-z]+#runs$", 0, 1000),
    ("^alpha", 0, 1000), ("^zzz", 0, 10),
])
def test_a_listing_answers_as_the_engine_does(engine: Engine, clock: Clock, pattern: str | None, min_tasks: int,
                                              limit: int) -> None:
    fill(engine, clock.now)
    expected = engine.list_queues(pattern, min_tasks, limit)
    assert reads.list_queues(engine.state, pattern, min_tasks, limit) == expected
    rows, after = reads.list_queues_page(engine.state, reads.listing(pattern, min_tasks), limit)
    assert (rows, after) == (expected, None)
    for start_after in ("", "alpha", "b", "flow.one#runs", "zzz"):  # past a name, as the engine pages
        paged = engine.list_queues(pattern, min_tasks, limit, start_after or None)
        assert reads.list_queues(engine.state, pattern, min_tasks, limit, start_after=start_after or None) == paged


def test_a_listing_walks_in_pieces_and_says_where_to_go_on(engine: Engine, clock: Clock) -> None:
    fill(engine, clock.now)
    asked = reads.listing(None)
    rows, after = reads.list_queues_page(engine.state, asked, None, max_walked=2)
    assert ([row.queue for row in rows], after) == (["alpha", "alpha.dead"], "alpha.dead")
    walked = list(rows)
    for _ in range(10):  # six names, two a piece
        if after is None:
            break
        rows, after = reads.list_queues_page(engine.state, asked, None, after, max_walked=2)
        walked += rows
    assert walked == engine.list_queues(None, 0, 1000)


def test_an_anchored_pattern_enters_the_names_at_its_literal_start(engine: Engine, clock: Clock) -> None:
    fill(engine, clock.now)
    asked = reads.listing(r"^flow\.[a-z]+#runs$")
    assert asked.prefix == "flow."
    rows, after = reads.list_queues_page(engine.state, asked, None, max_walked=3)  # the third ends the walk
    assert ([row.queue for row in rows], after) == (["flow.one#runs", "flow.two#runs"], None)  # alpha, beta: never walked


def test_a_listing_shows_only_the_names_the_reader_sees(engine: Engine, clock: Clock) -> None:
    fill(engine, clock.now)
    seen = reads.list_queues(engine.state, None, 0, 1000, visible=lambda name: name.startswith("g"))
    assert [row.queue for row in seen] == ["gamma"]
    with pytest.raises(errors.BadRequest):
        reads.listing("a(")


def test_peek_and_get_answer_as_the_engine_does(engine: Engine, clock: Clock) -> None:
    fill(engine, clock.now)
    take(engine, clock.now, "alpha", worker="w1")
    assert reads.peek(engine.state, "alpha", 10, None, clock.now) == engine.peek("alpha", 10, None, clock.now)
    assert pids(reads.peek(engine.state, "alpha", 2, "b", clock.now)) == ["b", "c"]
    assert reads.peek(engine.state, "nothing", 10, None, clock.now) == []
    assert reads.get(engine.state, "alpha", "a", clock.now) == engine.get("alpha", "a", clock.now)
    with pytest.raises(errors.TaskNotFound):
        reads.get(engine.state, "alpha", "zz", clock.now)
    with pytest.raises(errors.BadRequest):
        reads.peek(engine.state, "", 10, None, clock.now)


def test_peek_takes_at_most_a_batch(clock: Clock) -> None:
    engine = Engine(MemoryStore(), limits=Limits(max_batch=3))
    for start in (0, 3):
        put(engine, clock.now, "q", *[f"{n:03}" for n in range(start, start + 3)])
    assert pids(reads.peek(engine.state, "q", 10, None, clock.now)) == ["000", "001", "002"]


def test_stats_answer_as_the_engine_does_and_sweep_nothing(engine: Engine, clock: Clock) -> None:
    fill(engine, clock.now)
    take(engine, clock.now, "alpha", lease_secs=5.0, worker="w1")
    names = ["alpha", "gamma", "nothing", "alpha"]
    assert reads.stats(engine.state, names, 10, clock.now) == engine.stats(names, None, 10, clock.now)
    [alpha] = reads.stats(engine.state, ["alpha"], 10, clock.advance(60))
    assert (alpha.leased, alpha.dead) == (1, 1)  # ran out, not swept: a reader changes nothing
    assert [row.leased for row in engine.stats(["alpha"], None, 10, clock.now)] == [0]  # the engine's own sweeps
    with pytest.raises(errors.BadRequest):
        reads.stats(engine.state, ["alpha"], 5000, clock.now)
    with pytest.raises(errors.BadRequest):
        reads.stats(engine.state, [""], 10, clock.now)

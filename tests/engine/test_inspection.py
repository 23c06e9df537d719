"""Looking at queues without leasing (engine/inspection.py): peek, get, find_by_sender,
queues_for_receiver (Paštas), list_queues (TaskMaster Program 3), stats (§3.5); replies stop at the
data budget."""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kittiwake import errors
from kittiwake.engine import Engine
from kittiwake.model import Limits, NewTask
from kittiwake.store.memory import MemoryStore

from .harness import pids, put, ref, take

NOW = 1_000_000.0
MIB = 1 << 20


# ------------------------------------------------------------------ peek and get


def test_peek_shows_tasks_in_pid_order_without_leasing_them(engine, clock):
    put(engine, clock.now, "q", "c", "a", "b")
    [leased] = take(engine, clock.now, "q", worker="w1")
    views = engine.peek("q", 10, None, clock.now)
    assert [(v["pid"], v["state"]) for v in views] == [("a", "leased"), ("b", "available"), ("c", "available")]
    assert views[0]["lease_owner"] == "w1"
    assert pids(take(engine, clock.now, "q", max_tasks=10)) == ["b", "c"]


def test_peek_pages_from_a_pid(engine, clock):
    put(engine, clock.now, "q", *"abcdef")
    assert pids(engine.peek("q", 2, None, clock.now)) == ["a", "b"]
    assert pids(engine.peek("q", 2, "c", clock.now)) == ["c", "d"]
    assert pids(engine.peek("q", 10, "e", clock.now)) == ["e", "f"]
    assert engine.peek("unknown", 10, None, clock.now) == []


def test_get_shows_one_task_and_its_lease(engine, clock):
    put(engine, clock.now, "q", "p", data=b"payload", sender="svc")
    [task] = take(engine, clock.now, "q", lease_secs=60, worker="w1")
    view = engine.get("q", "p", clock.now)
    assert view["data"] == b"payload"
    assert (view["state"], view["lease_owner"], view["lease_expires_at"]) == ("leased", "w1", clock.now + 60)
    assert (view["deliveries"], view["attempts"], view["sender"]) == (1, 0, "svc")
    clock.advance(60)
    assert engine.get("q", "p", clock.now)["state"] == "available"  # ran out, even before a sweep


def test_get_of_a_missing_task(engine, clock):
    with pytest.raises(errors.TaskNotFound):
        engine.get("q", "p", clock.now)
    put(engine, clock.now, "q", "other")
    with pytest.raises(errors.TaskNotFound):
        engine.get("q", "p", clock.now)


def test_peek_stops_at_the_reply_budget() -> None:
    engine = Engine(MemoryStore(), limits=Limits(max_reply_data_bytes=2 * MIB))
    engine.enqueue([NewTask("big", b"x" * MIB, pid=f"p{n}") for n in range(5)], NOW)
    assert len(engine.peek("big", 5, None, NOW)) == 2


# ----------------------------------------------------------- senders, receivers


def test_find_by_sender_lists_a_senders_tasks_by_queue_then_pid(engine, clock):
    put(engine, clock.now, "b", "2", "1", sender="ada")
    put(engine, clock.now, "a", "9", sender="ada")
    put(engine, clock.now, "a", "1", sender="bob")
    found = engine.find_by_sender("ada", None, 10, clock.now)
    assert [(v["queue"], v["pid"]) for v in found] == [("a", "9"), ("b", "1"), ("b", "2")]
    assert [(v["queue"], v["pid"]) for v in engine.find_by_sender("ada", "b", 1, clock.now)] == [("b", "1")]
    assert engine.find_by_sender("nobody", None, 10, clock.now) == []


def test_queues_for_receiver(engine, clock):
    put(engine, clock.now, "inbox.2", "p", receiver="ada")
    put(engine, clock.now, "inbox.1", "p", receiver="ada")
    put(engine, clock.now, "inbox.3", "p", receiver="bob")
    put(engine, clock.now, "inbox.4", "p")
    assert engine.queues_for_receiver("ada") == ["inbox.1", "inbox.2"]
    [task] = take(engine, clock.now, "inbox.1", receiver="ada")
    engine.dequeue([ref(task)], clock.now)
    assert engine.queues_for_receiver("ada") == ["inbox.2"]


# ------------------------------------------------------------------ list_queues


def test_program_3_list_fetch_stages_holding_at_least_five_tasks(engine, clock):
    put(engine, clock.now, "google.com#fetch_stage", *"abcdef")
    put(engine, clock.now, "example.org#fetch_stage", *"abcde")
    put(engine, clock.now, "small.net#fetch_stage", *"ab")
    put(engine, clock.now, "google.com#parse_stage", *"abcdef")
    listed = engine.list_queues("[a-z.]*#fetch_stage", 5, 10)
    assert [(q.queue, q.size) for q in listed] == [("example.org#fetch_stage", 5), ("google.com#fetch_stage", 6)]


def test_list_queues_in_name_order_with_a_limit_and_leased_counts(engine, clock):
    for name in ["c", "a", "b", "d"]:
        put(engine, clock.now, name, "1", "2")
    take(engine, clock.now, "b")
    assert [(q.queue, q.size, q.leased) for q in engine.list_queues(None, 0, 3)] == [
        ("a", 2, 0), ("b", 2, 1), ("c", 2, 0)]


def test_the_pattern_is_searched_anywhere_in_the_name(engine, clock):
    for name in ["crawl#fetch", "crawl#fetch.dead", "mail#send"]:
        put(engine, clock.now, name, "1")
    assert [q.queue for q in engine.list_queues("fetch", 0, 10)] == ["crawl#fetch", "crawl#fetch.dead"]
    assert [q.queue for q in engine.list_queues(r"\.dead$", 0, 10)] == ["crawl#fetch.dead"]


@pytest.mark.parametrize("pattern", ["(", "a" * 2000, 42, r"(a)\1", "a(?=b)"])
def test_a_bad_pattern_is_a_bad_request(engine, pattern):
    with pytest.raises(errors.BadRequest):
        engine.list_queues(pattern, 0, 10)


def test_start_after_lists_the_queues_past_a_name_which_need_not_exist(engine, clock):
    for name in ["a", "b", "b.x", "c", "d"]:
        put(engine, clock.now, name, "1")
    assert [q.queue for q in engine.list_queues(None, 0, 2, "b")] == ["b.x", "c"]
    assert [q.queue for q in engine.list_queues(None, 0, 10, "b.w")] == ["b.x", "c", "d"]
    assert [q.queue for q in engine.list_queues("^[bd]", 0, 10, "b")] == ["b.x", "d"]
    assert engine.list_queues(None, 0, 10, "d") == []


@pytest.mark.parametrize("start_after", ["", "not a queue!", "a#b#c", "x" * 300, "nul\x00", 42, b"a"])
def test_a_bad_start_after_is_a_bad_request(engine, clock, start_after):
    put(engine, clock.now, "a", "1")
    with pytest.raises(errors.BadRequest, match="start_after"):
        engine.list_queues(None, 0, 10, start_after)


# names from a small alphabet, so prefixes, '#' and '.' meet often; each a valid queue name
QUEUE_NAMES = st.from_regex(r"(?:[ab.]{1,3}#)?[ab.\-]{1,4}", fullmatch=True)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    sizes=st.dictionaries(QUEUE_NAMES, st.integers(0, 3), max_size=40),
    pattern=st.sampled_from([None, "a", "^b", "#", r"\.$", "-"]),
    min_tasks=st.integers(0, 3),
    page=st.integers(1, 5),
    start=st.none() | QUEUE_NAMES,
)
def test_paging_with_start_after_yields_each_matching_queue_once_in_order(sizes, pattern, min_tasks, page, start):
    """Against a model (a dict of sizes): pages of `page` queues, each starting after the last name
    of the one before, give exactly the queues past `start` that match, once each, in name order."""
    engine = Engine(MemoryStore())
    for name, size in sizes.items():
        put(engine, NOW, name, *[None] * max(size, 1))
        if size == 0:  # emptied: the engine still knows it while its rates are recent, and lists it never
            engine.dequeue([ref(task) for task in take(engine, NOW, name)], NOW)
    floor = max(1, min_tasks)
    expected = sorted(
        name for name, size in sizes.items()
        if size >= floor and (pattern is None or re.search(pattern, name)) and (start is None or name > start)
    )
    listed = []
    after = start
    for _ in range(len(sizes) + 2):  # bounded: one page more than there can be rows
        rows = engine.list_queues(pattern, min_tasks, page, after)
        assert len(rows) <= page
        listed += rows
        if len(rows) < page:
            break
        after = rows[-1].queue
    else:
        raise AssertionError("paging did not end")
    assert [row.queue for row in listed] == expected
    assert all(row.size == sizes[row.queue] and row.leased == 0 for row in listed)


# ------------------------------------------------------------------------ stats


def test_stats_report_sizes_rates_and_a_sample_of_leases(engine, clock):
    """TaskMaster §3.5: rates, sizes, leased sample with the worker's address, average lease duration."""
    started = clock.now
    put(engine, clock.now, "crawl#fetch", *(f"{i:02}" for i in range(30)))
    leased = take(engine, clock.now, "crawl#fetch", max_tasks=6, worker="w1", peer="10.0.0.7:5123")
    put(engine, clock.now, "crawl#fetch.dead", "x")
    clock.advance(5)
    engine.dequeue([ref(task) for task in leased[:3]], clock.now)
    [row] = engine.stats(["crawl#fetch"], None, 2, clock.now)
    assert (row.queue, row.size, row.available, row.leased, row.dead) == ("crawl#fetch", 27, 24, 3, 1)
    assert row.enqueue_rate_1m == pytest.approx(30 / 60)
    assert row.enqueue_rate_5m == pytest.approx(30 / 300)
    assert row.lease_rate_1m == pytest.approx(6 / 60)
    assert row.dequeue_rate_1m == pytest.approx(3 / 60)
    assert row.dequeue_rate_5m == pytest.approx(3 / 300)
    assert row.avg_lease_secs == pytest.approx(5.0)
    assert row.oldest_task_age_secs == pytest.approx(clock.now - started)
    assert [(s.worker, s.peer, s.expires_at) for s in row.leased_sample] == [("w1", "10.0.0.7:5123", started + 30)] * 2


def test_rates_fall_out_of_their_window(engine, clock):
    put(engine, clock.now, "q", "a")
    clock.advance(120)
    [row] = engine.stats(["q"], None, 0, clock.now)
    assert row.enqueue_rate_1m == 0 and row.enqueue_rate_5m == pytest.approx(1 / 300)
    clock.advance(300)
    [row] = engine.stats(["q"], None, 0, clock.now)
    assert row.enqueue_rate_5m == 0 and row.avg_lease_secs is None


def test_stats_sweep_expired_leases_first(engine, clock):
    put(engine, clock.now, "q", "a", "b")
    take(engine, clock.now, "q", max_tasks=2, lease_secs=10)
    clock.advance(10)
    [row] = engine.stats(["q"], None, 5, clock.now)
    assert (row.leased, row.available, row.leased_sample) == (0, 2, [])


def test_stats_by_pattern_and_of_unknown_queues(engine, clock):
    put(engine, clock.now, "crawl#fetch", "a")
    put(engine, clock.now, "crawl#parse", "a")
    assert [row.queue for row in engine.stats(None, "fetch", 0, clock.now)] == ["crawl#fetch"]
    assert [row.queue for row in engine.stats(None, None, 0, clock.now)] == ["crawl#fetch", "crawl#parse"]
    [unknown] = engine.stats(["nowhere"], None, 0, clock.now)
    assert (unknown.size, unknown.leased, unknown.oldest_task_age_secs) == (0, 0, None)


def test_stats_survive_a_restart_in_sizes_not_in_rates(engine, clock, restart):
    """Rates are soft state (§3.5); sizes are recovered from the store."""
    put(engine, clock.now, "q", "a", "b", "c")
    take(engine, clock.now, "q")
    engine = restart(engine)
    [row] = engine.stats(["q"], None, 0, clock.now)
    assert (row.size, row.leased, row.enqueue_rate_1m) == (3, 1, 0)

"""The views' pure reads over an engine on the in-memory store: table order and the newest job records.

No broker: `queue_list` and `job_views.newest_records` take an engine state
and `now`, so the corner cases are set up exactly — queues left with only
dead letters among names that sort between, records packed into one
millisecond or spread over a month.
"""

from __future__ import annotations

from kittiwake.engine import Engine
from kittiwake.model import LeaseRef, LeaseRequest, NewTask
from kittiwake.observe.job_views import SCAN_ROWS, newest_records
from kittiwake.observe.queue_list import QueuesQuery, RowIndex, queue_page, select, totals
from kittiwake.store.memory import MemoryStore

NOW = 1_800_000_000.0


def engine_with(*queues: str) -> Engine:
    engine = Engine(MemoryStore())
    engine.enqueue([NewTask(queue=queue, data=b"x") for queue in queues], NOW)
    return engine


def bury_all(engine: Engine, queue: str) -> None:
    for task in engine.lease(LeaseRequest(queues=[queue], max_tasks=100), NOW):
        engine.release([LeaseRef(task.queue, task.pid, task.lease_id)], "boom", NOW, bury=True)


def test_a_queue_with_only_dead_letters_keeps_its_row_in_name_order() -> None:
    engine = engine_with("a", "a-b", "a.b", "a.c", "b")
    bury_all(engine, "a")
    engine.delete_queue("a")  # forget its empty state too: only `a.dead` is left
    state = engine.state
    assert "a" not in state.queues and "a.dead" in state.queues
    assert select(state, None, False, None).names == ["a", "a-b", "a.b", "a.c", "b"]
    assert select(state, None, False, None).states[0] is None  # no state: only its dead letters
    assert select(state, None, True, None).names == ["a-b", "a.b", "a.c", "a.dead", "b"]
    assert select(state, "a*", False, None).names == ["a", "a-b", "a.b", "a.c"]
    assert select(state, "a.", False, None).names == ["a.b", "a.c"]
    assert select(state, None, False, lambda name: name != "a").names == ["a-b", "a.b", "a.c", "b"]
    page = queue_page(state, QueuesQuery(sort="dead", limit=2), None, NOW)
    assert [row["queue"] for row in page["queues"]] == ["a", "a-b"] and page["queues"][0]["dead"] == 1
    assert totals(state, None) == {"queues": 5, "tasks": 4, "available": 4, "leased": 0, "blocked": 0, "dead": 1}


def test_pages_of_a_ranked_table_join_up() -> None:
    engine = Engine(MemoryStore())
    engine.enqueue([NewTask(queue=f"q{index:03d}", data=b"x") for index in range(200) for _ in range(index % 7)], NOW)
    state = engine.state
    whole = [row["queue"] for row in queue_page(state, QueuesQuery(sort="size", limit=500), None, NOW)["queues"]]
    pages = [row["queue"] for offset in range(0, 200, 30)
             for row in queue_page(state, QueuesQuery(sort="size", offset=offset, limit=30), None, NOW)["queues"]]
    assert pages == whole and len(whole) == len(set(whole)) == 171  # queues with no task are gone
    sizes = [state.queues[name].size for name in whole]
    assert sizes == sorted(sizes, reverse=True)
    ties = [name for name in whole if state.queues[name].size == 6]
    assert ties == sorted(ties)  # ties by name


def records(engine: Engine, times_ms: list[int]) -> list[str]:
    pids = [f"{ms:013d}-{index:08x}" for index, ms in enumerate(times_ms)]
    engine.enqueue([NewTask(queue="_jobs", data=b"{}", pid=pid) for pid in pids], NOW)
    return sorted(pids)


def test_the_newest_records_however_they_are_spread() -> None:
    now_ms = int(NOW * 1000)
    engine = Engine(MemoryStore())
    assert newest_records(engine.state, "_jobs", 10, NOW) == []
    spread = records(engine, [now_ms - 40 * 86400_000 + index for index in range(5)])  # a month and more ago
    assert [task.pid for task in newest_records(engine.state, "_jobs", 10, NOW)] == spread[::-1]
    crowded = records(engine, [now_ms - 5000 + index % 3000 for index in range(3 * SCAN_ROWS)])  # the last 5 s
    assert [task.pid for task in newest_records(engine.state, "_jobs", 50, NOW)] == crowded[::-1][:50]
    packed = records(engine, [now_ms - 10] * (3 * SCAN_ROWS))  # all in one millisecond: a walk forward
    assert [task.pid for task in newest_records(engine.state, "_jobs", 100, NOW)] == packed[::-1][:100]
    future = records(engine, [now_ms + 60_000])  # a submitter whose clock runs ahead
    assert newest_records(engine.state, "_jobs", 1, NOW)[0].pid == future[0]


def test_the_row_index_keeps_selections_until_the_names_change() -> None:
    engine = engine_with("k.a", "k.b")
    state, index = engine.state, RowIndex()
    first = index.select(state, "k.", False, None)
    assert first.names == ["k.a", "k.b"] and index.select(state, "k.", False, None) is first
    engine.enqueue([NewTask(queue="k.a", data=b"more")], NOW)  # same queues: the selection holds
    assert index.select(state, "k.", False, None) is first
    assert queue_page(state, QueuesQuery(sort="size", limit=1), None, NOW, index)["queues"][0]["queue"] == "k.a"
    engine.enqueue([NewTask(queue="k.c", data=b"x")], NOW)  # a new queue: selections are made again
    assert index.select(state, "k.", False, None).names == ["k.a", "k.b", "k.c"]
    alice, bob = object(), object()
    assert index.select(state, None, False, lambda name: name == "k.a", alice).names == ["k.a"]
    assert index.select(state, None, False, lambda name: name == "k.b", bob).names == ["k.b"]


def test_many_queues_with_only_dead_letters_merge_into_name_order() -> None:
    engine = engine_with(*(f"m.{index:02d}" for index in range(20)))
    for index in range(0, 20, 2):
        bury_all(engine, f"m.{index:02d}")
        engine.delete_queue(f"m.{index:02d}")
    rows = select(engine.state, None, False, None)
    assert rows.names == [f"m.{index:02d}" for index in range(20)]
    assert [state is None for state in rows.states] == [index % 2 == 0 for index in range(20)]

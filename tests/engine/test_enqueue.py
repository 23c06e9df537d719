"""Enqueue (engine/enqueue.py): explicit pids that dedupe, FIFO pids the broker assigns (TaskMaster
§3.2, Program 1). How FIFO pids are made is in test_ids.py."""

from __future__ import annotations

from kittiwake.engine import Engine, PutTask
from kittiwake.model import NewTask, pid_at
from kittiwake.store.memory import MemoryStore

from .harness import pids, put, ref, take


def test_program_1_enqueue_a_fetch_task_by_url(engine, clock):
    [outcome] = engine.enqueue(
        [NewTask("google.com#fetch_stage", b"fetch document", pid="http://www.google.com")], clock.now
    )
    assert (outcome.queue, outcome.pid, outcome.collapsed) == ("google.com#fetch_stage", "http://www.google.com", False)
    view = engine.get("google.com#fetch_stage", "http://www.google.com", clock.now)
    assert view["data"] == b"fetch document"
    assert view["state"] == "available"
    assert view["enqueued_at"] == clock.now


def test_an_existing_pid_collapses_into_the_queued_task(engine, clock):
    put(engine, clock.now, "crawl#fetch", "http://www.google.com", data=b"first")
    [again] = put(engine, clock.advance(1), "crawl#fetch", "http://www.google.com", data=b"second")
    assert again.collapsed
    assert engine.get("crawl#fetch", "http://www.google.com", clock.now)["data"] == b"first"
    assert [(q.queue, q.size) for q in engine.list_queues(None, 0, 10)] == [("crawl#fetch", 1)]


def test_a_leased_task_still_collapses_an_enqueue_of_its_pid(engine, clock):
    put(engine, clock.now, "q", "p")
    take(engine, clock.now, "q")
    [again] = put(engine, clock.now, "q", "p")
    assert again.collapsed
    assert engine.list_queues(None, 0, 10)[0].size == 1


def test_the_same_pid_twice_in_one_request_makes_one_task(engine, clock):
    outcomes = put(engine, clock.now, "q", "p", "p")
    assert [o.collapsed for o in outcomes] == [False, True]
    assert engine.list_queues(None, 0, 10)[0].size == 1


def test_once_dequeued_the_same_pid_can_be_enqueued_again(engine, clock):
    put(engine, clock.now, "q", "p", data=b"one")
    [task] = take(engine, clock.now, "q")
    assert engine.dequeue([ref(task)], clock.now)[0].ok
    [outcome] = put(engine, clock.now, "q", "p", data=b"two")
    assert not outcome.collapsed
    assert engine.get("q", "p", clock.now)["data"] == b"two"


def test_dedupe_is_per_queue(engine, clock):
    assert [o.collapsed for o in put(engine, clock.now, "a", "p")] == [False]
    assert [o.collapsed for o in put(engine, clock.now, "b", "p")] == [False]


def test_a_fifo_enqueue_never_overwrites_a_delayed_task_at_the_same_pid(engine, clock):
    due = pid_at(clock.now + 5.0)
    put(engine, clock.now, "q", due, data=b"delayed")
    clock.advance(5.0)  # the clock reaches the delayed task's pid
    [fifo] = put(engine, clock.now, "q", None, data=b"fifo")
    assert not fifo.collapsed
    assert fifo.pid > due
    assert engine.get("q", due, clock.now)["data"] == b"delayed"
    assert engine.get("q", fifo.pid, clock.now)["data"] == b"fifo"
    assert engine.list_queues(None, 0, 10)[0].size == 2


def test_a_fifo_enqueue_steps_past_a_delayed_task_the_head_no_longer_holds(engine, clock, restart):
    due = pid_at(clock.now + 5.0)
    put(engine, clock.now, "q", due, data=b"delayed")
    put(engine, clock.now, "q", *[f"{n:04x}" for n in range(10)])  # hex pids: above every FIFO pid
    engine = restart(engine, head_tasks=2)  # the head is cold: only the store knows the pids
    clock.advance(5.0)
    [fifo] = put(engine, clock.now, "q", None, data=b"fifo")
    assert fifo.pid > due and not fifo.collapsed
    assert engine.get("q", due, clock.now)["data"] == b"delayed"


def test_a_fifo_enqueue_reads_nothing_when_only_other_shapes_of_pid_sort_above_it(clock):
    class CountingStore(MemoryStore):
        reads = 0

        def load_task(self, queue, pid):
            CountingStore.reads += 1
            return super().load_task(queue, pid)

    engine = Engine(CountingStore(), head_tasks=2)
    put(engine, clock.now, "q", *[f"f{n:015x}" for n in range(1, 20)])  # hex pids, above every FIFO pid
    CountingStore.reads = 0
    put(engine, clock.now, "q", *[None] * 10)
    assert CountingStore.reads == 0


def test_an_explicit_pid_above_every_pid_of_the_queue_is_not_looked_up(clock, restart):
    """Ids that grow with time (an app's) cannot exist yet: no store read per task, even with a
    head too small to know the queue, and still none after a restart."""
    class CountingStore(MemoryStore):
        reads = 0

        def load_task(self, queue, pid):
            CountingStore.reads += 1
            return super().load_task(queue, pid)

    engine = Engine(CountingStore(), head_tasks=2)
    put(engine, clock.now, "q", *[f"{n:014x}" for n in range(1, 20)])
    CountingStore.reads = 0
    outcomes = put(engine, clock.now, "q", *[f"{n:014x}" for n in range(20, 40)])
    assert CountingStore.reads == 0 and not any(o.collapsed for o in outcomes)
    again = put(engine, clock.now, "q", f"{3:014x}", f"{39:014x}")  # below the bound: looked up, found
    assert [o.collapsed for o in again] == [True, True] and CountingStore.reads >= 1
    engine = restart(engine, head_tasks=2)
    assert [o.collapsed for o in put(engine, clock.now, "q", f"{5:014x}", f"{40:014x}")] == [True, False]


def test_delayed_tasks_are_leased_only_when_due(engine, clock):
    put(engine, clock.now, "q", pid_at(clock.now + 60.0), data=b"in a minute")
    put(engine, clock.now, "q", None, data=b"now")
    due = take(engine, clock.now, "q", max_tasks=10, max_pid=pid_at(clock.now))
    assert [t.data for t in due] == [b"now"]
    engine.dequeue([ref(due[0])], clock.now)
    clock.advance(60.0)
    due = take(engine, clock.now, "q", max_tasks=10, max_pid=pid_at(clock.now))
    assert [t.data for t in due] == [b"in a minute"]


def test_the_engine_hands_each_new_task_to_the_store_but_never_commits():
    store = MemoryStore()
    engine = Engine(store)
    put(engine, 1_000.0, "q", "a", "b", "a")
    assert [(m.task.queue, m.task.pid) for m in store.writes if isinstance(m, PutTask)] == [("q", "a"), ("q", "b")]
    assert store.commits == 0


def test_an_empty_request_does_nothing(engine, clock):
    assert engine.enqueue([], clock.now) == []
    assert engine.list_queues(None, 0, 10) == []


def test_sender_receiver_headers_and_max_attempts_are_kept(engine, clock):
    engine.enqueue(
        [NewTask("q", b"x", pid="p", sender="svc-a", receiver="worker-7", headers={"trace": "t1"}, max_attempts=3)],
        clock.now,
    )
    view = engine.get("q", "p", clock.now)
    assert (view["sender"], view["receiver"], view["headers"]) == ("svc-a", "worker-7", {"trace": "t1"})


def test_enqueued_tasks_survive_a_restart(engine, clock, restart):
    put(engine, clock.now, "q", "a", "b", data=b"kept")
    engine = restart(engine)
    assert [(v["pid"], v["data"]) for v in engine.peek("q", 10, None, clock.now)] == [("a", b"kept"), ("b", b"kept")]
    [again] = put(engine, clock.now, "q", "a")
    assert again.collapsed

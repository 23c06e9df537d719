"""The `TaskStore` contract, one suite for every store: the in-memory twin, SQLite and PostgreSQL.

What the engine relies on (kittiwake.engine.storage): writes are visible to reads at once and
durable at commit; rollback forgets what was not committed; a dropped queue's rows vanish at once
(generations, TaskMaster §5.2) and are reaped later; `load_available` skips running leases;
`recover` summarises what is on disk. Reopening a store is a restart: committed rows are there,
uncommitted ones are not, whatever happened in between. SQLite runs twice: as it is, and behind the
commit log (`store.commit_log`) checkpointing every few mutations, so reopening finds some commits in
the database and the rest replayed from the log.

The PostgreSQL cases run on the server of `support.postgres` (a fresh schema per test, dropped
after it); they skip when it is unreachable, and fail instead under CI=true.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest

from kittiwake.engine import DeleteTask, DropQueue, PutTask, SetLease
from kittiwake.engine.mutations import SetCounter, SetWaiting
from kittiwake.model import Task
from kittiwake.store.memory import MemoryStore
from kittiwake.store.postgres import PostgresStore
from kittiwake.store.sqlite import SqliteStore
from support.postgres import fresh_schema

NOW = 1_000.0


class Harness:
    """A store plus the way to restart it: SQLite closes and reopens its directory, PostgreSQL its
    connection to the same schema; the memory store, which has nothing to reopen, loses what was
    not committed (its `crash`)."""

    def __init__(self, kind: str, directory: Path, postgres: tuple[str, str] | None = None) -> None:
        self.kind = kind
        self.directory = directory
        self.postgres = postgres  # (dsn, schema)
        self.store = self._open()

    def _open(self):
        if self.kind == "memory":
            return MemoryStore()
        if self.kind == "postgresql":
            assert self.postgres is not None
            dsn, schema = self.postgres
            return PostgresStore(dsn, schema=schema, durability="os")
        if self.kind == "sqlite+log":  # behind the commit log, checkpointing after every few mutations
            return SqliteStore(self.directory, durability="os", commit_log=True, checkpoint_mutations=3,
                               log_preallocate=64 * 1024)
        return SqliteStore(self.directory, durability="os")

    def reopen(self):
        if self.kind == "memory":
            self.store.crash()
        else:
            self.store.close()
            self.store = self._open()
        return self.store


@pytest.fixture(params=["memory", "sqlite", "sqlite+log", "postgresql"])
def harness(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Harness]:
    if request.param != "postgresql":
        harness = Harness(request.param, tmp_path / "data")
        yield harness
        harness.store.close()
        return
    with fresh_schema() as (dsn, schema):
        harness = Harness(request.param, tmp_path / "data", (dsn, schema))
        try:
            yield harness
        finally:
            harness.store.close()


@pytest.fixture
def store(harness: Harness):
    return harness.store


def task(queue: str, pid: str, **fields) -> Task:
    fields.setdefault("data", f"{queue}/{pid}".encode())
    fields.setdefault("enqueued_at", NOW)
    return Task(queue=queue, pid=pid, **fields)


def put(store, *tasks: Task) -> None:
    store.write([PutTask(t) for t in tasks])


def lease(queue: str, pid: str, lease_id: int, expires_at: float | None, attempts: int = 0) -> SetLease:
    return SetLease(queue, pid, attempts, 1, lease_id, "w1", "10.0.0.1:1", NOW if expires_at else None, expires_at)


def scan_pids(store, queue: str) -> list[str]:
    return [t.pid for t in store.scan(queue, None, 1000)]


# ------------------------------------------------------------ writes and reads


def test_reads_see_writes_before_commit(store):
    put(store, task("q", "b"), task("q", "a"))
    assert store.load_task("q", "a").data == b"q/a"
    assert scan_pids(store, "q") == ["a", "b"]
    assert [t.pid for t in store.load_available("q", "", 10, NOW)] == ["a", "b"]
    store.write([DeleteTask("q", "a")])
    assert store.load_task("q", "a") is None
    assert scan_pids(store, "q") == ["b"]


def test_reads_of_other_rows_and_queues_between_buffered_writes(store):
    put(store, task("q", "a"), task("r", "a"))
    store.commit()
    put(store, task("q", "b"))
    store.write([DeleteTask("q", "a")])
    assert store.load_task("q", "c") is None  # a row no buffered write touches
    assert store.load_task("r", "a").data == b"r/a"
    assert scan_pids(store, "r") == ["a"]
    assert store.load_task("q", "b").data == b"q/b"
    assert store.load_task("q", "a") is None
    store.write([DropQueue("r")])
    assert store.load_task("r", "a") is None  # the drop is seen by a read of any of its rows
    assert scan_pids(store, "r") == []
    store.commit()
    assert scan_pids(store, "q") == ["b"]


def test_a_task_round_trips_every_field(store):
    original = task(
        "crawl#fetch", "http://www.google.com/\u00e9", data=b"\x00\xffbinary", enqueued_at=123.5, sender="svc",
        receiver="ada", headers={"trace": "t1", "kittiwake-dead-reason": "x"}, max_attempts=3, attempts=2,
        deliveries=4, lease_id=77, lease_owner="w9", lease_peer="1.2.3.4:5", leased_at=120.0, lease_expires_at=150.0)
    put(store, original)
    store.commit()
    assert store.load_task("crawl#fetch", "http://www.google.com/\u00e9") == original
    assert store.scan("crawl#fetch", None, 10) == [original]


def test_put_replaces_the_whole_row(store):
    put(store, task("q", "p", data=b"one", sender="a"))
    put(store, task("q", "p", data=b"two"))
    row = store.load_task("q", "p")
    assert (row.data, row.sender) == (b"two", None)


def test_set_lease_changes_only_the_lease_columns(store):
    put(store, task("q", "p", data=b"keep", headers={"h": "v"}))
    store.write([lease("q", "p", 5, 1_030.0, attempts=1)])
    row = store.load_task("q", "p")
    assert (row.data, row.headers, row.attempts, row.deliveries, row.lease_id) == (b"keep", {"h": "v"}, 1, 1, 5)
    assert (row.lease_owner, row.lease_peer, row.leased_at, row.lease_expires_at) == ("w1", "10.0.0.1:1", NOW, 1_030.0)


def test_interleaved_writes_to_one_row_apply_in_the_order_made(store):
    # one buffer holding every kind, rows interleaved, some rows written by several kinds in turn
    put(store, task("q", "a", data=b"a1"), task("q", "x"))
    store.write([
        lease("q", "a", 1, 1_030.0), DeleteTask("q", "x"), PutTask(task("q", "b", data=b"b1")),
        DeleteTask("q", "a"), lease("q", "b", 2, 1_040.0), PutTask(task("q", "a", data=b"a2")),
        SetWaiting("q", "b", 1, 1), SetCounter("c", 5), lease("q", "a", 3, 1_050.0), DeleteTask("q", "b"),
        PutTask(task("q", "b", data=b"b2")), SetCounter("c", 3),
    ])
    store.commit()
    a, b = store.load_task("q", "a"), store.load_task("q", "b")
    assert (a.data, a.lease_id, a.lease_expires_at) == (b"a2", 3, 1_050.0)
    assert (b.data, b.lease_id, b.waiting_on) == (b"b2", 0, 0)
    assert store.load_task("q", "x") is None
    recovery = store.recover(NOW)
    assert [(s.queue, s.size) for s in recovery.queues] == [("q", 2)]
    assert recovery.counters == {"c": 5}


def test_set_lease_and_delete_of_a_missing_row_do_nothing(store):
    store.write([lease("q", "nobody", 5, 1_030.0), DeleteTask("q", "nobody")])
    assert store.load_task("q", "nobody") is None
    assert store.recover(NOW).queues == []


def test_tasks_go_in_and_come_out_as_copies(store):
    written = task("q", "p", headers={"h": "v"})
    put(store, written)
    written.attempts = 5
    written.headers["h"] = "changed after the write"
    store.load_task("q", "p").attempts = 99
    store.scan("q", None, 1)[0].headers["h"] = "changed after the read"
    row = store.load_task("q", "p")
    assert (row.attempts, row.headers) == (0, {"h": "v"})


# ------------------------------------------------------------ commit, rollback


def test_rollback_forgets_every_kind_of_write_since_the_commit(store):
    put(store, task("q", "kept"), task("q", "changed", data=b"old"), task("q", "deleted"), task("dropped", "x"))
    store.commit()
    put(store, task("q", "new"), task("q", "changed", data=b"new"), task("other", "y"))
    store.write([lease("q", "kept", 9, 2_000.0), DeleteTask("q", "deleted"), DropQueue("dropped")])
    assert scan_pids(store, "q") == ["changed", "kept", "new"]  # flushed into the open transaction
    store.rollback()
    assert scan_pids(store, "q") == ["changed", "deleted", "kept"]
    assert store.load_task("q", "changed").data == b"old"
    assert store.load_task("q", "kept").lease_id == 0
    assert scan_pids(store, "dropped") == ["x"]
    assert scan_pids(store, "other") == []


def test_rollback_without_a_read_in_between(store):
    put(store, task("q", "a"))
    store.commit()
    put(store, task("q", "b"))
    store.rollback()
    assert scan_pids(store, "q") == ["a"]


def test_commit_without_writes_is_harmless(store):
    store.commit()
    store.commit()
    store.rollback()
    put(store, task("q", "a"))
    store.commit()
    assert scan_pids(store, "q") == ["a"]


def test_writes_after_a_rollback_go_on_normally(store):
    put(store, task("q", "a"))
    store.rollback()
    put(store, task("q", "b"))
    store.commit()
    assert scan_pids(store, "q") == ["b"]


# ------------------------------------------------------------------ reopening


def test_reopening_keeps_what_was_committed_and_loses_the_rest(harness):
    store = harness.store
    put(store, task("q", "committed"))
    store.write([lease("q", "committed", 3, 5_000.0)])
    store.commit()
    put(store, task("q", "written-and-read"))
    assert scan_pids(store, "q") == ["committed", "written-and-read"]
    put(store, task("q", "written-only"))
    store.write([DeleteTask("q", "committed")])
    store = harness.reopen()
    assert scan_pids(store, "q") == ["committed"]
    assert store.load_task("q", "committed").lease_id == 3


def test_reopening_keeps_generations(harness):
    store = harness.store
    put(store, task("q", "old"))
    store.commit()
    store.write([DropQueue("q")])
    put(store, task("q", "new"))
    store.commit()
    store = harness.reopen()
    assert scan_pids(store, "q") == ["new"]
    store.write([DropQueue("q")])
    store = harness.reopen()  # the second drop was not committed
    assert scan_pids(store, "q") == ["new"]


def test_sqlite_with_durability_os_opens_and_keeps_commits(tmp_path):
    store = SqliteStore(tmp_path, durability="os")
    try:
        assert store.durability == "os"
        put(store, task("q", "a"))
        store.commit()
        assert store.commits == 1
    finally:
        store.close()
    store = SqliteStore(tmp_path)  # fsync, the default
    try:
        assert scan_pids(store, "q") == ["a"]
    finally:
        store.close()


def test_sqlite_refuses_an_unknown_durability(tmp_path):
    with pytest.raises(ValueError):
        SqliteStore(tmp_path, durability="never")


# ----------------------------------------------------------------- generations


def test_a_dropped_queue_vanishes_from_every_read_at_once(store):
    put(store, task("q", "a", sender="svc", receiver="ada"), task("q", "b"), task("other", "a", sender="svc"))
    store.write([lease("q", "b", 4, 2_000.0)])
    store.write([DropQueue("q")])
    assert store.load_task("q", "a") is None
    assert store.scan("q", None, 10) == []
    assert store.load_available("q", "", 10, NOW) == []
    assert [(t.queue, t.pid) for t in store.find_by_sender("svc", None, 10)] == [("other", "a")]
    assert store.find_by_sender("svc", "q", 10) == []
    assert store.queues_for_receiver("ada") == []
    recovery = store.recover(NOW)
    assert [s.queue for s in recovery.queues] == ["other"]
    assert recovery.leased == []


def test_a_new_generation_is_visible_alone(store):
    put(store, task("q", "a", data=b"old"), task("q", "b", data=b"old"))
    store.commit()
    store.write([DropQueue("q")])
    put(store, task("q", "a", data=b"new"))
    assert [(t.pid, t.data) for t in store.scan("q", None, 10)] == [("a", b"new")]
    store.write([lease("q", "a", 8, 2_000.0), DeleteTask("q", "b")])
    assert store.load_task("q", "a").lease_id == 8
    store.commit()
    assert [(s.queue, s.size) for s in store.recover(NOW).queues] == [("q", 1)]


def test_reap_removes_old_generations_in_chunks(store):
    put(store, *(task("q", f"{i:03}") for i in range(25)))
    store.commit()
    store.write([DropQueue("q")])
    put(store, task("q", "000", data=b"new"))
    reaped = [store.reap(10) for _ in range(4)]
    store.commit()
    if isinstance(store, (SqliteStore, PostgresStore)):
        assert reaped == [10, 10, 5, 0]
    else:
        assert reaped == [0, 0, 0, 0]  # the memory store forgets dropped rows at once
    assert [(t.pid, t.data) for t in store.scan("q", None, 100)] == [("000", b"new")]


def test_a_drop_in_the_middle_of_a_batch_keeps_the_order_of_writes(store):
    store.write([PutTask(task("q", "before")), DropQueue("q"), PutTask(task("q", "after"))])
    store.commit()
    assert scan_pids(store, "q") == ["after"]


# ----------------------------------------------------------------- the reads


def test_load_available_skips_running_leases_in_pid_order(store):
    put(store, *(task("q", pid) for pid in "abcdef"))
    store.write([lease("q", "b", 1, NOW + 10), lease("q", "d", 2, NOW), lease("q", "e", 3, NOW - 10)])
    assert [t.pid for t in store.load_available("q", "", 10, NOW)] == ["a", "c", "d", "e", "f"]
    assert [t.pid for t in store.load_available("q", "a", 2, NOW)] == ["c", "d"]  # after_pid is exclusive
    assert [t.pid for t in store.load_available("q", "", 10, NOW + 10)] == list("abcdef")
    assert store.load_available("q", "f", 10, NOW) == []
    assert store.load_available("nowhere", "", 10, NOW) == []


def test_pids_compare_bytewise(store):
    pids = ["b", "a", "\u00e9", "Z", "a\u00e9", "aa", "\U0001f600", "0", "~"]
    put(store, *(task("q", pid) for pid in pids))
    expected = sorted(pids, key=lambda pid: pid.encode())
    assert expected == sorted(pids)  # UTF-8 order is code point order
    assert scan_pids(store, "q") == expected
    assert [t.pid for t in store.load_available("q", "a", 100, NOW)] == [p for p in expected if p > "a"]


def test_a_bound_just_after_a_pid_skips_only_that_pid(store):
    """The engine pages with pid + NUL, the smallest string after a pid (pids hold no NUL)."""
    put(store, *(task("q", pid) for pid in ["a", "a!", "ab", "b"]))
    assert [t.pid for t in store.scan("q", "a\x00", 10)] == ["a!", "ab", "b"]
    assert [t.pid for t in store.load_available("q", "a\x00", 10, NOW)] == ["a!", "ab", "b"]
    assert store.load_task("q", "a\x00") is None
    assert store.children_of("q", "a\x00") == []


def test_scan_starts_at_from_pid_and_includes_leased_tasks(store):
    put(store, *(task("q", pid) for pid in "abcde"))
    store.write([lease("q", "c", 1, NOW + 10)])
    assert [t.pid for t in store.scan("q", "b", 2)] == ["b", "c"]
    assert [t.pid for t in store.scan("q", None, 2)] == ["a", "b"]
    assert [t.pid for t in store.scan("q", "zz", 2)] == []


def test_find_by_sender_orders_by_queue_then_pid(store):
    put(store, task("b", "1", sender="svc"), task("a", "2", sender="svc"), task("a", "1", sender="svc"),
        task("a", "0", sender="other"), task("c", "9"))
    assert [(t.queue, t.pid) for t in store.find_by_sender("svc", None, 10)] == [("a", "1"), ("a", "2"), ("b", "1")]
    assert [(t.queue, t.pid) for t in store.find_by_sender("svc", None, 2)] == [("a", "1"), ("a", "2")]
    assert [(t.queue, t.pid) for t in store.find_by_sender("svc", "b", 10)] == [("b", "1")]
    assert store.find_by_sender("nobody", None, 10) == []


def test_find_by_sender_goes_on_after_a_queue_and_pid(store):
    """A search that pages through the sender's index, or jumps over queues (`after`)."""
    put(store, *(task(queue, pid, sender="svc") for queue in ("a", "b", "c") for pid in ("1", "2")),
        task("b", "0", sender="other"))
    found = lambda after, limit=10: [(t.queue, t.pid) for t in store.find_by_sender("svc", None, limit, after)]
    assert found(("a", "2")) == [("b", "1"), ("b", "2"), ("c", "1"), ("c", "2")]
    assert found(("b", ""), 3) == [("b", "1"), ("b", "2"), ("c", "1")]  # from queue b on
    assert found(("b", "\U0010ffff")) == [("c", "1"), ("c", "2")]  # past every pid of b
    assert found(("bb", "")) == [("c", "1"), ("c", "2")]
    assert found(("c", "2")) == []
    with pytest.raises(ValueError):
        store.find_by_sender("svc", "a", 10, ("a", "1"))


def test_queues_for_receiver_are_distinct_and_sorted(store):
    put(store, task("z", "1", receiver="ada"), task("a", "1", receiver="ada"), task("a", "2", receiver="ada"),
        task("m", "1", receiver="bob"), task("n", "1"))
    assert store.queues_for_receiver("ada") == ["a", "z"]
    store.write([DeleteTask("z", "1")])
    assert store.queues_for_receiver("ada") == ["a"]
    assert store.queues_for_receiver("carl") == []


# -------------------------------------------------------------------- recover


def test_recover_summarises_queues_leases_and_high_water_marks(store):
    put(store, task("q", "00000000001000000"), task("q", "00000000001000005"), task("q", "https://x/"),
        task("r", "b"), task("r", "a", lease_id=900))
    store.write([
        lease("q", "00000000001000000", 40, NOW + 30),  # running
        lease("q", "https://x/", 41, NOW - 5),  # ran out while nobody watched
        lease("r", "b", 42, NOW),  # runs out exactly now
    ])
    store.commit()
    recovery = store.recover(NOW)
    assert [(s.queue, s.size, s.max_pid, s.max_fifo_pid) for s in recovery.queues] == [
        ("q", 3, "https://x/", "00000000001000005"), ("r", 2, "b", None)]
    assert [(t.queue, t.pid) for t in recovery.leased] == [("q", "00000000001000000")]
    assert sorted((t.queue, t.pid) for t in recovery.expired) == [("q", "https://x/"), ("r", "b")]


def test_recover_of_an_empty_store(store):
    recovery = store.recover(NOW)
    assert (recovery.queues, recovery.leased, recovery.expired, recovery.counters) == ([], [], [], {})


def test_counters_only_grow_and_roll_back(harness):
    store = harness.store
    store.write([SetCounter("lease_id", 50), SetCounter("lease_id", 40), SetCounter("fifo_micros", 7)])
    store.commit()
    store.write([SetCounter("lease_id", 90)])
    store.rollback()
    assert store.recover(NOW).counters == {"lease_id": 50, "fifo_micros": 7}
    store.write([SetCounter("lease_id", 60)])
    store.commit()
    assert harness.reopen().recover(NOW).counters == {"lease_id": 60, "fifo_micros": 7}


def test_recovered_sizes_follow_puts_deletes_drops_and_rollbacks(harness):
    store = harness.store
    put(store, task("q", "a"), task("q", "b"), task("q", "c"), task("gone", "x"), task("r", "z"))
    store.write([DeleteTask("q", "c"), DeleteTask("r", "z"), DropQueue("gone")])
    put(store, task("gone", "y"))
    store.write([SetWaiting("q", "b", 2, 0)])
    store.commit()
    put(store, task("q", "d"))
    store.write([DeleteTask("q", "a")])
    store.rollback()
    store = harness.reopen()
    queues = store.recover(NOW).queues
    assert [(s.queue, s.size, s.blocked) for s in queues] == [("gone", 1, 0), ("q", 2, 1)]
    assert queues[0].max_pid == "y" and queues[1].max_pid >= "b"  # an upper bound: "c" was there


def test_recover_after_reopening_sees_only_committed_state(harness):
    store = harness.store
    put(store, task("q", "a"))
    store.write([lease("q", "a", 7, NOW + 30)])
    store.commit()
    put(store, task("q", "b"))
    store.write([lease("q", "a", 8, NOW + 60)])
    store = harness.reopen()
    recovery = store.recover(NOW)
    assert [(s.queue, s.size) for s in recovery.queues] == [("q", 1)]
    assert [(t.pid, t.lease_id, t.lease_expires_at) for t in recovery.leased] == [("a", 7, NOW + 30)]


def test_sqlite_forgets_the_generation_of_a_queue_that_is_gone(tmp_path):
    """A flood of queues created and deleted under new names must not grow the store for ever."""
    store = SqliteStore(tmp_path, durability="os")
    try:
        for index in range(50):
            put(store, task(f"q{index}", "a"))
            store.write([DropQueue(f"q{index}")])
        put(store, task("kept", "a"))
        store.write([DropQueue("kept")])
        put(store, task("kept", "b"))
        store.commit()
        assert len(store._gens) == 51
        store.reap(1000)
        store.commit()
        assert store._gens == {"kept": 1}
        assert store._db.execute("SELECT count(*) FROM generations").fetchone() == (1,)
        put(store, task("q7", "again"))  # a forgotten queue starts afresh
        store.commit()
        assert scan_pids(store, "q7") == ["again"]
        assert scan_pids(store, "kept") == ["b"]
    finally:
        store.close()
    store = SqliteStore(tmp_path, durability="os")
    try:
        assert scan_pids(store, "q7") == ["again"] and scan_pids(store, "kept") == ["b"]
    finally:
        store.close()

"""The commit log in front of SQLite (`store.commit_log`, `store.log_file`, `store.coalesce`).

* the format: records read back in order; a log cut at any byte, or followed by junk, yields
  exactly its whole records (a torn tail is dropped, never applied); a header of another
  magic, version or checksum is refused;
* mutations survive encoding (hypothesis);
* `coalesce` leaves what a run of mutations does unchanged (hypothesis, against a model);
* the store behind the log, against a model (hypothesis): any sequence of passes, checkpoints
  every few mutations, then a crash while the next record was being appended, cut at any byte
  with or without junk after it, and now and then a checkpoint that stopped before its new log:
  reopening (with the log or without) finds exactly the acknowledged passes — and the next one only when its whole record reached the file;
* faults: a failed write or sync is cut back (its outcome known) or leaves the log damaged until
  the cut succeeds; a checkpoint that fails, or stops between the database's commit and the log's
  new round, loses nothing and replays nothing twice; the log file is made once and reused in place.
"""

from __future__ import annotations

import errno
import itertools
import shutil
from pathlib import Path
from typing import Any, Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kittiwake import errors
from kittiwake.engine.mutations import (
    DeleteEdges,
    DeleteTask,
    DropQueue,
    Mutation,
    PutEdge,
    PutTask,
    SetCounter,
    SetLease,
    SetWaiting,
)
from kittiwake.model import Task
from kittiwake.store import commit_log, log_file
from kittiwake.store.coalesce import coalesce
from kittiwake.store.sqlite import SqliteStore

NOW = 1_000.0
QUEUES = ("a", "b")
PIDS = tuple(f"p{n}" for n in range(6))
PREALLOCATE = 8 * 1024  # the log file's size as made: small here, records run past it too
FAST = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

# ------------------------------------------------------------------ format


def test_records_read_back_in_order() -> None:
    data = commit_log.encode_header(7) + b"".join(commit_log.encode_record(7 + n, bytes([n]) * n) for n in range(5))
    scan = commit_log.scan(data)
    assert scan.first_ticket == 7
    assert scan.records == [(7 + n, bytes([n]) * n) for n in range(5)]
    assert scan.end == len(data) and scan.torn_bytes == 0 and scan.next_ticket == 12


@given(st.lists(st.binary(max_size=40), max_size=5), st.data())
@settings(max_examples=60, deadline=None)
def test_a_log_cut_anywhere_keeps_exactly_its_whole_records(payloads: list[bytes], data: st.DataObject) -> None:
    header = commit_log.encode_header(1)
    records = [commit_log.encode_record(1 + n, payload) for n, payload in enumerate(payloads)]
    whole = header + b"".join(records)
    cut = data.draw(st.integers(len(header), len(whole)), label="cut")
    junk = data.draw(st.binary(max_size=30), label="junk")
    data = whole[:cut] + junk
    scan = commit_log.scan(data)
    ends = [len(header) + sum(len(r) for r in records[: n + 1]) for n in range(len(records))]
    kept = 0  # records whose every byte is there (junk may happen to complete the one cut)
    while kept < len(records) and data[ends[kept] - len(records[kept]) : ends[kept]] == records[kept]:
        kept += 1
    assert [payload for _, payload in scan.records] == payloads[:kept]
    assert scan.end == (ends[kept - 1] if kept else len(header))
    assert scan.torn_bytes == len(data) - scan.end


def test_a_record_of_the_wrong_ticket_ends_the_log() -> None:
    data = commit_log.encode_header(1) + commit_log.encode_record(1, b"x") + commit_log.encode_record(3, b"y")
    scan = commit_log.scan(data)
    assert [ticket for ticket, _ in scan.records] == [1] and scan.torn_bytes > 0


@pytest.mark.parametrize("damage", ["magic", "version", "checksum", "short"])
def test_a_header_not_of_this_format_is_refused(damage: str) -> None:
    header = bytearray(commit_log.encode_header(1))
    if damage == "magic":
        header[0] ^= 0xFF
    elif damage == "version":
        header = bytearray(commit_log.HEADER.pack(commit_log.MAGIC, commit_log.VERSION + 1, 1))
        header += commit_log.HEADER_CRC.pack(__import__("zlib").crc32(bytes(header)))
    elif damage == "checksum":
        header[12] ^= 0x01
    else:
        header = header[:10]
    with pytest.raises(commit_log.LogFormatError):
        commit_log.scan(bytes(header))


# --------------------------------------------------------------- mutations

texts = st.text(max_size=8)
maybe_text = st.none() | texts
floats = st.floats(allow_nan=False, allow_infinity=False)
maybe_float = st.none() | floats
counts = st.integers(0, 1 << 40)
tasks = st.builds(
    Task, st.sampled_from(QUEUES), st.sampled_from(PIDS), st.binary(max_size=20), floats, maybe_text, maybe_text,
    st.none() | st.dictionaries(texts, texts, max_size=2), st.none() | counts, counts, counts, counts, maybe_text,
    maybe_text, maybe_float, maybe_float, counts, counts, maybe_float, maybe_text,
)
mutations = st.one_of(
    st.builds(PutTask, tasks),
    st.builds(SetLease, texts, texts, counts, counts, counts, maybe_text, maybe_text, maybe_float, maybe_float,
              maybe_float, maybe_text),
    st.builds(SetWaiting, texts, texts, counts, counts),
    st.builds(PutEdge, texts, texts, texts, texts),
    st.builds(DeleteEdges, texts, texts),
    st.builds(DeleteTask, texts, texts),
    st.builds(DropQueue, texts),
    st.builds(SetCounter, texts, st.integers(0, (1 << 63) - 1)),
)


@given(st.lists(mutations, max_size=12))
@settings(max_examples=80, deadline=None)
def test_mutations_survive_encoding(batch: list[Mutation]) -> None:
    assert commit_log.decode_mutations(commit_log.encode_mutations(batch)) == batch


# ------------------------------------------------------------------- model


class Model:
    """What a store holds, as plain dicts: (queue, pid) → row fields, counters, edges."""

    def __init__(self) -> None:
        self.rows: dict[tuple[str, str], dict[str, Any]] = {}
        self.counters: dict[str, int] = {}
        self.edges: set[tuple[str, str, str, str]] = set()

    def copy(self) -> Model:
        other = Model()
        other.rows = {key: dict(row) for key, row in self.rows.items()}
        other.counters = dict(self.counters)
        other.edges = set(self.edges)
        return other

    def apply(self, m: Mutation) -> None:
        if isinstance(m, PutTask):
            t = m.task
            self.rows[(t.queue, t.pid)] = {
                "data": t.data, "attempts": t.attempts, "deliveries": t.deliveries, "lease_id": t.lease_id,
                "lease_owner": t.lease_owner, "lease_expires_at": t.lease_expires_at, "waiting_on": t.waiting_on,
                "children": t.children, "note": t.note,
            }
        elif isinstance(m, SetLease):
            row = self.rows.get((m.queue, m.pid))
            if row is not None:
                row.update(attempts=m.attempts, deliveries=m.deliveries, lease_id=m.lease_id,
                           lease_owner=m.lease_owner, lease_expires_at=m.lease_expires_at, note=m.note)
        elif isinstance(m, SetWaiting):
            row = self.rows.get((m.queue, m.pid))
            if row is not None:
                row.update(waiting_on=m.waiting_on, children=m.children)
        elif isinstance(m, DeleteTask):
            self.rows.pop((m.queue, m.pid), None)
        elif isinstance(m, DropQueue):
            self.rows = {key: row for key, row in self.rows.items() if key[0] != m.queue}
        elif isinstance(m, SetCounter):
            self.counters[m.name] = max(self.counters.get(m.name, m.value), m.value)
        elif isinstance(m, PutEdge):
            self.edges.add((m.queue, m.pid, m.child_queue, m.child_pid))
        elif isinstance(m, DeleteEdges):
            self.edges = {edge for edge in self.edges if edge[:2] != (m.queue, m.pid)}

    def sizes(self) -> dict[str, int]:
        sizes: dict[str, int] = {}
        for queue, _ in self.rows:
            sizes[queue] = sizes.get(queue, 0) + 1
        return sizes


def model_of_store(store: SqliteStore) -> tuple[Model, dict[str, int]]:
    """The store read back as a model, and the queue sizes its recovery summary states."""
    model = Model()
    recovery = store.recover(NOW)
    for queue in QUEUES:
        for t in store.scan(queue, None, 1_000):
            model.rows[(t.queue, t.pid)] = {
                "data": t.data, "attempts": t.attempts, "deliveries": t.deliveries, "lease_id": t.lease_id,
                "lease_owner": t.lease_owner, "lease_expires_at": t.lease_expires_at, "waiting_on": t.waiting_on,
                "children": t.children, "note": t.note,
            }
    model.counters = dict(recovery.counters)
    return model, {summary.queue: summary.size for summary in recovery.queues}


def draw_pass(data: st.DataObject, model: Model, serial: list[int]) -> list[Mutation]:
    """Mutations the engine could write in one pass: puts of absent pids, updates and deletes of present ones."""
    batch: list[Mutation] = []
    for _ in range(data.draw(st.integers(1, 5), label="pass size")):
        present = sorted(model.rows)
        absent = [(q, p) for q in QUEUES for p in PIDS if (q, p) not in model.rows]
        choices = ["counter", "drop"] + (["put", "put", "put"] if absent else []) + (
            ["lease", "lease", "delete", "delete", "waiting"] if present else [])
        kind = data.draw(st.sampled_from(choices), label="kind")
        serial[0] += 1
        n = serial[0]
        mutation: Mutation
        if kind == "put":
            queue, pid = data.draw(st.sampled_from(absent), label="new")
            mutation = PutTask(Task(queue, pid, b"d%d" % n, NOW, attempts=n % 3))
        elif kind == "lease":
            queue, pid = data.draw(st.sampled_from(present), label="leased")
            mutation = SetLease(queue, pid, n % 4, n, n, f"w{n}", None, NOW, NOW + n, None, None)
        elif kind == "waiting":
            queue, pid = data.draw(st.sampled_from(present), label="waiting")
            mutation = SetWaiting(queue, pid, 0, n % 3)
        elif kind == "delete":
            queue, pid = data.draw(st.sampled_from(present), label="deleted")
            mutation = DeleteTask(queue, pid)
        elif kind == "drop":
            mutation = DropQueue(data.draw(st.sampled_from(QUEUES), label="dropped"))
        else:
            mutation = SetCounter(data.draw(st.sampled_from(["lease_id", "x"]), label="counter"), n)
        model.apply(mutation)
        batch.append(mutation)
    return batch


@given(st.data())
@settings(max_examples=100, deadline=None)
def test_coalescing_changes_nothing_a_run_of_mutations_does(data: st.DataObject) -> None:
    model = Model()
    before = Model()
    serial = [0]
    run: list[Mutation] = []
    for _ in range(data.draw(st.integers(1, 6), label="passes")):
        run.extend(draw_pass(data, model, serial))
    shortened = coalesce(run)
    for mutation in shortened:
        before.apply(mutation)
    assert before.rows == model.rows and before.counters == model.counters
    assert len(shortened) <= len(run)


def test_a_task_enqueued_leased_and_dequeued_between_checkpoints_is_never_written() -> None:
    run: list[Mutation] = [
        PutTask(Task("a", "p1", b"x", NOW)),
        SetLease("a", "p1", 0, 1, 1, "w", None, NOW, NOW + 30, None, None),
        DeleteTask("a", "p1"),
        SetLease("a", "old", 0, 1, 2, "w", None, NOW, NOW + 30, None, None),
        SetLease("a", "old", 0, 1, 3, "w", None, NOW, NOW + 30, None, None),
    ]
    assert coalesce(run) == [run[-1]]


# ------------------------------------------------------------ crash model


def open_logged(directory: Path, *, every: int = 1_000, fault: Callable[[str], None] | None = None) -> SqliteStore:
    ticks = itertools.count()  # a clock that moves 1 s a reading: a failed checkpoint is retried soon
    return SqliteStore(directory, durability="fsync", commit_log=True, checkpoint_mutations=every,
                       checkpoint_secs=1e9, monotonic_clock=lambda: float(next(ticks)), log_fault=fault,
                       log_preallocate=PREALLOCATE)


def crash(store: SqliteStore) -> None:
    """Stop as a SIGKILL would: nothing checkpointed, the open transaction gone."""
    assert store._log is not None
    store._log.close()
    store._db.close()


def image(directory: Path, target: Path, log_tail: bytes = b"", at: int = 0) -> Path:
    """The files of `directory` as a crash would leave them, `log_tail` written into the log at `at`."""
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    for name in ("kittiwake.db", "kittiwake.db-wal", log_file.LOG_NAME):
        source = directory / name
        if source.exists():
            shutil.copyfile(source, target / name)
    if log_tail:
        with open(target / log_file.LOG_NAME, "r+b") as log:
            log.seek(at)
            log.write(log_tail)
    return target


def assert_holds(store: SqliteStore, model: Model) -> None:
    found, sizes = model_of_store(store)
    assert found.rows == model.rows
    assert found.counters == model.counters
    assert sizes == {queue: size for queue, size in model.sizes().items() if size}


@given(st.data())
@FAST
def test_a_crash_at_any_byte_of_an_append_recovers_the_acknowledged_passes(tmp_path: Path, data: st.DataObject) -> None:
    directory = tmp_path / "live"
    shutil.rmtree(directory, ignore_errors=True)
    faults = Faults()
    store = open_logged(directory, every=data.draw(st.sampled_from([1, 4, 1_000]), label="checkpoint every"),
                        fault=faults)
    model = Model()
    serial = [0]
    try:
        for _ in range(data.draw(st.integers(0, 8), label="acknowledged passes")):
            # now and then a checkpoint stops between the database's commit and the new log: the old log,
            # its records all applied, stays in front of the next ones
            faults.armed["start"] = int(data.draw(st.integers(0, 1), label="checkpoint cut") == 0)
            store.write(draw_pass(data, model, serial))
            store.commit()
        faults.armed.clear()
        acknowledged = model.copy()
        # the next pass: its record only partly written when the power goes
        torn = draw_pass(data, model, serial)
        assert store._log is not None
        record = commit_log.encode_record(store._log.next_ticket, commit_log.encode_mutations(torn))
        cut = data.draw(st.integers(0, len(record)), label="cut")
        junk = data.draw(st.binary(max_size=16), label="junk") if cut < len(record) else b""
        target = image(directory, tmp_path / "crashed", record[:cut] + junk, store._log.end)
    finally:
        crash(store)
    reopened = SqliteStore(target, commit_log=data.draw(st.booleans(), label="with the log"))
    try:
        assert_holds(reopened, model if cut == len(record) else acknowledged)
    finally:
        reopened.close()
    again = SqliteStore(target)  # opened once more: the replay is not applied twice
    try:
        assert_holds(again, model if cut == len(record) else acknowledged)
    finally:
        again.close()


def available_in(model: Model, queue: str, after_pid: str, limit: int, now: float) -> list[tuple[str, bytes]]:
    """What `load_available` must answer, from the model: `sql.LOAD_AVAILABLE`'s rule."""
    rows = sorted((pid, row) for (q, pid), row in model.rows.items() if q == queue and pid > after_pid
                  and row["waiting_on"] == 0 and (row["lease_expires_at"] is None or row["lease_expires_at"] <= now))
    return [(pid, row["data"]) for pid, row in rows[:limit]]


@given(st.data())
@FAST
def test_reads_see_every_write_before_them_whether_or_not_they_flushed(tmp_path: Path, data: st.DataObject) -> None:
    """`load_available` and `load_task`, with the log or without, flush only when an unflushed
    mutation touches a pid above the one they read from, or the row they read (a refill above a
    head of leased tasks needs none); whichever they do, they answer what every write before
    them says — also mid-pass, before the commit."""
    directory = tmp_path / "reads"
    shutil.rmtree(directory, ignore_errors=True)
    if data.draw(st.booleans(), label="with the log"):
        store = open_logged(directory, every=data.draw(st.sampled_from([1, 4, 1_000]), label="checkpoint every"))
    else:
        store = SqliteStore(directory, durability="fsync")
    model = Model()
    serial = [0]
    try:
        for _ in range(data.draw(st.integers(1, 8), label="passes")):
            store.write(draw_pass(data, model, serial))
            for _ in range(data.draw(st.integers(0, 2), label="reads")):
                queue = data.draw(st.sampled_from(QUEUES), label="queue")
                after = data.draw(st.sampled_from(("",) + PIDS), label="after")
                limit = data.draw(st.integers(1, 4), label="limit")
                now = NOW + data.draw(st.integers(0, 10), label="now")
                found = [(task.pid, task.data) for task in store.load_available(queue, after, limit, now)]
                assert found == available_in(model, queue, after, limit, now)
                pid = data.draw(st.sampled_from(PIDS), label="pid")
                row = store.load_task(queue, pid)
                expected = model.rows.get((queue, pid))
                assert (row.data if row is not None else None) == (expected["data"] if expected else None)
            if data.draw(st.booleans(), label="commit"):
                store.commit()
    finally:
        if store._log is not None:
            crash(store)
        else:
            store.close()


def test_a_refill_above_the_leased_head_leaves_the_log_unflushed(tmp_path: Path) -> None:
    """Leases and dequeues of the head do not make a refill of the rows above it flush: they stay
    pending, to cancel out at the checkpoint."""
    store = open_logged(tmp_path / "head")
    try:
        store.write([put(f"p{n}") for n in range(6)])
        store.commit()
        store.checkpoint()  # the backlog in the database, as a drain finds it
        store.write([SetLease("a", "p0", 1, 1, 1, "w", None, NOW, NOW + 30, None, None), DeleteTask("a", "p1")])
        store.commit()
        assert [task.pid for task in store.load_available("a", "p2", 10, NOW)] == ["p3", "p4", "p5"]
        assert store._pending  # nothing was flushed for it
        assert [task.pid for task in store.load_available("a", "", 10, NOW)] == ["p2", "p3", "p4", "p5"]
        assert not store._pending  # a read across the touched pids flushes first
    finally:
        store.close()


# ------------------------------------------------------------------ faults


class Faults:
    def __init__(self) -> None:
        self.armed: dict[str, int] = {}  # stage → failures left

    def __call__(self, stage: str) -> None:
        left = self.armed.get(stage, 0)
        if left:
            self.armed[stage] = left - 1
            raise OSError(errno.EIO, f"injected at {stage}")


def put(pid: str) -> PutTask:
    return PutTask(Task("a", pid, pid.encode(), NOW))


@pytest.mark.parametrize("stage", ["write", "sync"])
def test_a_failed_append_is_cut_back_and_not_applied(tmp_path: Path, stage: str) -> None:
    faults = Faults()
    store = open_logged(tmp_path, fault=faults)
    store.write([put("p1")])
    store.commit()
    store.write([put("p2")])
    faults.armed[stage] = 1
    with pytest.raises(errors.StorageFailure) as failed:
        store.commit()
    assert failed.value.outcome_known
    store.rollback()
    store.write([put("p3")])
    store.commit()
    crash(store)
    reopened = SqliteStore(tmp_path)
    try:
        assert [t.pid for t in reopened.scan("a", None, 10)] == ["p1", "p3"]
    finally:
        reopened.close()


def test_a_log_that_cannot_be_cut_back_takes_no_record_until_it_can(tmp_path: Path) -> None:
    faults = Faults()
    store = open_logged(tmp_path, fault=faults)
    store.write([put("p1")])
    store.commit()
    store.write([put("p2")])
    faults.armed["sync"] = 1
    faults.armed["cut"] = 2
    with pytest.raises(errors.StorageFailure) as failed:
        store.commit()
    assert not failed.value.outcome_known  # the record may be in the file
    store.rollback()
    store.write([put("p3")])
    with pytest.raises(errors.StorageFailure):
        store.commit()  # the second cut fails too: nothing goes after a record of unknown fate
    store.rollback()
    store.write([put("p4")])
    store.commit()  # the third cut works, then the record
    crash(store)
    reopened = SqliteStore(tmp_path)
    try:
        assert [t.pid for t in reopened.scan("a", None, 10)] == ["p1", "p4"]
    finally:
        reopened.close()


def test_a_checkpoint_cut_short_loses_nothing_and_applies_nothing_twice(tmp_path: Path) -> None:
    faults = Faults()
    store = open_logged(tmp_path, every=2, fault=faults)
    faults.armed["start"] = 1  # the database commits the checkpoint; the log's new round does not begin
    store.write([put("p1"), put("p2"), SetCounter("lease_id", 5)])
    store.commit()  # checkpoint due: the database takes p1, p2 and ticket 1
    assert store.checkpoints == 1
    store.write([DeleteTask("a", "p1"), put("p3")])
    store.commit()
    crash(store)
    reopened = SqliteStore(tmp_path)
    try:
        assert [t.pid for t in reopened.scan("a", None, 10)] == ["p2", "p3"]
        assert reopened.recover(NOW).queues[0].size == 2
        assert reopened.recover(NOW).counters == {"lease_id": 5}
    finally:
        reopened.close()


def test_a_failed_checkpoint_keeps_serving_from_the_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = open_logged(tmp_path, every=1)
    real = store._store_ticket
    calls: list[int] = []

    def failing(ticket: int) -> None:
        calls.append(ticket)
        if len(calls) == 1:
            raise __import__("sqlite3").OperationalError("disk I/O error")
        real(ticket)

    monkeypatch.setattr(store, "_store_ticket", failing)
    store.write([put("p1")])
    store.commit()  # the checkpoint fails: the commit does not
    assert store.checkpoints == 0
    assert [t.pid for t in store.scan("a", None, 10)] == ["p1"]
    store._checkpoint_retry_at = 0.0
    store.write([put("p2")])
    store.commit()
    assert store.checkpoints == 1
    crash(store)
    reopened = SqliteStore(tmp_path)
    try:
        assert [t.pid for t in reopened.scan("a", None, 10)] == ["p1", "p2"]
    finally:
        reopened.close()


def test_a_log_of_another_version_stops_the_open(tmp_path: Path) -> None:
    SqliteStore(tmp_path, commit_log=True).close()
    header = commit_log.HEADER.pack(commit_log.MAGIC, commit_log.VERSION + 1, 1)
    (tmp_path / log_file.LOG_NAME).write_bytes(header + commit_log.HEADER_CRC.pack(__import__("zlib").crc32(header)))
    with pytest.raises(commit_log.LogFormatError, match="version"):
        SqliteStore(tmp_path)


def test_without_the_log_a_log_left_behind_is_replayed_and_removed(tmp_path: Path) -> None:
    store = open_logged(tmp_path)
    store.write([put("p1")])
    store.commit()
    crash(store)
    plain = SqliteStore(tmp_path)
    try:
        assert not (tmp_path / log_file.LOG_NAME).exists()
        assert [t.pid for t in plain.scan("a", None, 10)] == ["p1"]
        assert plain.replayed == 1
    finally:
        plain.close()


def test_the_log_file_is_made_once_and_reused_in_place(tmp_path: Path) -> None:
    store = open_logged(tmp_path, every=2)
    inode = (tmp_path / log_file.LOG_NAME).stat().st_ino
    size = (tmp_path / log_file.LOG_NAME).stat().st_size
    assert size == PREALLOCATE
    for n in range(10):
        store.write([put(f"p{n}"), DeleteTask("a", f"p{n}") if n % 2 else SetCounter("x", n)])
        store.commit()
    assert store.checkpoints >= 4
    stat = (tmp_path / log_file.LOG_NAME).stat()
    assert (stat.st_ino, stat.st_size) == (inode, size)
    crash(store)
    reopened = SqliteStore(tmp_path, commit_log=True)
    try:
        assert [t.pid for t in reopened.scan("a", None, 20)] == ["p0", "p2", "p4", "p6", "p8"]
        assert reopened.recover(NOW).counters == {"x": 8}
    finally:
        reopened.close()


def test_a_clean_close_checkpoints_everything_and_leaves_an_empty_log(tmp_path: Path) -> None:
    store = open_logged(tmp_path)
    store.write([put("p1")])
    store.commit()
    store.write([put("p2"), SetCounter("x", 3)])
    store.commit()
    store.write([put("p3")])  # never committed: forgotten, as in a crash
    store.close()
    assert store.checkpoints == 1
    scan = log_file.read(tmp_path)
    assert scan is not None and scan.records == []
    reopened = SqliteStore(tmp_path)
    try:
        assert reopened.replayed == 0
        assert [t.pid for t in reopened.scan("a", None, 10)] == ["p1", "p2"]
    finally:
        reopened.close()


def test_too_much_logged_and_not_checkpointed_holds_the_next_pass_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kittiwake.store import sqlite

    monkeypatch.setattr(sqlite, "MAX_UNCHECKPOINTED", 3)
    faults = Faults()
    store = open_logged(tmp_path, every=2, fault=faults)
    faults.armed["checkpoint"] = 3  # the checkpoints after these commits fail, and the one before the next pass
    store.write([put("p1"), put("p2")])
    store.commit()
    store.write([put("p3")])
    store.commit()
    assert store.checkpoints == 0
    store.write([put("p4")])
    with pytest.raises(errors.StorageFailure) as refused:
        store.commit()  # 3 logged, none in the database: the pass waits for a checkpoint, which fails
    assert refused.value.outcome_known
    store.rollback()
    store.write([put("p5")])
    store.commit()  # the checkpoint first (p1-p3), then the pass into the log
    assert store.checkpoints >= 1
    crash(store)
    reopened = SqliteStore(tmp_path)
    try:
        assert [t.pid for t in reopened.scan("a", None, 10)] == ["p1", "p2", "p3", "p5"]
    finally:
        reopened.close()


# ------------------------------------------------------------------ broker


def test_the_broker_setting_is_for_sqlite_only() -> None:
    from kittiwake.broker.config import BrokerConfig

    assert BrokerConfig(commit_log="on").commit_log == "on"
    with pytest.raises(ValueError, match="commit log"):
        BrokerConfig(commit_log="on", store_url="postgresql://localhost/db")
    with pytest.raises(ValueError, match="commit_log"):
        BrokerConfig(commit_log="yes")
    with pytest.raises(ValueError, match="checkpoint_secs"):
        BrokerConfig(checkpoint_secs=-1.0)


def test_a_broker_behind_the_log_keeps_what_it_acknowledged_across_a_kill(tmp_path: Path) -> None:
    from support.broker_process import BrokerProcess

    broker = BrokerProcess(tmp_path / "data", extra_args=["--commit-log", "on", "--checkpoint-secs", "3600"])
    try:
        with broker.connect() as conn:
            conn.call("enqueue", tasks=[{"queue": "q", "pid": f"p{n}", "data": b"x"} for n in range(5)])
            [leased] = conn.lease("q")
            [outcome] = conn.call("dequeue", leases=[{"queue": "q", "pid": leased["pid"], "lease_id": leased["lease_id"]}])
            assert outcome["ok"]
        broker.kill()  # nothing checkpointed: everything is in the log
        scan = log_file.read(tmp_path / "data")
        assert scan is not None and len(scan.records) >= 2
        broker.restart()
        with broker.connect() as conn:
            assert [task["pid"] for task in conn.call("peek", queue="q", n=10)] == ["p1", "p2", "p3", "p4"]
    finally:
        broker.kill()


# ------------------------------------------------- damage and large passes


def reopened_pids(directory: Path, **options: Any) -> list[str]:
    """The pids of queue "a" as a store opened on `directory` finds them."""
    store = SqliteStore(directory, **options)
    try:
        return [t.pid for t in store.scan("a", None, 10)]
    finally:
        store.close()


def test_a_bad_record_with_a_whole_next_record_after_it_is_damage_not_a_torn_tail() -> None:
    records = [commit_log.encode_record(1 + n, bytes([n]) * 20) for n in range(3)]
    whole = commit_log.encode_header(1) + b"".join(records)
    second = commit_log.HEADER_BYTES + len(records[0])
    flipped = bytearray(whole)
    flipped[second + commit_log.RECORD_HEAD_BYTES + commit_log.TICKET.size + 3] ^= 0x10  # a payload bit
    scan = commit_log.scan(bytes(flipped))
    assert [ticket for ticket, _ in scan.records] == [1] and scan.damaged == 2 and scan.end == second
    # the last record bad, or cut: nothing follows it, a torn tail as before
    assert commit_log.scan(whole[:-5]).damaged is None
    last = bytearray(whole)
    last[-3] ^= 0x10
    assert commit_log.scan(bytes(last)).damaged is None


def test_a_log_damaged_before_acknowledged_records_stops_the_open(tmp_path: Path) -> None:
    store = open_logged(tmp_path)
    for pid in ("p1", "p2", "p3"):
        store.write([put(pid)])
        store.commit()
    crash(store)
    path = tmp_path / log_file.LOG_NAME
    data = bytearray(path.read_bytes())
    scan = commit_log.scan(bytes(data))
    second = commit_log.HEADER_BYTES + commit_log.RECORD_HEAD_BYTES + len(scan.records[0][1]) + commit_log.TICKET.size
    data[second + commit_log.RECORD_HEAD_BYTES + commit_log.TICKET.size + 2] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(commit_log.LogFormatError, match="damaged: the record of ticket 2"):
        SqliteStore(tmp_path)
    assert path.read_bytes() == bytes(data)  # left as it was, for whoever looks into it
    # with --durability os a power cut may leave this too (pages reach the disk in any order), and an
    # ok promised no more than surviving the process: the store opens, without the records from 2 on
    assert reopened_pids(tmp_path, durability="os") == ["p1"]


def test_a_pass_too_large_for_one_record_goes_straight_into_the_database(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(commit_log, "MAX_RECORD_BYTES", 4096)
    store = open_logged(tmp_path)
    store.write([put("p1")])
    store.commit()
    store.write([PutTask(Task("a", "p2", b"x" * 5000, NOW)), DeleteTask("a", "p1")])
    store.commit()  # acknowledged: it must be read back after a crash
    store.write([put("p3")])
    store.commit()
    crash(store)
    reopened = SqliteStore(tmp_path)
    try:
        assert [(t.pid, len(t.data)) for t in reopened.scan("a", None, 10)] == [("p2", 5000), ("p3", 2)]
        assert reopened.recover(NOW).queues[0].size == 2
    finally:
        reopened.close()

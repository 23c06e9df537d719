"""What the PostgreSQL store does beyond the shared contract (tests/store/test_contract.py):
its versioned schema, its settings, and how it fails and comes back when the server cuts it off.
Also `kittiwake migrate` and `kittiwake broker --store` when the store cannot be opened."""

from __future__ import annotations

import json
from typing import Iterator

import psycopg
import pytest
from click.testing import CliRunner

from kittiwake import errors
from kittiwake.cli.main import cli
from kittiwake.engine import Engine, PutTask, SetLease
from kittiwake.engine.storage import SharedTaskStore, TaskStore, is_shared
from kittiwake.model import Task
from kittiwake.store import postgres_statements as sql
from kittiwake.store.memory import MemoryStore
from kittiwake.store.postgres import PostgresStore
from support.broker_process import BrokerDidNotStart, BrokerProcess
from support.postgres import fresh_schema

NOW = 1_000.0
NOBODY_LISTENS = "postgresql://postgres@127.0.0.1:1/test"  # port 1: refused at once


@pytest.fixture
def place() -> Iterator[tuple[str, str]]:
    with fresh_schema() as (dsn, schema):
        yield dsn, schema


def url(place: tuple[str, str]) -> str:
    dsn, schema = place
    return f"{dsn}{'&' if '?' in dsn else '?'}schema={schema}"


def admin(place: tuple[str, str], statement: str, *params: object) -> list[tuple]:
    with psycopg.connect(place[0], autocommit=True) as db:
        cursor = db.execute(statement, params or None)
        return cursor.fetchall() if cursor.description else []


def test_a_new_schema_is_at_the_current_version(place):
    store = PostgresStore(place[0], schema=place[1])
    try:
        assert (store.version_found, store.schema_version) == (0, sql.SCHEMA_VERSION)
    finally:
        store.close()
    assert admin(place, f"SELECT version FROM {place[1]}.schema_version") == [(sql.SCHEMA_VERSION,)]


def test_a_store_that_brokers_share_is_a_shared_task_store(place: tuple[str, str]) -> None:
    """The engine reaches what several brokers share (claims, leases run out anywhere, id shares)
    through `SharedTaskStore`, told apart by `is_shared`: only `brokers="many"` is shared."""
    shared: SharedTaskStore = PostgresStore(place[0], schema=place[1], brokers="many")
    alone: TaskStore = PostgresStore(place[0], schema=place[1])
    try:
        assert is_shared(shared) and not is_shared(alone) and not is_shared(MemoryStore())
        assert (set(shared.claimed), shared.expired_lease_queues(NOW, 10)) == (set(), [])
        engine = Engine(shared)
        assert engine.shared and (engine.state.id_slot, engine.state.id_stride) == (shared.id_slot, shared.id_stride)
        assert shared.id_stride > 1 and not Engine(alone).shared
    finally:
        shared.close()
        alone.close()


def test_an_older_schema_is_upgraded_and_keeps_its_rows(place, monkeypatch):
    store = PostgresStore(place[0], schema=place[1])
    store.write([PutTask(Task(queue="q", pid="a", data=b"kept", enqueued_at=NOW))])
    store.commit()
    store.close()
    upgrade = ["CREATE TABLE later_table (x integer)"]
    monkeypatch.setattr(sql, "SCHEMA_VERSION", sql.SCHEMA_VERSION + 1)
    monkeypatch.setitem(sql.MIGRATIONS, sql.SCHEMA_VERSION, upgrade)
    store = PostgresStore(place[0], schema=place[1])
    try:
        assert (store.version_found, store.schema_version) == (sql.SCHEMA_VERSION - 1, sql.SCHEMA_VERSION)
        assert store.load_task("q", "a").data == b"kept"
    finally:
        store.close()
    assert admin(place, f"SELECT count(*) FROM {place[1]}.later_table") == [(0,)]


def test_a_newer_schema_is_refused(place):
    PostgresStore(place[0], schema=place[1]).close()
    admin(place, f"UPDATE {place[1]}.schema_version SET version = 99")
    with pytest.raises(errors.SchemaTooNew, match="version 99"):
        PostgresStore(place[0], schema=place[1])


def test_durability_picks_synchronous_commit(place):
    for durability, expected in (("fsync", "on"), ("os", "off")):
        store = PostgresStore(place[0], schema=place[1], durability=durability)
        try:
            assert store._db.execute("SHOW synchronous_commit").fetchone() == (expected,)
        finally:
            store.close()


def test_a_note_with_nul_round_trips(place):
    """PostgreSQL text cannot hold NUL; a worker's note may."""
    store = PostgresStore(place[0], schema=place[1])
    try:
        store.write([PutTask(Task(queue="q", pid="a", data=b"", enqueued_at=NOW, note="a\x00b"))])
        store.write([SetLease("q", "a", 0, 1, 3, "w", None, NOW, NOW + 5, 0.5, "c\x00d")])
        store.commit()
        assert store.load_task("q", "a").note == "c\x00d"
    finally:
        store.close()


def test_bad_arguments_are_refused_before_connecting():
    for kwargs in ({"schema": "Bad-Name"}, {"durability": "never"}, {"connect_timeout_secs": 0}):
        with pytest.raises(ValueError):
            PostgresStore("postgresql://127.0.0.1/test", **kwargs)
    with pytest.raises(ValueError, match="connection string"):
        PostgresStore("this is = not a dsn = at all")


def test_an_unreachable_server_is_a_storage_failure():
    with pytest.raises(errors.StorageFailure, match="PostgreSQL: connection"):
        PostgresStore(NOBODY_LISTENS)


def test_a_cut_connection_fails_then_rollback_reconnects(place):
    store = PostgresStore(place[0], schema=place[1])
    try:
        store.write([PutTask(Task(queue="q", pid="kept", data=b"", enqueued_at=NOW))])
        store.commit()
        store.write([PutTask(Task(queue="q", pid="lost", data=b"", enqueued_at=NOW))])
        assert [t.pid for t in store.scan("q", None, 10)] == ["kept", "lost"]  # flushed, not committed
        backend = store._db.info.backend_pid
        admin(place, "SELECT pg_terminate_backend(%s)", backend)
        with pytest.raises(errors.StorageFailure) as failure:
            store.commit()
        assert failure.value.outcome_known is False  # the connection broke: the commit may or may not be in
        store.rollback()
        assert store._db.info.backend_pid != backend
        assert [t.pid for t in store.scan("q", None, 10)] == ["kept"]
        store.write([PutTask(Task(queue="q", pid="after", data=b"", enqueued_at=NOW))])
        store.commit()
        assert [s.size for s in store.recover(NOW).queues] == [2]
    finally:
        store.close()


def test_a_commit_the_server_refuses_has_a_known_outcome(place):
    store = PostgresStore(place[0], schema=place[1])
    try:
        store.write([PutTask(Task(queue="q", pid="a", data=b"", enqueued_at=NOW, max_attempts=2**63))])  # > bigint
        with pytest.raises(errors.StorageFailure) as failure:
            store.commit()
        assert failure.value.outcome_known is True
        store.rollback()
        assert store.scan("q", None, 10) == []
    finally:
        store.close()


# ------------------------------------------------------------------ the commands


def test_migrate_creates_then_finds_the_schema(place):
    runner = CliRunner()
    first = runner.invoke(cli, ["--json", "migrate", "--store", url(place)])
    assert first.exit_code == 0, first.output
    assert json.loads(first.output)["version"] == sql.SCHEMA_VERSION and json.loads(first.output)["was"] == 0
    second = runner.invoke(cli, ["migrate", "--store", url(place)])
    assert second.exit_code == 0 and f"schema version {sql.SCHEMA_VERSION} (was {sql.SCHEMA_VERSION})" in second.output


def test_migrate_says_why_it_cannot(place):
    runner = CliRunner()
    down = runner.invoke(cli, ["migrate", "--store", NOBODY_LISTENS])
    assert down.exit_code == 1 and "Connection refused" in down.output and "Traceback" not in down.output
    assert runner.invoke(cli, ["migrate", "--store", "mysql://x/y"]).exit_code == 2
    PostgresStore(place[0], schema=place[1]).close()
    admin(place, f"UPDATE {place[1]}.schema_version SET version = 99")
    newer = runner.invoke(cli, ["migrate", "--store", url(place)])
    assert newer.exit_code == 1 and "error SCHEMA_TOO_NEW:" in newer.output and "version 99" in newer.output


@pytest.mark.parametrize("store, status, says", [
    (NOBODY_LISTENS, 1, "Connection refused"),
    ("postgresql://127.0.0.1/test?schema=Not-A-Name", 2, "schema must be"),
    ("ftp://somewhere", 2, "unknown store URL"),
])
def test_a_broker_that_cannot_open_its_store_says_why_in_one_line(tmp_path, store, status, says):
    with pytest.raises(BrokerDidNotStart) as refused:
        BrokerProcess(tmp_path / "broker", store_url=store)
    stderr = refused.value.log_tail
    assert refused.value.returncode == status, stderr
    assert says in stderr and "Traceback" not in stderr


@pytest.mark.parametrize("brokers", ["one", "many"])
def test_a_reap_locks_only_the_empty_queues_it_forgets_however_many_generations(place, brokers: str) -> None:
    """The statement that forgot empty queues' generations filtered on the queue's lock, which the
    planner ran on every row of `generations`: past ~10,000 queues deleted and used again the
    server's lock table ran out ('out of shared memory') and every maintenance pass failed."""
    store = PostgresStore(place[0], schema=place[1], brokers=brokers)
    try:
        schema = place[1]
        admin(place, f"INSERT INTO {schema}.generations (queue, gen) SELECT 'q' || i, 1 FROM generate_series(1, 30000) i")
        admin(place, f"INSERT INTO {schema}.tasks (queue, gen, pid, data, enqueued_at) "
                     f"SELECT 'q' || i, 1, 'p', ''::bytea, 0 FROM generate_series(1, 29990) i")  # ten left empty
        assert store.reap() == 0
        store.commit()
        left = admin(place, f"SELECT count(*) FROM {schema}.generations")[0][0]
        assert left == 29990
    finally:
        store.close()


def test_a_generation_is_forgotten_only_if_its_queue_is_still_empty_once_locked(place) -> None:
    """Broker B's reap found `victim` (deleted before) empty; broker A then claimed it, enqueued into
    it and committed before B locked it. B's one statement judged emptiness on a snapshot from before
    A's commit and forgot the generation, so A's acknowledged task fell out of the queue's current
    generation (reproduced against the old statement with a slow scan to widen the window). The
    statements run here in B's order, with A's commit between the first and the lock."""
    from kittiwake.store.postgres import lock_space

    dsn, schema = place
    PostgresStore(dsn, schema=schema).close()
    admin(place, f"INSERT INTO {schema}.generations VALUES ('victim', 1)")
    a = PostgresStore(dsn, schema=schema, brokers="many")
    try:
        with psycopg.connect(dsn) as b:
            b.execute(f"SET search_path = {schema}")
            candidates = [queue for (queue,) in b.execute(sql.EMPTY_GENERATION_CANDIDATES, (10,))]
            assert candidates == ["victim"]
            a.claim(["victim"])
            a.write([PutTask(Task("victim", "p1", b"acknowledged", enqueued_at=NOW))])
            a.commit()
            locked = [queue for (queue,) in b.execute(sql.TRY_LOCK_QUEUES, (candidates, lock_space(schema, "queue")))]
            assert locked == ["victim"]
            assert b.execute(sql.FORGET_EMPTY_GENERATIONS, (locked,)).fetchall() == []
            b.commit()
        assert admin(place, f"SELECT queue, gen FROM {schema}.generations") == [("victim", 1)]
        assert a.load_task("victim", "p1") is not None
    finally:
        a.close()

"""`kittiwake copy`: a broker's data moved SQLite → PostgreSQL → SQLite comes back whole (every task
field, running leases, DAG edges, dead letters, retry delays, queue sizes, counters, generations of a
dropped queue), a broker on the copy carries on where the first one stopped, a non-empty target and
bad URLs are refused. A copy killed half-way leaves a target that a broker, migrate and a copy from
it refuse (COPY_UNFINISHED) until the copy is run again; pages of large tasks are bounded in bytes."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterator

import pytest
from click.testing import CliRunner

from kittiwake import Client, errors
from kittiwake.cli.main import cli
from kittiwake.store.copy import copy_store
from kittiwake.store.location import open_store, parse_store_url
from support.broker_process import BrokerDidNotStart, BrokerProcess
from support.postgres import fresh_schema

NOW = 4_000_000_000.0  # after every lease of the test runs out: all leases read as `expired`, in any store


@pytest.fixture
def pg_url() -> Iterator[str]:
    with fresh_schema() as (dsn, schema):
        yield f"{dsn}{'&' if '?' in dsn else '?'}schema={schema}"


def _fill(directory: Path) -> Any:
    """A broker's worth of data on SQLite at `directory`; returns a lease still running when it stops."""
    process = BrokerProcess(directory)
    try:
        with Client(process.url) as client:
            for n in range(30):
                client.enqueue("mail.in", f"letter {n}", pid=f"m{n:03}", sender="ann", receiver="bob" if n % 3 else None,
                               headers={"n": str(n)}, max_attempts=5)
            # more than a page of the copy, in one request: the copy reads rows, however they were sent
            client.enqueue_many([{"queue": f"fifo.{n % 3}", "data": b"\x00\xffbytes"} for n in range(1200)])
            running = client.lease("mail.in", lease_secs=3600)[0]
            client.renew(running, 3600, progress=0.25, note="half \x00 way, ünïcode")  # a note is bytea on PostgreSQL
            parent = client.enqueue("flow.a", "parent", pid="root")
            client.enqueue("flow.b", "child", pid="kid", after=[parent])
            doomed = client.enqueue("jobs", "doomed", pid="bad")
            client.release(client.lease("jobs", lease_secs=60)[0], "it broke", bury=True)
            assert doomed.pid == "bad"
            client.enqueue("retry", "later", pid="r1", max_attempts=4)
            client.release(client.lease("retry", lease_secs=60)[0], "try again")  # back with a delay
            client.enqueue("gone", "old", pid="x")
            client.delete_queue("gone")
            client.enqueue("gone", "new", pid="y")  # a second generation
            for n in range(5):
                lease = client.lease("fifo.0", lease_secs=60)[0]
                client.dequeue(lease)  # counters and pid high-water marks move past what is left
        process.terminate()
    finally:
        process.kill()
    return running


def _dump(url: str) -> dict[str, Any]:
    """Everything a broker reads back from a store, through the store's own reads."""
    store = open_store(parse_store_url(url))
    try:
        recovery = store.recover(NOW)
        tasks = {}
        edges = {}
        for summary in recovery.queues:
            tasks[summary.queue] = store.scan(summary.queue, None, 100_000)
            edges[summary.queue] = {pid: store.children_of(summary.queue, pid) for pid in store.parents_in(summary.queue)}
        return {"queues": recovery.queues, "leased": recovery.leased, "expired": recovery.expired,
                "counters": recovery.counters, "tasks": tasks, "edges": edges,
                "by_sender": store.find_by_sender("ann", None, 1000),
                "for_receiver": store.queues_for_receiver("bob")}
    finally:
        store.close()


def _copy(source: str, target: str, *extra: str) -> Any:
    return CliRunner().invoke(cli, [*extra, "copy", "--from", source, "--to", target])


def test_sqlite_to_postgresql_to_sqlite_keeps_everything(tmp_path, pg_url):
    running = _fill(tmp_path / "first")
    first, back = f"sqlite://{tmp_path / 'first'}", f"sqlite://{tmp_path / 'back'}"
    original = _dump(first)
    assert original["counters"] and original["expired"] and original["edges"]["flow.a"] == {"root": [("flow.b", "kid")]}
    assert {"mail.in", "jobs.dead", "flow.b", "retry", "gone"} <= set(original["tasks"])
    assert [t.pid for t in original["tasks"]["gone"]] == ["y"]
    assert original["tasks"]["mail.in"][0].note == "half \x00 way, ünïcode"

    there = _copy(first, pg_url)
    assert there.exit_code == 0, there.output
    assert "fifo.1" in there.output and "tasks per queue match" in there.output
    assert _dump(pg_url) == original

    again = _copy(pg_url, back, "--json")
    assert again.exit_code == 0, again.output
    report = json.loads(again.output)
    assert report["queues"]["fifo.1"] == 400 and report["rows"]["edges"] == 1
    assert _dump(back) == original

    process = BrokerProcess(tmp_path / "back")  # a broker on the copy goes on where the first stopped
    try:
        with Client(process.url) as client:
            assert client.dequeue(running).ok, process.log_tail()  # the lease from the first broker
            assert [t.pid for t in client.peek("flow.b")] == ["kid"]
            assert client.lease("flow.b", lease_secs=60) == []  # still waiting on its parent
            fresh = client.enqueue("fifo.0", "next")
            assert fresh.pid > max(t.pid for t in original["tasks"]["fifo.0"])
    finally:
        process.kill()


def test_a_target_holding_data_is_refused(tmp_path, pg_url):
    _fill(tmp_path / "first")
    first = f"sqlite://{tmp_path / 'first'}"
    assert _copy(first, pg_url).exit_code == 0
    refused = _copy(first, pg_url)
    assert refused.exit_code == 1
    assert "not empty" in refused.output and "tasks" in refused.output


def test_a_schema_a_broker_serves_is_refused_as_source_or_target(tmp_path, pg_url):
    _fill(tmp_path / "first")
    first = f"sqlite://{tmp_path / 'first'}"
    assert _copy(first, pg_url).exit_code == 0
    for brokers in ("one", "many"):
        serving = BrokerProcess(tmp_path / f"serving-{brokers}", store_url=f"{pg_url}&brokers={brokers}")
        try:
            for source, target in ((pg_url, f"sqlite://{tmp_path / ('out-' + brokers)}"), (first, pg_url)):
                refused = _copy(source, target)
                assert refused.exit_code == 1, refused.output
                assert "a broker serves" in refused.output and "stop it first" in refused.output
        finally:
            serving.kill()
    assert _copy(pg_url, f"sqlite://{tmp_path / 'after'}").exit_code == 0  # its broker gone, the copy runs


def test_bad_urls_and_missing_sources_are_refused(tmp_path):
    nowhere = f"sqlite://{tmp_path / 'nothing'}"
    for args, option in ((["mysql://h/db", nowhere], "--from"), ([nowhere, "sqlite://"], "--to")):
        result = _copy(*args)
        assert result.exit_code == 2 and option in result.output, result.output
    missing = _copy(nowhere, f"sqlite://{tmp_path / 'target'}")
    assert missing.exit_code == 1 and "no Kittiwake store" in missing.output
    assert not (tmp_path / "nothing").exists()  # a missing source is not created
    same = _copy(f"sqlite://{tmp_path / 'x'}", f"sqlite://{tmp_path / 'x'}")
    assert same.exit_code == 1 and "same store" in same.output


def test_copy_store_checks_its_arguments(tmp_path):
    with pytest.raises(ValueError, match="StoreLocation"):
        copy_store("sqlite://a", "sqlite://b")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="page_rows"):
        copy_store(parse_store_url("sqlite://a"), parse_store_url("sqlite://b"), page_rows=0)
    with pytest.raises(ValueError, match="page_bytes"):
        copy_store(parse_store_url("sqlite://a"), parse_store_url("sqlite://b"), page_bytes=0)


def _fill_many(directory: Path, pages: int) -> tuple[Any, str, dict[str, int]]:
    """`pages` pages of the copy's tasks (1 KB each) on SQLite at `directory`, a FIFO task and a lease
    held when the broker stops; returns the lease, the FIFO pid and the tasks per queue."""
    process = BrokerProcess(directory)
    try:
        with Client(process.url) as client:
            for page in range(pages):
                client.enqueue_many([{"queue": f"q{n % 5}", "data": b"x" * 1000, "pid": f"p{page:03}-{n:04}"}
                                    for n in range(1000)])
            fifo = client.enqueue("fifo", "a").pid
            held = client.lease("q0", lease_secs=3600)[0]
            sizes = {s.queue: s.size for s in client.stats()}
        process.terminate()
    finally:
        process.kill()
    return held, fifo, sizes


def _has_tasks(url: str) -> bool:
    """Whether the store at `url` holds a task row yet, read beside the copy writing it."""
    location = parse_store_url(url)
    try:
        if location.kind == "sqlite":
            db = sqlite3.connect(f"file:{Path(location.target) / 'kittiwake.db'}?mode=ro", uri=True)
            try:
                return db.execute("SELECT 1 FROM tasks LIMIT 1").fetchone() is not None
            finally:
                db.close()
        import psycopg

        with psycopg.connect(location.target, autocommit=True) as pg:
            if pg.execute("SELECT to_regclass(%s)", (f"{location.schema}.tasks",)).fetchone()[0] is None:
                return False
            return pg.execute(f"SELECT 1 FROM {location.schema}.tasks LIMIT 1").fetchone() is not None
    except (sqlite3.Error, OSError):
        return False  # not created yet


def _broker(tmp_path: Path, url: str, name: str) -> BrokerProcess:
    if url.startswith("sqlite://"):
        return BrokerProcess(Path(url[len("sqlite://"):]))
    return BrokerProcess(tmp_path / name, store_url=url)


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_a_copy_killed_half_way_is_refused_until_copied_again(tmp_path, kind, request):
    held, fifo, sizes = _fill_many(tmp_path / "source", pages=30)
    source = f"sqlite://{tmp_path / 'source'}"
    target = f"sqlite://{tmp_path / 'target'}" if kind == "sqlite" else request.getfixturevalue("pg_url")

    copying = subprocess.Popen([sys.executable, "-m", "kittiwake", "--json", "copy", "--from", source, "--to", target],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while not _has_tasks(target) and copying.poll() is None and time.monotonic() < deadline:
            time.sleep(0.005)
        os.kill(copying.pid, signal.SIGKILL)  # its first pages of tasks are committed, not the rest
    finally:
        copying.kill()
        out, err = copying.communicate()
    assert copying.returncode == -signal.SIGKILL, (out, err)  # killed, not finished

    with pytest.raises(BrokerDidNotStart) as refused:
        _broker(tmp_path, target, "refused")
    assert refused.value.returncode == 1
    assert "COPY_UNFINISHED" in refused.value.log_tail and "did not finish" in refused.value.log_tail
    assert "run the copy again" in refused.value.log_tail
    with pytest.raises(errors.CopyUnfinished):
        open_store(parse_store_url(target)).close()  # the same for any opener of the store
    migrated = CliRunner().invoke(cli, ["migrate", "--store", target])
    assert migrated.exit_code == 1 and "COPY_UNFINISHED" in migrated.output, migrated.output
    onward = _copy(target, f"sqlite://{tmp_path / 'onward'}")
    assert onward.exit_code == 1 and "COPY_UNFINISHED" in onward.output, onward.output

    again = _copy(source, target, "--json")  # the way out: the same copy, starting over
    assert again.exit_code == 0, again.output
    assert json.loads(again.output)["queues"] == sizes

    process = _broker(tmp_path, target, "served")
    try:
        with Client(process.url) as client:
            assert {s.queue: s.size for s in client.stats()} == sizes
            assert client.dequeue(held).ok, process.log_tail()  # the lease taken before the copy
            assert client.enqueue("q1", "again", pid="p000-0001").collapsed  # an existing pid is not overwritten
            assert client.lease("q2", lease_secs=60)[0].lease_id > held.lease_id  # lease ids never repeat
            assert client.enqueue("fifo", "b").pid > fifo  # and neither do FIFO pids
    finally:
        process.kill()


def test_pages_of_large_tasks_are_bounded_in_bytes(tmp_path, pg_url):
    process = BrokerProcess(tmp_path / "first")
    try:
        with Client(process.url) as client:
            client.enqueue_many([{"queue": "big", "data": bytes([n]) * 300_000, "pid": f"b{n:02}"} for n in range(9)])
            client.enqueue("big", b"y" * 900_000, pid="huge")  # alone above the page's bytes
            client.enqueue_many([{"queue": "small", "data": b"s", "pid": f"s{n:04}"} for n in range(2500)])
        process.terminate()
    finally:
        process.kill()
    first, back = f"sqlite://{tmp_path / 'first'}", f"sqlite://{tmp_path / 'back'}"
    original = _dump(first)
    for source, target in ((first, pg_url), (pg_url, back)):  # both stores read their rows' sizes
        done: list[int] = []
        report = copy_store(parse_store_url(source), parse_store_url(target), page_bytes=700_000,
                            progress=lambda copied, total: done.append(copied))
        assert report.matches and report.rows["tasks"] == 2510
        pages = [b - a for a, b in zip(done, done[1:])]
        # 2 tasks of 300 KB a page, the 900 KB one alone, then small tasks 1,000 rows a page
        assert pages == [2, 2, 2, 2, 1, 1, 1000, 1000, 500], pages
        assert _dump(target) == original

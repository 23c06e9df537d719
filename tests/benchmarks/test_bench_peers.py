"""`kittiwake bench peers`: a short run through the CLI against Kittiwake and every peer whose
service is up (Redis on 127.0.0.1:6379, PostgreSQL on 127.0.0.1:5432), then the parts that keep
a run clean — the tally, the worker groups, the services' reasons to skip. Timings are never
asserted. Under CI=true every peer must run; elsewhere one whose package or service is missing
is skipped, and the report must say why."""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from kittiwake.bench import tally
from kittiwake_benchmarks.peers.run import check_settings
from kittiwake_benchmarks.peers.services import CLAIM_KEY, PostgresSchema, RedisDatabase
from kittiwake_benchmarks.peers.show import peers_table
from kittiwake.bench.worker_group import WorkerGroup
from kittiwake_benchmarks.settings import PEER_SYSTEMS, PEERS_SCHEMA_PREFIX, PeersSettings
from kittiwake.cli.bench_command import bench
from kittiwake.errors import BadRequest

REDIS_URL = "redis://127.0.0.1:6379/13"  # not the default database, so a run by hand is left alone
PG_DSN = "postgresql://postgres@127.0.0.1:5432/test"
TASKS, SUBMITS, THREADED, SAMPLES = 50, 20, 40, 10
LATENCY_KEYS = {"p50", "p90", "p99", "p999", "max"}
RECORD_KEYS = {"tasks_per_s", "latency_ms", "samples", "errors", "ratio", "reference", "target", "meets_target",
               "system", "label", "version", "status", "reason", "service", "durable", "workers",
               "worker_commands", "changed_settings", "single_submit", "bulk_submit", "threaded_submit", "drain",
               "latency"}
SKIP_WORDS = ("not installed", "unreachable", "in use by another run", "refused")


def _leftover_workers(marker: str) -> list[int]:
    """Processes whose environment names this run's directory (every worker command gets its tally path)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if marker.encode() in (entry / "environ").read_bytes():
                found.append(int(entry.name))
        except OSError:
            continue
    return found


@pytest.mark.timeout(240)
def test_peers_runs_kittiwake_and_every_peer_whose_service_is_up(tmp_path: Path) -> None:
    report_path, chart_path = tmp_path / "peers.json", tmp_path / "peers.png"
    result = CliRunner().invoke(bench, [
        "peers", "--tasks", str(TASKS), "--submits", str(SUBMITS), "--threaded-submits", str(THREADED),
        "--latency-samples", str(SAMPLES),
        "--redis-url", REDIS_URL, "--pg-dsn", PG_DSN, "--dir", str(tmp_path),
        "--json-out", str(report_path), "--plot", str(chart_path),
    ], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    report = json.loads(report_path.read_text())
    assert {"cpu_model", "cores", "python", "kernel"} <= set(report["machine"])
    assert report["settings"]["tasks"] == TASKS and report["settings"]["payload_bytes"] == 1024
    peers: dict[str, dict[str, Any]] = report["peers"]
    assert list(peers) == ["kittiwake", *PEER_SYSTEMS]

    ran = []
    for name, record in peers.items():
        assert RECORD_KEYS <= set(record), name
        if record["status"] == "skipped":
            reason = record["reason"] or ""
            assert any(words in reason for words in SKIP_WORDS), f"{name}: {reason}"
            assert name != "kittiwake" and os.environ.get("CI") != "true", f"{name} skipped: {reason}"
            continue
        assert record["status"] == "ok", f"{name}: {record['reason']}"
        ran.append(name)
        drain = record["drain"]
        assert drain["done"] == TASKS and drain["complete"], (name, drain)
        assert drain["left_in_queue"] == 0, (name, drain)
        # resumed paused, warm workers: timed from the resume to the queue said empty
        assert 0 <= drain["resume_to_first_start_s"] <= drain["resume_to_last_end_s"], (name, drain)
        assert drain["resume_to_empty_s"] >= drain["resume_to_last_end_s"], (name, drain)
        assert isinstance(drain["resume_to_empty_per_s"], float), (name, drain)
        if name.startswith("kittiwake"):  # the broker is the bench's own process: its CPU per task
            # (/proc counts CPU in 10 ms ticks: a 50-task drain may take less than one)
            assert isinstance(drain["broker_cpu_us_per_task"], float) and drain["broker_cpu_us_per_task"] >= 0, (
                name, drain)
        assert isinstance(record["tasks_per_s"], float) and record["tasks_per_s"] == drain["tasks_per_s"]
        assert record["single_submit"]["tasks"] == SUBMITS
        assert isinstance(record["single_submit"]["tasks_per_s"], float)
        assert record["bulk_submit"]["tasks"] == TASKS - SUBMITS and record["bulk_submit"]["api"]
        threaded = record["threaded_submit"]
        assert threaded["threads"] == report["settings"]["submit_threads"] == 8
        if name == "pgqueuer":  # one connection on one event loop: no figure, and the reason
            assert threaded["tasks"] == 0 and threaded["tasks_per_s"] is None and threaded["reason"]
        else:
            assert threaded["tasks"] == THREADED and isinstance(threaded["tasks_per_s"], float), (name, threaded)
            assert threaded["reason"] is None
        assert record["samples"] == SAMPLES and set(record["latency_ms"]) == LATENCY_KEYS
        assert record["latency_ms"]["p50"] <= record["latency_ms"]["p99"] <= record["latency_ms"]["max"]
        assert isinstance(record["durable"], bool) and record["service"]
        if name != "kittiwake":
            assert record["reference"]["tasks_per_s"] == peers["kittiwake"]["tasks_per_s"]
            assert record["ratio"] > 0
    assert peers["kittiwake"]["durable"] is True
    disk = report["disk_commit"]  # the floor under a durable submit → start, same run, same pauses
    assert disk["samples"] == SAMPLES and set(disk["latency_ms"]) == LATENCY_KEYS
    assert disk["pause_secs"] == report["settings"]["latency_gap_secs"]
    if "kittiwake-results" in ran:
        assert peers["kittiwake-results"]["drain"]["results"] == TASKS
    assert chart_path.stat().st_size > 0
    for name in ran:
        assert name in result.output or peers[name]["label"] in result.output

    # nothing is left behind: processes, the throwaway directory, the Redis database, the schema
    assert not _leftover_workers(str(tmp_path)), "worker processes outlived the run"
    assert not list(tmp_path.glob("kittiwake-bench-*")), "the throwaway directory is left behind"
    if any(peers[name]["status"] == "ok" for name in ("celery", "rq", "dramatiq", "huey")):
        from redis import Redis

        with Redis.from_url(REDIS_URL) as redis:
            assert redis.dbsize() == 0 and redis.get(CLAIM_KEY) is None
    if peers["pgqueuer"]["status"] == "ok":
        assert not _schema_exists(f"{PEERS_SCHEMA_PREFIX}{os.getpid()}")


def _schema_exists(schema: str) -> bool:
    import asyncio

    import asyncpg

    async def exists() -> bool:
        connection = await asyncpg.connect(PG_DSN)
        try:
            return bool(await connection.fetchval("select 1 from pg_namespace where nspname = $1", schema))
        finally:
            await connection.close()

    return asyncio.run(exists())


@pytest.mark.timeout(240)
def test_peers_runs_kittiwake_on_postgresql_beside_pgqueuer_and_drops_its_schema(tmp_path: Path) -> None:
    import psycopg

    from support.postgres import fresh_schema

    report_path = tmp_path / "peers.json"
    with fresh_schema() as (dsn, schema):
        store = f"{dsn}{'&' if '?' in dsn else '?'}schema={schema}"
        result = CliRunner().invoke(bench, [
            "peers", "--tasks", str(TASKS), "--submits", str(SUBMITS), "--threaded-submits", "0",
            "--latency-samples", str(SAMPLES), "--peers", "pgqueuer", "--pg-dsn", dsn, "--kittiwake-store", store,
            "--dir", str(tmp_path), "--json-out", str(report_path),
        ], catch_exceptions=False)
        assert result.exit_code == 0, result.output
        peers = json.loads(report_path.read_text())["peers"]
        kittiwake = peers["kittiwake"]
        assert kittiwake["status"] == "ok", kittiwake["reason"]
        assert kittiwake["drain"]["done"] == TASKS and kittiwake["drain"]["left_in_queue"] == 0
        assert kittiwake["service"].endswith(f"schema={schema}") and kittiwake["label"].endswith("(postgresql)")
        if peers["pgqueuer"]["status"] == "ok":
            assert peers["pgqueuer"]["ratio"] > 0
        with psycopg.connect(dsn) as db:
            assert db.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,)).fetchone() is None
    bad = CliRunner().invoke(bench, ["peers", "--kittiwake-store", "mysql://x/y"])
    assert bad.exit_code == 2 and "--kittiwake-store" in bad.output, bad.output


def test_the_tally_counts_every_run_and_keeps_its_start(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "tally.bin"
    monkeypatch.setenv(tally.TALLY_ENV, str(path))
    before = time.time()
    for _ in range(3):
        tally.null_task("x" * 1024)
    child = os.fork()
    if child == 0:  # a forked worker (RQ's work horse) opens the file again and appends to it too
        tally.null_task(b"payload")
        os._exit(0)
    assert os.waitpid(child, 0)[1] == 0
    assert tally.count(path) == 4
    first_start, last_end = tally.span(path)
    assert before <= first_start <= last_end <= time.time()
    assert tally.start_of(path, 3) == tally.records(path)[3][0]
    assert tally.start_of(path, 4) is None
    assert tally.count(tmp_path / "absent") == 0 and tally.span(tmp_path / "absent") is None
    forked = tally.records(path)[3]
    assert forked.pid == child and {run.pid for run in tally.records(path)[:3]} == {os.getpid()}


def test_a_tally_record_names_the_thread_that_ran_the_task(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "tally.bin"
    monkeypatch.setenv(tally.TALLY_ENV, str(path))
    threads = [threading.Thread(target=tally.sleep_task, args=(0.02,)) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    runs = tally.records(path)
    assert len(runs) == 2 and {run.pid for run in runs} == {os.getpid()}
    assert {run.thread for run in runs} == {thread.native_id for thread in threads}
    assert all(run.ended - run.started >= 0.02 for run in runs)


def test_threads_that_first_count_into_a_new_tally_file_together_lose_no_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each thread finding the file changed reopened it: two could close the old descriptor twice
    (EBADF) or write through one just closed, and the record was lost."""
    for round_ in range(30):
        path = tmp_path / f"tally-{round_}.bin"
        monkeypatch.setenv(tally.TALLY_ENV, str(path))
        start = threading.Barrier(8)

        def run() -> None:
            start.wait()
            tally.null_task(b"")

        threads = [threading.Thread(target=run) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert tally.count(path) == 8, f"round {round_}: {tally.count(path)} of 8 records"


def test_stopping_a_worker_group_ends_the_children_its_command_left(tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    stubborn = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(120)"
    command = [sys.executable, "-c",
               f"import subprocess, sys, time; child = subprocess.Popen([sys.executable, '-c', {stubborn!r}]); "
               f"open({str(pid_file)!r}, 'w').write(str(child.pid)); time.sleep(120)"]
    group = WorkerGroup([command], os.environ, tmp_path / "workers.log", stop_secs=1.0)
    group.start()
    deadline = time.monotonic() + 30
    while not (pid_file.exists() and pid_file.read_text()):
        assert time.monotonic() < deadline, "the command did not start its child"
        time.sleep(0.05)
    child = int(pid_file.read_text())
    assert group.failed() is None
    group.stop()  # the command exits on SIGTERM; its child ignores SIGTERM and is killed with the group
    deadline = time.monotonic() + 10
    while Path(f"/proc/{child}").exists() and "zombie" not in _state(child):
        assert time.monotonic() < deadline, "the command's child outlived the group"
        time.sleep(0.05)


def test_pausing_a_worker_group_returns_once_every_process_of_it_is_stopped(tmp_path: Path) -> None:
    """A SIGSTOP is delivered when its process next runs: pause returned at once, and on a loaded
    machine a worker not yet stopped took and started a task of the backlog before the resume (a
    CI run saw `resume_to_first_start_s` at -0.0143)."""
    spin = "import os; os.fork(); os.fork()\nwhile True: pass"  # four busy processes in the group
    group = WorkerGroup([[sys.executable, "-c", spin]], os.environ, tmp_path / "workers.log", stop_secs=1.0)
    group.start()
    try:
        deadline = time.monotonic() + 30
        while len(group._members()) < 4:
            assert time.monotonic() < deadline, "the command did not fork"
            time.sleep(0.05)
        for _ in range(5):
            group.pause()
            assert all("stopped" in _state(pid) for pid in group._members()), [_state(p) for p in group._members()]
            group.resume()
    finally:
        group.stop()


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/status").read_text().split("State:", 1)[1].split("\n", 1)[0].lower()
    except (OSError, IndexError):
        return "zombie"


def test_a_worker_command_that_exits_is_reported_with_its_log(tmp_path: Path) -> None:
    group = WorkerGroup([[sys.executable, "-c", "print('cannot start'); raise SystemExit(3)"]], os.environ,
                        tmp_path / "workers.log")
    group.start()
    deadline = time.monotonic() + 30
    while group.failed() is None:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert "exited with code 3" in group.failed() and "cannot start" in group.failed()
    group.stop()


def test_a_peer_whose_service_is_down_gets_the_reason() -> None:
    redis_reason = RedisDatabase("redis://127.0.0.1:1/13").claim()
    assert redis_reason and ("unreachable" in redis_reason or "not installed" in redis_reason)
    assert "127.0.0.1:1/13" in redis_reason or "not installed" in redis_reason
    pg_reason = PostgresSchema("postgresql://postgres@127.0.0.1:1/test").create()
    assert pg_reason and ("unreachable" in pg_reason or "not installed" in pg_reason)
    record = {"label": "Celery", "version": None, "status": "skipped", "reason": redis_reason, "ratio": None,
              "single_submit": {"tasks_per_s": None}, "bulk_submit": {"tasks_per_s": None}, "tasks_per_s": None,
              "latency_ms": None, "durable": None}
    settings = {"tasks": 1, "processes": 2, "submits": 0, "latency_samples": 1, "payload_bytes": 1024}
    table = peers_table({"settings": settings, "peers": {"celery": record}})  # a report from before the threaded phase
    assert table.row_count == 1
    assert "skipped" in str(list(table.columns[-1].cells)[0])
    assert [column.header for column in table.columns][2:5] == ["single submit/s", "8-thread submit/s", "bulk submit/s"]
    assert list(table.columns[3].cells) == ["—"]


def test_a_threaded_figure_shows_in_its_column_and_a_missing_one_says_why() -> None:
    def record(label: str, threaded: dict[str, Any]) -> dict[str, Any]:
        return {"label": label, "version": "1", "status": "ok", "reason": None, "ratio": None,
                "single_submit": {"tasks_per_s": 100.0}, "bulk_submit": {"tasks_per_s": 1000.0},
                "threaded_submit": threaded, "tasks_per_s": 50.0, "latency_ms": None, "durable": True}

    settings = {"tasks": 1, "processes": 2, "submits": 0, "latency_samples": 1, "payload_bytes": 1024,
                "submit_threads": 8}
    table = peers_table({"settings": settings, "peers": {
        "kittiwake": record("Kittiwake", {"threads": 8, "tasks": 2000, "tasks_per_s": 6123.4, "reason": None}),
        "pgqueuer": record("pgqueuer", {"threads": 8, "tasks": 0, "tasks_per_s": None, "reason": "one event loop"}),
    }})
    assert list(table.columns[3].cells) == ["6,123", "—"]
    notes = [str(cell) for cell in table.columns[-1].cells]
    assert notes[0] == "" and "one event loop" in notes[1]


def test_settings_no_run_can_use_are_refused() -> None:
    with pytest.raises(BadRequest, match="unknown peers: sidekiq"):
        check_settings(PeersSettings(peers=("sidekiq",)))
    with pytest.raises(BadRequest):
        check_settings(PeersSettings(tasks=0))
    with pytest.raises(BadRequest):
        check_settings(PeersSettings(threaded_submits=-1))
    result = CliRunner().invoke(bench, ["peers", "--peers", "celery,sidekiq"])
    assert result.exit_code == 2 and "sidekiq" in result.output

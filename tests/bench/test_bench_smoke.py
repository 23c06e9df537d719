"""A short run of each `kittiwake bench` command through the CLI: the JSON report has its
documented shape. Timings are never asserted — these are benchmarks, not tests."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from kittiwake.bench.harness import latency_summary_ms
from kittiwake.bench.report import check_target
from kittiwake.cli.bench_command import bench
from support.bench_reports import RECORD_KEYS, assert_record, run_bench


@pytest.mark.timeout(120)
def test_ops_reports_every_figure_of_table_1_and_the_batches(tmp_path: Path) -> None:
    report = run_bench(tmp_path, "ops", "--seconds", "0.5", "--warmup", "0.2", "--clients", "4", "--batch", "10")
    ops = report["ops"]
    assert set(ops) == {"enqueue", "fifo_enqueue", "lease_dequeue", "batch_enqueue", "batch_lease_dequeue",
                        "enqueue_ceiling"}
    for name, record in ops.items():
        assert_record(record, rate=True)
        if name != "enqueue_ceiling":
            assert record["target"]["tasks_per_s_min"] > 0
    # the bare asyncio + SQLite reference ran in the same run, and the broker's figure is held to it
    assert ops["enqueue_ceiling"]["server"].startswith("bare asyncio + SQLite")
    assert ops["enqueue"]["ceiling"]["tasks_per_s"] == ops["enqueue_ceiling"]["tasks_per_s"]
    assert ops["enqueue"]["ceiling_ratio"] > 0 and ops["enqueue"]["target"]["ceiling_ratio_min"] == 0.9
    for name in ("enqueue", "fifo_enqueue", "lease_dequeue"):
        assert ops[name]["reference"]["source"].startswith("TaskMaster")
        assert ops[name]["ratio"] > 0
    assert ops["lease_dequeue"]["requests_per_op"] == 2
    assert ops["batch_enqueue"]["batch"] == 10


@pytest.mark.timeout(120)
def test_latency_compares_round_trips_with_fabriq_and_fsync(tmp_path: Path) -> None:
    report = run_bench(tmp_path, "latency", "--samples", "50")
    figures = report["latency"]
    assert set(figures) == {"enqueue_round_trip", "enqueue_to_lease", "fsync", "fsync_append"}
    assert_record(figures["enqueue_round_trip"], rate=True)
    assert_record(figures["enqueue_to_lease"], rate=False)
    assert_record(figures["fsync"], rate=False)
    assert_record(figures["fsync_append"], rate=False)
    round_trip = figures["enqueue_round_trip"]
    assert round_trip["reference"]["latency_ms"]["p50"] == 0.42
    assert set(round_trip["target"]) == {"latency_ms_p50_max", "latency_ms_p999_max"}
    assert round_trip["samples"] == 50


@pytest.mark.timeout(180)
def test_scale_reports_big_queue_many_queues_memory_and_restart(tmp_path: Path) -> None:
    report = run_bench(tmp_path, "scale", "--big", "2000", "--queues", "200", "--spread", "400",
                       "--samples", "100", "--recovery-tasks", "2000")
    figures = report["scale"]
    for name in ("fill_enqueue", "spread_enqueue"):
        assert_record(figures[name], rate=True)
    for name in ("lease_dequeue_empty", "lease_dequeue_big", "lease_dequeue_after_restart", "list_queues", "stats"):
        assert_record(figures[name], rate=False)
    assert figures["list_queues"]["matches"] == 20  # one spread queue in ten ends in 7
    assert isinstance(figures["rss_mb"], float) and figures["rss_mb"] > 0
    assert isinstance(figures["recovery_s"], float) and figures["recovery_s"] > 0
    restart = figures["restart"]
    assert restart["big_queue_tasks"] == restart["big_queue_tasks_expected"]
    assert restart["spread_queues_found"] == 200
    assert figures["memory"]["rss_mb"] == figures["rss_mb"]
    cold = figures["cold_restart"]
    assert RECORD_KEYS <= set(cold)
    assert cold["stats_match"], cold["stats_mismatches"]
    assert cold["tasks_on_disk"] == 2000 and cold["tasks_found"] == cold["tasks_expected"] == 1999
    assert cold["full_scan_tasks"] == 1999  # the first lease was dequeued
    assert cold["leased_running"] == cold["leased_expired"] == cold["blocked"] == 8  # one of each per queue
    assert cold["reference"]["full_scan_s"] == cold["full_scan_s"] > 0
    assert cold["target"] == {"recovery_s_max": 10.0} and isinstance(cold["meets_target"], bool)
    assert cold["listening_s"] <= cold["recovery_s"]


def test_percentiles_are_nearest_rank_in_milliseconds() -> None:
    summary = latency_summary_ms(range(1_000_000, 1001 * 1_000_000 + 1, 1_000_000))  # 1..1001 ms
    assert summary == {"p50": 501.0, "p90": 901.0, "p99": 991.0, "p999": 1000.0, "max": 1001.0}
    assert latency_summary_ms([]) is None


def test_a_target_is_met_only_when_every_bound_holds() -> None:
    record = {"tasks_per_s": 20_000.0, "latency_ms": {"p50": 0.4, "p999": 6.0},
              "target": {"tasks_per_s_min": 15_000.0, "latency_ms_p50_max": 0.5}}
    assert check_target(record) is True
    record["target"]["latency_ms_p999_max"] = 5.0
    assert check_target(record) is False
    assert check_target({"target": None}) is None


@pytest.mark.timeout(120)
def test_ops_runs_its_broker_on_postgresql_and_drops_the_schema_it_created(tmp_path: Path) -> None:
    import uuid

    import psycopg

    from support.postgres import require_server

    dsn = require_server()
    schema = "bench_ops_" + uuid.uuid4().hex[:12]
    url = f"{dsn}{'&' if '?' in dsn else '?'}schema={schema}"
    report = run_bench(tmp_path, "ops", "--seconds", "0.3", "--warmup", "0.1", "--clients", "2", "--batch", "5",
                       "--processes", "1", "--store", url)
    assert report["settings"]["store"].endswith(f"schema={schema}")
    for record in report["ops"].values():
        assert_record(record, rate=True)
    with psycopg.connect(dsn) as db:
        assert db.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,)).fetchone() is None


@pytest.mark.timeout(180)
def test_ops_with_two_brokers_sharing_postgresql_reports_each_row_and_drops_their_schemas(tmp_path: Path) -> None:
    import psycopg

    from support.postgres import fresh_schema

    with fresh_schema() as (dsn, schema):
        url = f"{dsn}{'&' if '?' in dsn else '?'}schema={schema}"
        report = run_bench(tmp_path, "ops", "--seconds", "0.3", "--warmup", "0.1", "--clients", "4", "--queues", "2",
                           "--processes", "1", "--only", "enqueue", "--only", "lease_dequeue", "--store", url,
                           "--brokers", "2")
        rows = [(row["brokers"], row["mode"]) for row in report["brokers"]]
        assert rows == [(1, "one"), (1, "many"), (2, "many")]
        for row in report["brokers"]:
            assert row["store"].endswith(f"schema={schema}_{row['mode']}{row['brokers']}"
                                         + (" brokers=many" if row["mode"] == "many" else ""))
            assert set(row["ops"]) == {"enqueue", "lease_dequeue"}
            for record in row["ops"].values():
                assert_record(record, rate=True)
        assert report["ops"] == report["brokers"][0]["ops"]
        assert set(report["scaling"]["enqueue"]) == {"many/one", "2x"}
        with psycopg.connect(dsn) as db:
            left = db.execute("SELECT nspname FROM pg_namespace WHERE nspname LIKE %s", (schema + "%",)).fetchall()
        assert left == []


def test_ops_refuses_several_brokers_without_a_postgresql_store() -> None:
    refused = CliRunner().invoke(bench, ["ops", "--brokers", "2", "--seconds", "0.1"])
    assert refused.exit_code == 2 and "--brokers" in refused.output, refused.output


def test_ops_refuses_a_store_holding_tasks_and_a_bad_url(tmp_path: Path) -> None:
    from kittiwake.engine import PutTask
    from kittiwake.model import Task
    from kittiwake.store.sqlite import SqliteStore

    store = SqliteStore(tmp_path / "full")
    store.write([PutTask(Task(queue="q", pid="a", data=b"x", enqueued_at=1.0))])
    store.commit()
    store.close()
    held = CliRunner().invoke(bench, ["ops", "--store", f"sqlite://{tmp_path / 'full'}", "--seconds", "0.1"])
    assert held.exit_code == 1 and "holds tasks" in held.output, held.output
    assert (tmp_path / "full" / "kittiwake.db").exists()  # not created here: left alone
    bad = CliRunner().invoke(bench, ["ops", "--store", "mysql://x/y"])
    assert bad.exit_code == 2 and "--store" in bad.output, bad.output

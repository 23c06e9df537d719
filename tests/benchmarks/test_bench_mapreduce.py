"""`kittiwake bench mapreduce`: a tiny run through the CLI — gen-data inputs, a real broker and real
`kittiwake worker --node` commands, the test suite's Spark session — and the arguments it refuses.
Timings are never asserted; the report's shape, the outputs' equality and a clean end are."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from kittiwake_benchmarks.mapreduce.data import ensure_dataset
from kittiwake.cli.bench_command import bench

APPS = ("grep", "wordcount", "sort")
PARTITION_SIZES = (100_000, 1_000_000)
REQUIRED_KEYS = {"app", "partition_size_bytes", "input_bytes", "native_mb_s", "spark_mb_s", "native_tasks",
                 "spark_tasks", "outputs_equal"}


def _children() -> list[str]:
    """This process's live children other than Spark's JVM (the shared session's, left running)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            name, _, rest = (entry / "stat").read_text().rpartition(")")
            state, parent = rest.split()[:2]
        except (OSError, ValueError):
            continue
        if int(parent) == os.getpid() and state != "Z" and not name.endswith("(java"):
            found.append(name)
    return found


@pytest.mark.timeout(300)
def test_mapreduce_runs_every_app_on_both_systems(tmp_path: Path, spark_session: object) -> None:
    report_path, chart_path, data_dir = tmp_path / "mapreduce.json", tmp_path / "mapreduce.png", tmp_path / "data"
    children_before = _children()
    result = CliRunner().invoke(bench, [
        "mapreduce", "--app", "all", "--size", "3MB", "--partition-sizes", "100KB,1MB", "--data-dir", str(data_dir),
        "--json", str(report_path), "--plot", str(chart_path),
    ], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    report = json.loads(report_path.read_text())
    assert {"machine", "settings", "spark_startup_s", "results", "reference", "targets"} <= set(report)
    assert report["spark_reused_session"] is True and report["spark_startup_s"] == 0.0
    rows = report["results"]
    assert [(row["app"], row["partition_size_bytes"]) for row in rows] == [
        (app, size) for app in APPS for size in PARTITION_SIZES]
    for row in rows:
        assert REQUIRED_KEYS <= set(row), row
        assert row["error"] is None and row["outputs_equal"] is True, row
        assert row["input_bytes"] >= 3_000_000 and row["native_mb_s"] > 0 and row["spark_mb_s"] > 0, row
        assert row["partitions"] == 3_000_000 // row["partition_size_bytes"], row
        assert row["native_tasks"] > row["partitions"], row  # the maps and the reduces
    assert set(report["reference"]) == set(APPS)
    for app, check in report["reference"].items():
        assert check["equal"] is True and check["sample_bytes"] >= 3_000_000, (app, check)
    assert {check["app"] for check in report["targets"]["checks"]} == set(APPS)
    assert chart_path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "wordcount" in result.output and "targets" in result.output
    kept = sorted(path.name for path in data_dir.iterdir())
    assert kept == sorted(f"{kind}-3000000-{size}-seed0" for kind in ("text", "records") for size in PARTITION_SIZES)
    assert spark_session.range(3).count() == 3  # type: ignore[attr-defined]  # the shared session still runs
    assert _children() == children_before  # the broker and the worker commands are gone


@pytest.mark.parametrize(("arguments", "message"), [
    (["--app", "terasort"], "'--app'"),
    (["--size", "3XB"], "'--size'"),
    (["--size", "1MB", "--partition-sizes", "100KB,10MB"], "larger than --size"),
    (["--partition-sizes", "1MB,1MB"], "given twice"),
    (["--pattern", ""], "'--pattern'"),
])
def test_mapreduce_refuses_bad_arguments(arguments: list[str], message: str) -> None:
    result = CliRunner().invoke(bench, ["mapreduce", *arguments])
    assert result.exit_code == 2, result.output
    assert "Usage:" in result.output and message in result.output, result.output


def test_a_kept_dataset_is_reused_and_a_damaged_one_written_again(tmp_path: Path) -> None:
    first = ensure_dataset(tmp_path, "text", 300_000, 100_000, 7)
    assert not first.reused and first.partitions == 3
    again = ensure_dataset(tmp_path, "text", 300_000, 100_000, 7)
    assert again.reused and again.path == first.path and again.input_bytes == first.input_bytes
    part = sorted(first.path.glob("part-*"))[1]
    part.write_bytes(part.read_bytes()[:-10])
    rewritten = ensure_dataset(tmp_path, "text", 300_000, 100_000, 7)
    assert not rewritten.reused and rewritten.input_bytes == first.input_bytes
    other_seed = ensure_dataset(tmp_path, "text", 300_000, 100_000, 8)
    assert not other_seed.reused and other_seed.path != first.path


def test_targets_are_judged_per_app_and_unrun_sizes_are_not_judged() -> None:
    from kittiwake_benchmarks.mapreduce.targets import evaluate_targets

    def row(size: int, native: float, ratio: float | None) -> dict[str, object]:
        return {"app": "grep", "partition_size_bytes": size, "native_mb_s": native, "ratio": ratio}

    rows = [row(100_000, 10.0, 12.0), row(1_000_000, 40.0, 3.0), row(10_000_000, 50.0, 2.0)]
    checks = {(check["target"], check["partition_size_bytes"]): check
              for check in evaluate_targets(rows, ["grep"])["checks"]}
    assert checks[("ratio_min", 100_000)]["met"] is True
    assert checks[("ratio_min", 1_000_000)]["met"] is False
    assert checks[("ratio_min", 100_000_000)]["met"] is None
    spread = checks[("native_spread_max", None)]
    assert spread["value"] == pytest.approx(0.2) and spread["met"] is True  # 1 MB and 10 MB only


def test_a_job_stops_waiting_when_a_worker_command_exits(tmp_path: Path) -> None:
    import sys
    import threading

    from kittiwake_benchmarks.mapreduce.run import Cluster, _watched
    from kittiwake.bench.worker_group import WorkerGroup

    workers = WorkerGroup([[sys.executable, "-c", "raise SystemExit(3)"]], dict(os.environ), tmp_path / "workers.log")
    workers.start()
    never = threading.Event()
    try:
        cluster = Cluster(broker=None, workers=workers, url="", nodes=["n0"], slots=1)  # type: ignore[arg-type]
        with pytest.raises(RuntimeError, match="exited with code 3"):
            _watched(cluster, lambda: never.wait(60))
    finally:
        never.set()
        workers.stop()

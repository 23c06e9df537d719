"""`kittiwake bench tasks`: a --quick run through the CLI writes the documented JSON shape,
and the pure parts (lease sizing, the mixed workload) behave. Timings are never asserted."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from kittiwake_benchmarks.task_processes import BATCH_TARGET_SECS, next_batch_size
from kittiwake_benchmarks.tasks import MIXED_MAX_MS, MIXED_MIN_MS, homogeneous_count, mixed_durations_us
from kittiwake.cli.bench_command import bench

LATENCY_KEYS = {"p50", "p90", "p99", "p999", "max"}
EFFICIENCY_KEYS = {"1ms", "16ms", "128ms", "mixed"}


def run_quick(tmp_path: Path) -> dict[str, Any]:
    report_path = tmp_path / "report.json"
    result = CliRunner().invoke(bench, ["tasks", "--quick", "--json", str(report_path), "--dir", str(tmp_path)],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert not list(tmp_path.glob("kittiwake-bench-*")), "the broker's throwaway directory is left behind"
    return json.loads(report_path.read_text())


@pytest.mark.timeout(120)
def test_quick_run_writes_every_figure_and_the_spark_peer(tmp_path: Path, spark_session: object) -> None:
    report = run_quick(tmp_path)

    null = report["null_tasks"]
    assert isinstance(null["tasks_per_s"], float) and null["tasks_per_s"] > 0
    assert null["tasks"] == report["settings"]["tasks"] == 5000
    assert null["meets_target"] in (True, False)

    latency = report["latency_ms"]
    assert set(latency) == LATENCY_KEYS
    assert latency["p50"] <= latency["p90"] <= latency["p99"] <= latency["p999"] <= latency["max"]
    assert report["latency"]["samples"] == report["settings"]["latency_tasks"]

    assert set(report["efficiency"]) == EFFICIENCY_KEYS
    for key, value in report["efficiency"].items():
        assert isinstance(value, float) and value > 0, key
        run = report["efficiency_runs"][key]
        assert run["tasks"] == sum(worker["tasks"] for worker in run["workers"])
        assert len(run["workers"]) == report["settings"]["workers"]

    spark = report["spark"]
    assert spark["error"] is None, spark["error"]
    assert spark["reused_session"] is True  # the test run's one session, not a second JVM
    assert spark["master"] == "local[2]"
    assert spark["tasks"] == report["settings"]["spark_tasks"]
    assert isinstance(spark["tasks_per_s"], float) and spark["tasks_per_s"] > 0
    assert isinstance(report["ratio_vs_spark"], float)

    assert set(report["targets"]) == {"null_tasks_per_s", "latency_ms", "efficiency_16ms", "efficiency_128ms",
                                      "ratio_vs_spark"}
    for target in report["targets"].values():
        assert target["met"] in (True, False)


def test_a_worker_leases_about_twenty_milliseconds_of_work() -> None:
    assert next_batch_size(None, 500) == 1  # nothing known yet: one task
    assert next_batch_size(0.0, 500) == 500  # null tasks: the most allowed
    assert next_batch_size(0.128, 500) == 1
    assert next_batch_size(0.001, 500) == round(BATCH_TARGET_SECS / 0.001)
    assert next_batch_size(1e-6, 300) == 300


def test_the_mixed_workload_is_seeded_and_within_one_millisecond_to_one_second() -> None:
    durations = mixed_durations_us(2.0, 2, seed=7)
    assert durations == mixed_durations_us(2.0, 2, seed=7)
    assert durations != mixed_durations_us(2.0, 2, seed=8)
    assert all(MIXED_MIN_MS * 1000 <= value <= MIXED_MAX_MS * 1000 for value in durations)
    assert sum(durations) >= 4.0 * 1e6  # two workers busy for two seconds
    assert sum(durations[:-1]) < 4.0 * 1e6


def test_homogeneous_figures_keep_every_worker_busy_for_the_same_time() -> None:
    assert homogeneous_count(128, 5.0, 2) == 80
    assert homogeneous_count(16, 5.0, 2) == 626
    assert homogeneous_count(1000, 0.1, 3) == 3

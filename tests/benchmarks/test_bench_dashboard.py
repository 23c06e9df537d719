"""A short run of `kittiwake bench dashboard`: every figure measured on a small broker, each view against /healthz.
Timings are never asserted — this is a benchmark, not a test."""

from __future__ import annotations

from pathlib import Path

import pytest

from support.bench_reports import assert_record, run_bench


@pytest.mark.timeout(180)
def test_dashboard_measures_every_view_against_healthz(tmp_path: Path) -> None:
    report = run_bench(tmp_path, "dashboard", "--queues", "2000", "--workers", "2", "--samples", "5",
                       "--stream-samples", "2", "--durability", "os")
    figures = report["dashboard"]
    assert list(figures)[0] == "healthz" and "stream delay" in figures
    for name, record in figures.items():
        if record.get("served") is False:  # /metrics, before the broker serves it
            assert name == "metrics"
            continue
        assert_record(record, rate=False)
        if name != "healthz":
            assert record["reference"]["figure"] == "healthz" and record["ratio"] > 0
            assert record["times_reference"] > 0
    assert report["settings"]["queues"] == 2000 and report["load_ops_per_s"] >= 0

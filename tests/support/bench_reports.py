"""Running a `kittiwake bench` command through the CLI in a test, and the shape its JSON report has.

`run_bench(tmp_path, NAME, *options)` runs `kittiwake bench NAME` (the broker's own benchmarks and,
where the benchmarks distribution is installed, those of other systems) with `--json` and `--dir`
in `tmp_path`, and returns the report; `assert_record` checks one figure's record
(`kittiwake.bench.report`'s shape). Timings are never asserted — these are benchmarks, not tests.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from kittiwake.cli.bench_command import bench

LATENCY_KEYS = {"p50", "p90", "p99", "p999", "max"}
MACHINE_KEYS = {"cpu_model", "cores", "memory_gb", "python", "sqlite", "kernel"}
RECORD_KEYS = {"tasks_per_s", "latency_ms", "samples", "errors", "ratio", "reference", "target", "meets_target"}


def run_bench(tmp_path: Path, *args: str) -> dict[str, Any]:
    report_path = tmp_path / "report.json"
    result = CliRunner().invoke(bench, [*args, "--json", str(report_path), "--dir", str(tmp_path)],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    report = json.loads(report_path.read_text())
    assert MACHINE_KEYS <= set(report["machine"])
    assert not list(tmp_path.glob("kittiwake-bench-*")), "the broker's throwaway directory is left behind"
    return report


def assert_record(record: dict[str, Any], *, rate: bool) -> None:
    assert RECORD_KEYS <= set(record)
    assert record["errors"] == 0, record.get("first_error")
    assert set(record["latency_ms"]) == LATENCY_KEYS
    latency = record["latency_ms"]
    assert latency["p50"] <= latency["p90"] <= latency["p99"] <= latency["p999"] <= latency["max"]
    assert record["samples"] > 0
    if rate:
        assert isinstance(record["tasks_per_s"], float)
    if record["target"] is not None:
        assert isinstance(record["meets_target"], bool)

"""`kittiwake bench workers`: a tiny run through the CLI — real brokers, real `kittiwake worker`
commands, one `app.map` per figure — and a figure whose workers cannot start. Timings are never
asserted; the records' shape, the counts and a clean end are."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from kittiwake_benchmarks.settings import WORKERS_FIGURES
from kittiwake.cli.bench_command import bench

TASKS, SLEEP_SECS, MIX_SHORT = 200, 0.05, 100
PROCESSES, CONCURRENCY = 2, 4
RECORD_KEYS = {"tasks_per_s", "latency_ms", "samples", "errors", "ratio", "reference", "target", "meets_target",
               "figure", "label", "status", "reason", "tasks", "done", "slots", "slots_seen", "worker_command",
               "left_in_queue", "broker_cpu_percent", "workers_cpu_percent"}


def _processes_naming(marker: str) -> list[int]:
    """Processes whose environment or command line names this run's directory (every worker command
    gets its tally path, every broker its data directory)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if any(marker.encode() in (entry / name).read_bytes() for name in ("environ", "cmdline")):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


@pytest.mark.timeout(120)
def test_workers_runs_every_figure_with_real_worker_commands(tmp_path: Path) -> None:
    report_path, chart_path = tmp_path / "workers.json", tmp_path / "workers.png"
    result = CliRunner().invoke(bench, [
        "workers", "--tasks", str(TASKS), "--rounds", "1", "--sleep-secs", str(SLEEP_SECS),
        "--mix-short", str(MIX_SHORT), "--processes", str(PROCESSES), "--concurrency", str(CONCURRENCY),
        "--dir", str(tmp_path), "--json", str(report_path), "--plot", str(chart_path),
    ], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    report = json.loads(report_path.read_text())
    assert {"cpu_model", "cores", "python", "kernel"} <= set(report["machine"])
    assert report["settings"]["payload_bytes"] == 1024 and report["settings"]["figures"] == list(WORKERS_FIGURES)
    assert report["lean_ceiling"]["tasks"] == TASKS and report["lean_ceiling"]["tasks_per_s"] > 0
    records = report["workers"]
    assert list(records) == list(WORKERS_FIGURES)
    slot_count = PROCESSES * CONCURRENCY
    for name, record in records.items():
        assert RECORD_KEYS <= set(record), name
        assert record["status"] == "ok", (name, record["reason"])
        assert record["done"] == record["tasks"] and record["left_in_queue"] == 0, (name, record)
        assert isinstance(record["meets_target"], bool) and record["ratio"] > 0, name
        assert record["label"] in result.output.replace("\n", " ") or name == "map_results"
    for name in ("map_drain", "map_results"):
        record = records[name]
        assert record["tasks"] == TASKS and record["slots"] == PROCESSES
        assert record["worker_command"] == ("kittiwake worker kittiwake.bench.user_app:app "
                                            f"--processes {PROCESSES}")
        assert record["tasks_per_s"] > 0 and record["reference"]["tasks_per_s"] == report["lean_ceiling"]["tasks_per_s"]
    assert records["map_results"]["results"] == TASKS and records["map_drain"]["results"] is None
    assert records["efficiency"]["tasks"] == slot_count
    assert records["mix"]["tasks"] == MIX_SHORT + 2 * slot_count
    for name in ("efficiency", "mix"):
        record = records[name]
        assert record["slots"] == slot_count and 1 <= record["slots_seen"] <= slot_count
        assert record["worker_command"].endswith(f"--processes {PROCESSES} --concurrency {CONCURRENCY}")
        assert 0 < record["efficiency"] <= 1.0 and record["idle_while_waiting_ms"] >= 0
        assert record["task_secs"] >= record["nominal_task_secs"] * 0.99 and record["ideal_s"] > 0
    assert "efficiency_min" in records["efficiency"]["target"]
    assert "idle_while_waiting_ms_max" in records["mix"]["target"]
    assert chart_path.stat().st_size > 0

    # nothing is left behind: no worker, broker or submitter process, no throwaway directory
    assert not _processes_naming(str(tmp_path)), "processes outlived the run"
    assert not list(tmp_path.glob("kittiwake-bench-*")), "the throwaway directory is left behind"


@pytest.mark.timeout(60)
def test_a_figure_whose_workers_cannot_start_fails_alone(tmp_path: Path) -> None:
    report_path = tmp_path / "workers.json"
    result = CliRunner().invoke(bench, [
        "workers", "--only", "efficiency", "--rounds", "1", "--sleep-secs", "0.01",
        "--worker-arg=--no-such-option", "--dir", str(tmp_path), "--json", str(report_path),
    ], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    report = json.loads(report_path.read_text())
    assert list(report["workers"]) == ["efficiency"] and report["lean_ceiling"] is None
    record = report["workers"]["efficiency"]
    assert record["status"] == "failed" and "exited with code" in record["reason"], record
    assert "no such option" in record["reason"].lower()
    assert report["settings"]["worker_args"] == ["--no-such-option"]
    assert not _processes_naming(str(tmp_path))
    assert not list(tmp_path.glob("kittiwake-bench-*"))


def test_unknown_figures_are_refused() -> None:
    result = CliRunner().invoke(bench, ["workers", "--only", "map_drain,nonsense"])
    assert result.exit_code == 2 and "nonsense" in result.output

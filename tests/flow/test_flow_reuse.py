"""Incremental re-runs on Spark: a step declared deterministic reuses an earlier run's outputs when
its inputs' fingerprint and its version match — and runs when a file changed, its version
changed or the run is fresh; runs sharing the index at once both end right."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from flow import pipelines
from flow.test_flow_spark import write_parts
from kittiwake import Client
from kittiwake.flow import Dataset
from kittiwake.flow.reuse import forget, records, reuse_queue

FLOW = pipelines.chain
SHAPE = {"listing": 1, "tidy": 3, "sums": 3, "report": 1}


def read_report(spark: Any, dataset: Dataset) -> dict[str, tuple[int, int, int]]:
    return {row["region"]: (row["amount"], row["rows"], row["parts"]) for row in spark.read.parquet(dataset.uri).collect()}


def expected_report(totals: dict[str, int], parts: int) -> dict[str, tuple[int, int, int]]:
    rows = {"north": 2 * parts, "south": parts}  # write_parts: two north rows and one south row per file
    return {region: (total, rows[region], parts) for region, total in totals.items()}


def run_chain(client: Client, folder: Path, data_dir: Path, *, fresh: bool = False,
              caplog: pytest.LogCaptureFixture | None = None) -> tuple[Any, Any]:
    run = FLOW.run(client, {"raw": Dataset.path(folder)}, data_dir=data_dir, fresh=fresh)
    status = run.wait(timeout=120)
    assert status.state == "done", describe(status, caplog)
    assert {p.step: p.done for p in status.steps} == SHAPE, describe(status, caplog)
    return run, status


def describe(status: Any, caplog: pytest.LogCaptureFixture | None = None) -> str:
    """A run's status for an assertion's message: its state, why it ended, each step's counts,
    its dead jobs and (with `caplog`) the jobs workers dropped unrun."""
    steps = "; ".join(f"{p.step}: done {p.done} (reused {p.reused}) waiting {p.waiting} queued {p.queued} "
                      f"running {p.running} dead {p.dead}" for p in status.steps)
    text = f"run {status.run} {status.state} (reason: {status.reason}) — {steps}"
    if status.dead:
        text += f" — dead: {[(dead.step, dead.key, dead.reason) for dead in status.dead]}"
    if caplog is not None:
        dropped = [record.getMessage() for record in caplog.records if "unrun" in record.getMessage()]
        text += f" — dropped unrun: {dropped}"
    return text


def reused(status: Any) -> dict[str, int]:
    return {p.step: p.reused for p in status.steps}


@pytest.fixture
def fresh_index(client: Client) -> None:
    forget(client, FLOW)  # the reuse index is the broker's: each test's broker starts empty anyway


def test_reuse_hits_unchanged_misses_a_changed_file_a_new_version_and_a_fresh_run(
    client: Client, python_workers, spark_workers, spark_session, fresh_index: None, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    folder, data = tmp_path / "in", tmp_path / "runs"
    totals = write_parts(folder, 3)
    python_workers(FLOW)
    spark_workers(FLOW)

    first, status = run_chain(client, folder, data)
    assert reused(status) == {"listing": 0, "tidy": 0, "sums": 0, "report": 0}
    assert read_report(spark_session, first.outputs()["report.out"]) == expected_report(totals, 3)
    assert len(records(client, FLOW, FLOW.steps["tidy"])) == 3

    second, status = run_chain(client, folder, data)  # nothing changed: every job reuses
    assert reused(status) == SHAPE
    assert second.outputs()["report.out"] == first.outputs()["report.out"]  # the first run's Parquet

    (folder / "part-1.csv").write_text("region,amount\nnorth,1000\nsouth,7\nnorth,1\n,\n")  # one file changes
    totals = {"north": totals["north"] - (10 + 12) + 1001, "south": totals["south"] - 11 + 7}
    third, status = run_chain(client, folder, data)
    # the listing (its folder changed) and that file's chain run, and the report; the rest is reused
    assert reused(status) == {"listing": 0, "tidy": 2, "sums": 2, "report": 0}
    assert read_report(spark_session, third.outputs()["report.out"]) == expected_report(totals, 3)

    monkeypatch.setattr(FLOW.steps["sums"], "version", "2")  # a new version of one step
    _, status = run_chain(client, folder, data)
    assert reused(status) == {"listing": 1, "tidy": 3, "sums": 0, "report": 0}

    fresh, status = run_chain(client, folder, data, fresh=True)  # --fresh: everything runs
    assert reused(status) == {"listing": 0, "tidy": 0, "sums": 0, "report": 0}
    assert read_report(spark_session, fresh.outputs()["report.out"]) == expected_report(totals, 3)
    assert fresh.outputs()["report.out"].uri.startswith(str(data / fresh.id))


def test_two_runs_sharing_the_index_at_once_both_end_right(
    client: Client, python_workers, spark_workers, spark_session, fresh_index: None, tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Once seen ending a run `done` before its `report` had run: a finisher peeked at the job
    queues in name order (report, sums, tidy: against the flow) while a job started the next
    step's, and missed it (`test_flow_runs.test_a_job_that_moves_on_while_the_finisher_looks_keeps_the_run_going`).
    (The runs after reuse every job: their jobs move on fast, and it was one that ended early.)"""
    caplog.set_level(logging.INFO, logger="kittiwake.flow")
    folder, data = tmp_path / "in", tmp_path / "runs"
    totals = write_parts(folder, 3, offset=5)
    python_workers(FLOW, concurrency=4)
    spark_workers(FLOW, concurrency=2)
    runs = [FLOW.run(client, {"raw": Dataset.path(folder)}, data_dir=data) for _ in range(2)]
    for run in runs:
        status = run.wait(timeout=120)
        assert status.state == "done", describe(status, caplog)
        assert {p.step: p.done for p in status.steps} == SHAPE, describe(status, caplog)
        assert read_report(spark_session, run.outputs()["report.out"]) == expected_report(totals, 3)
    # a record per job that ran: where both runs ran a job on the same files (listing, tidy) each
    # may have left one under the same fingerprint (a lookup takes the newer); further down each
    # run's own outputs make fingerprints of their own
    sizes = {step: client.stats([reuse_queue(FLOW, FLOW.steps[step])])[0].size for step in SHAPE}
    assert 1 <= sizes["listing"] <= 2 and 3 <= sizes["tidy"] <= 6
    assert 3 <= sizes["sums"] <= 6 and 1 <= sizes["report"] <= 2
    # a third run reuses every part's chain; its report reuses only if the tidy records it takes
    # came all from one run: part 0's may be the first run's and part 1's the second's, and that
    # mix of sums outputs is a report fingerprint neither run made (then it runs, and records it)
    _, status = run_chain(client, folder, data, caplog=caplog)
    assert {step: count for step, count in reused(status).items() if step != "report"} == {
        step: count for step, count in SHAPE.items() if step != "report"}, describe(status, caplog)
    _, status = run_chain(client, folder, data, caplog=caplog)  # and from then on, everything
    assert reused(status) == SHAPE, describe(status, caplog)

"""Fusion on Spark. Into the consumer's plan (``fuse="plan"``): a step's DataFrame built inside its
consumer's job gives what the written Parquet gives, nothing is written for it, a chain of such
steps builds into one query, and reuse sees through it. Through the cache (``fuse="cache"``): a
step's output read by the next step on the same worker from memory gives what the Parquet gives;
the Parquet is written all the same. Either way a worker SIGKILLed between the two halves of a
fused pair (and a broker SIGKILLed mid-run) still ends with the right report."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from flow import pipelines
from flow.spark_process import SparkWorkerProcess
from flow.test_flow_kills import wait_for
from flow.test_flow_reuse import SHAPE, expected_report, read_report, reused
from flow.test_flow_spark import write_parts
from kittiwake import Client
from kittiwake.flow import Dataset
from kittiwake.flow.reuse import forget
from support.broker_process import BrokerProcess

FLOW = pipelines.fused
PLANNED, ALL_PLANNED = pipelines.planned, pipelines.all_planned


def read_parts(spark: Any, data: Path, run: str, step: str) -> list[list[tuple[Any, ...]]]:
    """Each part's rows of `step`'s output, sorted: what the Parquet of the run holds (each part's one
    attempt: its folder `lease-<id>`)."""
    folder = data / run / step / "out"
    parts = [attempt for part in sorted(folder.iterdir()) for attempt in part.iterdir()]
    assert len(parts) == len(list(folder.iterdir()))
    return [sorted(tuple(row) for row in spark.read.parquet(str(part)).collect()) for part in parts]


def finished_run(client: Client, flow: Any, folder: Path, data: Path, *, fresh: bool = True) -> tuple[Any, Any]:
    """A run of `flow` on the parts in `folder`, waited for: done, with every job of `SHAPE`."""
    run = flow.run(client, {"raw": Dataset.path(folder)}, data_dir=data, fresh=fresh)
    status = run.wait(timeout=120)
    assert status.state == "done" and {p.step: p.done for p in status.steps} == SHAPE, status
    return run, status


def test_fused_steps_give_what_unfused_ones_give(
    client: Client, python_workers, spark_workers, spark_session, tmp_path: Path
) -> None:
    folder, data = tmp_path / "in", tmp_path / "runs"
    totals = write_parts(folder, 3)
    python_workers(FLOW)
    results = {}
    for fuse in (True, False):
        worker = spark_workers(FLOW, fuse=fuse)
        run, _ = finished_run(client, FLOW, folder, data)
        results[fuse] = (read_report(spark_session, run.outputs()["report.out"]),
                         read_parts(spark_session, data, run.id, "tidy"), read_parts(spark_session, data, run.id, "sums"))
        if fuse:
            assert worker.fused is not None and worker.fused.hits >= 3  # sums read tidy (and report sums) from memory
            assert len(worker.fused) == 0  # every kept output was dropped once its readers finished
        else:
            assert worker.fused is None
        worker.stop()
    assert results[True] == results[False]
    assert results[True][0] == expected_report(totals, 3)


def test_steps_fused_into_their_consumers_plans_give_what_unfused_ones_give_and_write_nothing(
    client: Client, python_workers, spark_workers, spark_session, tmp_path: Path
) -> None:
    folder, data = tmp_path / "in", tmp_path / "runs"
    totals = write_parts(folder, 3)
    python_workers(PLANNED)
    python_workers(ALL_PLANNED)
    # (flow, the worker fuses) -> the Spark steps whose Parquet the run writes
    cases = {(PLANNED, True): {"sums", "report"}, (PLANNED, False): {"tidy", "sums", "report"},
             (ALL_PLANNED, True): {"report"}}
    for (flow, fuse), written in cases.items():
        worker = spark_workers(flow, fuse=fuse)
        run, _ = finished_run(client, flow, folder, data)
        assert read_report(spark_session, run.outputs()["report.out"]) == expected_report(totals, 3), (flow.name, fuse)
        assert {step for step in ("tidy", "sums", "report") if (data / run.id / step).exists()} == written, (flow.name, fuse)
        worker.stop()


def test_reuse_sees_through_a_step_fused_into_its_consumers_plan(
    client: Client, python_workers, spark_workers, spark_session, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fused output's fingerprint is its producing job's: unchanged inputs hit, a changed file or
    a new version of the fused step misses downstream too."""
    forget(client, PLANNED)
    folder, data = tmp_path / "in", tmp_path / "runs"
    totals = write_parts(folder, 3)
    python_workers(PLANNED)
    worker = spark_workers(PLANNED)

    def run_planned() -> tuple[Any, Any]:
        return finished_run(client, PLANNED, folder, data, fresh=False)

    first, status = run_planned()
    assert reused(status) == {"listing": 0, "tidy": 0, "sums": 0, "report": 0}
    _, status = run_planned()
    assert reused(status) == SHAPE
    (folder / "part-1.csv").write_text("region,amount\nnorth,1000\nsouth,7\nnorth,1\n,\n")
    totals = {"north": totals["north"] - (10 + 12) + 1001, "south": totals["south"] - 11 + 7}
    third, status = run_planned()
    assert reused(status) == {"listing": 0, "tidy": 2, "sums": 2, "report": 0}
    assert read_report(spark_session, third.outputs()["report.out"]) == expected_report(totals, 3)
    monkeypatch.setattr(PLANNED.steps["tidy"], "version", "2")  # the fused step's code changes
    fourth, status = run_planned()
    assert reused(status) == {"listing": 1, "tidy": 0, "sums": 0, "report": 0}
    assert read_report(spark_session, fourth.outputs()["report.out"]) == expected_report(totals, 3)
    # a worker that does not fuse takes no recorded recipe: it runs tidy and writes its Parquet
    worker.stop()
    spark_workers(PLANNED, fuse=False)
    fifth, status = run_planned()
    assert reused(status) == {"listing": 1, "tidy": 0, "sums": 0, "report": 0}
    assert (data / fifth.id / "tidy").exists()
    assert read_report(spark_session, fifth.outputs()["report.out"]) == expected_report(totals, 3)


def test_a_recipe_built_with_other_code_than_it_names_is_not_recorded_for_reuse(
    client: Client, python_workers, spark_workers, spark_session, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A recipe made by a worker of another release (its version is not this worker's code of the
    step): the consumer builds it and the run ends right, but the consumer's outputs go into no
    reuse record — they were not made by the code their fingerprint names — so the next run
    computes them again."""
    from kittiwake.flow import plan_fusion

    made = plan_fusion.recipe
    monkeypatch.setattr(plan_fusion, "recipe", lambda prepared, port: {**made(prepared, port), "version": "declared:old"})
    forget(client, PLANNED)
    folder, data = tmp_path / "in", tmp_path / "runs"
    totals = write_parts(folder, 3)
    python_workers(PLANNED)
    spark_workers(PLANNED)
    first, _ = finished_run(client, PLANNED, folder, data, fresh=False)
    assert read_report(spark_session, first.outputs()["report.out"]) == expected_report(totals, 3)
    assert "is built with version" in caplog.text and "'tidy'" in caplog.text
    second, status = finished_run(client, PLANNED, folder, data, fresh=False)
    assert reused(status)["sums"] == 0  # recorded, they would have been reused (3)
    assert read_report(spark_session, second.outputs()["report.out"]) == expected_report(totals, 3)


@pytest.mark.parametrize("flow", [FLOW, PLANNED], ids=["cache", "plan"])
def test_a_spark_worker_killed_between_fused_halves_and_a_broker_killed_mid_run_end_right(
    broker: BrokerProcess, client: Client, python_workers, spark_workers, spark_session, fail_dir: Path, tmp_path: Path,
    flow: Any,
) -> None:
    folder, data = tmp_path / "in", tmp_path / "runs"
    totals = write_parts(folder, 3)
    # sums, on the worker we kill, waits with tidy's output cached, or with tidy's plan in its own
    (fail_dir / "sums.slow").write_text("30")
    doomed = SparkWorkerProcess(broker.url, tmp_path / "spark-worker.log", [f"flow.pipelines:{flow.name}"],
                                "--lease-secs", "3", "--concurrency", "2",
                                env={"KITTIWAKE_TEST_FAIL_DIR": str(fail_dir)})
    try:
        doomed.wait_ready()
        python_workers(flow)
        run = flow.run(client, {"raw": Dataset.path(folder)}, data_dir=data, fresh=True)

        def progress(step: str, field: str) -> int:
            return next(getattr(p, field) for p in run.status().steps if p.step == step)

        wait_for(lambda: progress("sums", "running") == 2, 90, "two sums jobs running after their tidy")
        broker.kill()
        broker.restart()
        assert broker.url == client.url
        wait_for(lambda: progress("sums", "running") == 2, 10, "the leases to be there after the restart")
        tidied = progress("tidy", "done")
        doomed.kill()  # cached tidy outputs die with it (their Parquet stays); a plan is only a recipe
    finally:
        doomed.kill()
    (fail_dir / "sums.slow").unlink()
    worker = spark_workers(flow)
    status = run.wait(timeout=120)
    assert status.state == "done", status
    assert {p.step: p.done for p in status.steps} == SHAPE
    assert read_report(spark_session, run.outputs()["report.out"]) == expected_report(totals, 3)
    assert worker.done == (3 - tidied) + 3 + 1  # tidy jobs not done before the kill, every sums, the report

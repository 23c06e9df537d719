"""Spark steps on a Spark worker that runs in the test's process on the shared SparkSession:
a folder split into files (python), each file cleaned on Spark, merged back into totals (Spark);
a failed attempt retried, a stop handing jobs back, a broker restart as a job starts costing no
attempt."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from flow import pipelines
from kittiwake import Client
from kittiwake.flow import Dataset
from support.broker_process import BrokerProcess

REGIONS = ["north", "south", "north", ""]


def write_parts(folder: Path, parts: int, offset: int = 0) -> dict[str, int]:
    """CSV files of (region, amount); returns the expected total per region (rows without a
    region have no amount and are dropped by `clean`)."""
    folder.mkdir(parents=True, exist_ok=True)
    totals: dict[str, int] = {}
    for part in range(parts):
        lines = ["region,amount"]
        for row, region in enumerate(REGIONS):
            amount = offset + part * 10 + row
            if region:
                lines.append(f"{region},{amount}")
                totals[region] = totals.get(region, 0) + amount
            else:
                lines.append(f"{region},")
        (folder / f"part-{part}.csv").write_text("\n".join(lines) + "\n")
    return totals


def read_totals(spark: Any, dataset: Dataset) -> dict[str, tuple[int, int]]:
    return {row["region"]: (row["amount"], row["parts"]) for row in spark.read.parquet(dataset.uri).collect()}


def test_split_per_file_spark_and_merge_back(client: Client, python_workers, spark_workers, spark_session, tmp_path: Path) -> None:
    expected = write_parts(tmp_path / "in", 3)
    python_workers(pipelines.sales)
    worker = spark_workers(pipelines.sales)
    run = pipelines.sales.run(client, {"raw": Dataset.path(tmp_path / "in")}, data_dir=tmp_path / "runs")
    status = run.wait(timeout=120)
    assert status.state == "done", status
    assert {p.step: p.done for p in status.steps} == {"files": 1, "clean": 3, "totals": 1}
    result = run.outputs()["totals.out"]
    assert result.kind == "parquet" and Path(result.uri).parent == tmp_path / "runs" / run.id / "totals" / "out"
    assert Path(result.uri).name.startswith("lease-")  # the folder of the attempt that finished the job
    assert read_totals(spark_session, result) == {region: (total, 3) for region, total in expected.items()}
    parts = sorted(p.name for p in (tmp_path / "runs" / run.id / "clean" / "out").iterdir())
    assert parts == ["00000000", "00000001", "00000002"]  # one folder per item, named by its key
    assert all(len(list((tmp_path / "runs" / run.id / "clean" / "out" / part).iterdir())) == 1 for part in parts)
    assert worker.done == 4


def test_a_failed_spark_attempt_is_retried(
    client: Client, python_workers, spark_workers, spark_session, fail_dir: Path, tmp_path: Path
) -> None:
    expected = write_parts(tmp_path / "in", 2, offset=100)
    (fail_dir / "clean").write_text("")
    python_workers(pipelines.sales)
    worker = spark_workers(pipelines.sales)
    run = pipelines.sales.run(client, {"raw": Dataset.path(tmp_path / "in")}, data_dir=tmp_path / "runs")
    deadline = time.monotonic() + 60
    while not worker.settler.retried:  # an attempt of clean failed and waits for its retry
        assert time.monotonic() < deadline, run.status()
        time.sleep(0.05)
    (fail_dir / "clean").unlink()  # the next attempts succeed
    status = run.wait(timeout=120)
    assert status.state == "done", status
    assert worker.settler.retried >= 1
    assert read_totals(spark_session, run.outputs()["totals.out"]) == {r: (t, 2) for r, t in expected.items()}


def test_a_stop_cancels_running_spark_jobs_and_hands_them_back_without_an_attempt(
    client: Client, python_workers, spark_workers, fail_dir: Path, tmp_path: Path
) -> None:
    write_parts(tmp_path / "in", 1)
    (fail_dir / "clean.stall").write_text("60")
    python_workers(pipelines.sales)
    worker = spark_workers(pipelines.sales, concurrency=1)
    worker.shutdown_secs = 0.5
    run = pipelines.sales.run(client, {"raw": Dataset.path(tmp_path / "in")}, data_dir=tmp_path / "runs")
    clean_queue = pipelines.sales.steps["clean"].job_queue
    deadline = time.monotonic() + 60
    while not any(view.state == "leased" for view in client.peek(clean_queue, 10)):
        assert time.monotonic() < deadline, run.status()
        time.sleep(0.05)
    time.sleep(1.0)  # the stalling Spark job is under way
    began = time.monotonic()
    worker.stop()
    while worker.rejected == 0:
        assert time.monotonic() - began < 30, "the running job was not handed back"
        time.sleep(0.05)
    [job] = client.peek(clean_queue, 10)
    assert (job.state, job.attempts) == ("available", 0)  # rejected: no attempt counted
    assert time.monotonic() - began < 20  # the 60 s Spark job was cancelled, not waited for
    (fail_dir / "clean.stall").unlink()
    spark_workers(pipelines.sales)
    assert run.wait(timeout=60).state == "done"


@pytest.mark.parametrize("moment", ["prepare", "fingerprint"])
def test_a_broker_restart_before_a_spark_job_runs_counts_no_attempt(
    broker: BrokerProcess, client: Client, spark_session, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, moment: str
) -> None:
    """The broker is killed at `moment` of a job's start (before the worker reads the run's record
    and whether it ended; before it looks the job's fingerprint up in the reuse index) and comes
    back 3 s later. The worker's reads fail meanwhile (its client gives up connecting after 1 s);
    the job, allowed one attempt, must still run once the broker is back."""
    from kittiwake.flow.jobs import FlowJobs
    from kittiwake.flow.spark_worker import SparkWorker

    restarted = threading.Event()

    def kill_and_restart_later() -> None:
        broker.kill()
        threading.Thread(target=lambda: (time.sleep(3.0), broker.restart(), restarted.set()), daemon=True).start()

    original = getattr(FlowJobs, moment)
    calls = []

    def at_the_moment(self, *args, **kwargs):
        if not calls:
            calls.append(moment)
            if moment == "prepare":
                kill_and_restart_later()
                return original(self, *args, **kwargs)
            result = original(self, *args, **kwargs)
            kill_and_restart_later()
            return result
        return original(self, *args, **kwargs)

    monkeypatch.setattr(FlowJobs, moment, at_the_moment)
    worker = SparkWorker([pipelines.once], client=Client(broker.url, connect_timeout=1.0, worker="spark-restart"),
                         session=spark_session, concurrency=1, wait_secs=0.2, shutdown_secs=10)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        assert worker.started.wait(60)
        run = pipelines.once.run(client, {"rows": Dataset.inline([{"n": 1}, {"n": 2}])}, data_dir=tmp_path / "runs")
        assert restarted.wait(60), "the job never reached the moment"
        status = run.wait(timeout=90)
        assert status.state == "done", status
        assert (worker.done, worker.failed) == (1, 0)
        rows = spark_session.read.parquet(run.outputs()["doubled.out"].uri).collect()
        assert sorted(row["n"] for row in rows) == [2, 4]
    finally:
        worker.stop()
        thread.join(60)
        worker.client.close()

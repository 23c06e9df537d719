"""A run survives SIGKILL of the broker and of a Spark worker in the middle of its Spark jobs, and
ends with the right output: finished jobs are not redone, killed ones run again after their lease."""

from __future__ import annotations

import time
from pathlib import Path

from flow import pipelines
from flow.spark_process import SparkWorkerProcess
from flow.test_flow_spark import read_totals, write_parts
from kittiwake import Client, errors
from kittiwake.flow import Dataset
from support.broker_process import BrokerProcess

LEASE_SECS = 3


def wait_for(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if condition():
                return
        except errors.Transient:
            pass
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def test_a_run_survives_sigkill_of_the_broker_and_of_a_spark_worker(
    broker: BrokerProcess, client: Client, python_workers, spark_workers, spark_session, fail_dir: Path, tmp_path: Path
) -> None:
    expected = write_parts(tmp_path / "in", 4)
    (fail_dir / "clean.slow").write_text("8")  # each clean job takes 8 s on the worker we kill
    doomed = SparkWorkerProcess(broker.url, tmp_path / "spark-worker.log", ["flow.pipelines:sales"],
                                "--lease-secs", str(LEASE_SECS), "--concurrency", "2",
                                env={"KITTIWAKE_TEST_FAIL_DIR": str(fail_dir)})
    try:
        doomed.wait_ready()
        python_workers(pipelines.sales)
        run = pipelines.sales.run(client, {"raw": Dataset.path(tmp_path / "in")}, data_dir=tmp_path / "runs")

        def clean(field: str) -> int:
            return next(getattr(p, field) for p in run.status().steps if p.step == "clean")

        wait_for(lambda: clean("running") == 2, 60, "two clean jobs running on the doomed worker")
        broker.kill()
        broker.restart()
        assert broker.url == client.url  # the same port: every client reconnects by itself
        wait_for(lambda: clean("running") == 2, 10, "the leases to be there after the restart")
        doomed.kill()
    finally:
        doomed.kill()
    (fail_dir / "clean.slow").unlink()
    worker = spark_workers(pipelines.sales)  # takes over once the killed worker's leases run out
    status = run.wait(timeout=120)
    assert status.state == "done", status
    assert {p.step: p.done for p in status.steps} == {"files": 1, "clean": 4, "totals": 1}
    assert read_totals(spark_session, run.outputs()["totals.out"]) == {r: (t, 4) for r, t in expected.items()}
    assert worker.done == 5  # the 4 cleans (2 run again after the kill, 2 never started there) and totals

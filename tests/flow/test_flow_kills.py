"""A run survives SIGKILL of the broker and of a Spark worker in the middle of its Spark jobs, and
ends with the right output: finished jobs are not redone, killed ones run again after their lease.
A worker that stalled past its lease and then goes on cannot change the output of the attempt that
finished the job."""

from __future__ import annotations

import os
import signal
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


def test_a_worker_that_lost_its_lease_does_not_touch_the_output_another_attempt_made(
    broker: BrokerProcess, client: Client, spark_workers, spark_session, fail_dir: Path, tmp_path: Path
) -> None:
    """A Spark worker stalls (SIGSTOP) in a job's step; its lease runs out and another worker runs
    the job again and finishes it. The stalled one then goes on and writes its DataFrame: the
    output the run's token names must still be the second attempt's."""
    held = tmp_path / "fail-stalled"
    held.mkdir()
    (held / "stamp.hold").write_text("")
    stalled = SparkWorkerProcess(broker.url, tmp_path / "spark-worker.log", ["flow.pipelines:stamps"],
                                 "--lease-secs", "4", "--concurrency", "1", env={"KITTIWAKE_TEST_FAIL_DIR": str(held)})
    try:
        stalled.wait_ready()
        run = pipelines.stamps.run(client, {"rows": Dataset.inline([{"n": 1}, {"n": 2}])}, data_dir=tmp_path / "runs")
        queue = pipelines.stamps.steps["stamp"].job_queue
        wait_for(lambda: [view.state for view in client.peek(queue, 1)] == ["leased"], 60, "the stalled worker's lease")
        time.sleep(1.0)  # in the step, waiting on stamp.hold
        os.kill(stalled.proc.pid, signal.SIGSTOP)  # the worker's Python: no renewals, no progress
        wait_for(lambda: [(view.state, view.attempts) for view in client.peek(queue, 1)] == [("available", 1)], 30,
                 "its lease to run out")
        spark_workers(pipelines.stamps)
        status = run.wait(timeout=120)
        assert status.state == "done", status
        output = run.outputs()["stamp.out"]
        assert sorted(tuple(row) for row in spark_session.read.parquet(output.uri).collect()) == [(1, 2), (2, 2)]

        (held / "stamp.hold").unlink()
        os.kill(stalled.proc.pid, signal.SIGCONT)  # it goes on: writes its DataFrame, then cannot finish the job
        wait_for(lambda: "could not finish" in stalled.log_path.read_text(errors="replace"), 120,
                 "the stalled worker to write and be refused")
        rows = sorted(tuple(row) for row in spark_session.read.parquet(output.uri).collect())
        assert rows == [(1, 2), (2, 2)], "the output of the finished attempt was changed by the stalled one"
    finally:
        stalled.kill()

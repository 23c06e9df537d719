"""`kittiwake spark-worker --remote sc://…`: flow steps run through a Spark Connect server started
from the PySpark wheel's jars (`spark-submit --class …SparkConnectServer`), the worker holding a gRPC
client and no JVM; a stop interrupts the job's tagged operations on the server; and the `kittiwake`
data source works in a Connect session (the docs' example with `SPARK_REMOTE`), the server's
Python workers running this interpreter."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import pytest

from flow import pipelines
from flow.connect_pipelines import nap
from flow.spark_process import TESTS_DIR, SparkWorkerProcess
from flow.test_flow_spark import write_parts
from kittiwake import Client
from kittiwake.flow import Dataset
from kittiwake.worker.registry import all_workers
from support.broker_process import BrokerProcess
from support.spark_daemons import CONNECT_SERVER_CLASS, SparkDaemon, free_port, require_spark, spark_home

EXAMPLES = TESTS_DIR.parent / "examples"


@pytest.fixture(scope="session")
def connect_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Spark Connect server on 127.0.0.1 (local[2], FAIR), its Python workers running this
    interpreter; yields its `sc://` URL and is killed at the end of the run."""
    require_spark()
    folder = tmp_path_factory.mktemp("spark-connect")
    port = free_port()
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
           "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_LOG_DIR": str(folder), "SPARK_NO_DAEMONIZE": "1"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(TESTS_DIR), env.get("PYTHONPATH")]))
    server = SparkDaemon(folder / "connect-server.log", [
        str(spark_home() / "bin" / "spark-submit"), "--class", CONNECT_SERVER_CLASS, "--master", "local[2]",
        "--driver-memory", "768m",
        "--conf", f"spark.connect.grpc.binding.port={port}", "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
        "--conf", "spark.scheduler.mode=FAIR", "--conf", "spark.ui.enabled=false",
        "--conf", "spark.sql.shuffle.partitions=2", "spark-internal"], env)
    try:
        server.wait_for(r"Spark Connect server started")
        yield f"sc://127.0.0.1:{port}"
    finally:
        server.stop()


def test_a_spark_worker_runs_flow_steps_through_spark_connect(broker: BrokerProcess, client: Client, python_workers,
                                                              connect_server: str, tmp_path: Path) -> None:
    expected = write_parts(tmp_path / "in", 2)
    worker = SparkWorkerProcess(broker.url, tmp_path / "spark-worker.log", ["flow.pipelines:sales",
                                "flow.pipelines:all_planned"], "--remote", connect_server, "--concurrency", "2")
    try:
        worker_id = worker.wait_ready()
        [record] = [r for r in all_workers(client) if r.id == worker_id]
        assert (record.info["spark_master"], record.info["scheduler_mode"]) == (connect_server, "FAIR")
        python_workers(pipelines.sales)
        run = pipelines.sales.run(client, {"raw": Dataset.path(tmp_path / "in")}, data_dir=tmp_path / "runs")
        status = run.wait(timeout=180)
        assert status.state == "done", f"{status}\n{worker.log_tail()}"
        assert {p.step: p.done for p in status.steps} == {"files": 1, "clean": 2, "totals": 1}
        # steps fused into their consumers' plans (`plan_fusion`): tidy and sums built in report's query
        python_workers(pipelines.all_planned)
        planned = pipelines.all_planned.run(client, {"raw": Dataset.path(tmp_path / "in")}, data_dir=tmp_path / "planned")
        status = planned.wait(timeout=180)
        assert status.state == "done", f"{status}\n{worker.log_tail()}"
        assert {p.step: p.done for p in status.steps} == {"listing": 1, "tidy": 2, "sums": 2, "report": 1}
        assert worker.terminate() == 0  # SIGTERM: a graceful stop
    finally:
        worker.kill()
    import pyarrow.parquet as parquet

    totals = parquet.read_table(run.outputs()["totals.out"].uri).to_pylist()
    assert {row["region"]: (row["amount"], row["parts"]) for row in totals} == {r: (t, 2) for r, t in expected.items()}
    report = parquet.read_table(planned.outputs()["report.out"].uri).to_pylist()
    assert {row["region"]: (row["amount"], row["parts"]) for row in report} == {r: (t, 2) for r, t in expected.items()}
    assert not (tmp_path / "planned" / planned.id / "tidy").exists()


def test_a_stop_interrupts_a_running_job_on_the_server_and_hands_it_back(broker: BrokerProcess, client: Client,
                                                                        connect_server: str, tmp_path: Path) -> None:
    """SIGTERM: the job's Spark operations, tagged, are interrupted on the server after
    --shutdown-secs, and the job goes back unrun (no attempt counted)."""
    worker = SparkWorkerProcess(broker.url, tmp_path / "spark-worker.log", ["flow.connect_pipelines:nap"],
                                "--remote", connect_server, "--concurrency", "1", "--shutdown-secs", "0.5")
    try:
        worker.wait_ready()
        run = nap.run(client, {"secs": Dataset.inline(120)}, data_dir=tmp_path / "runs")
        queue = nap.steps["sleep_on_an_executor"].job_queue
        deadline = time.monotonic() + 60
        while not any(view.state == "leased" for view in client.peek(queue, 10)):
            assert time.monotonic() < deadline, run.status()
            time.sleep(0.05)
        time.sleep(2.0)  # the sleeping UDF is under way on the server
        began = time.monotonic()
        assert worker.terminate() == 0
        # interrupted, not waited for: a stuck slot would hold the stop for 30 s more
        assert time.monotonic() - began < 25, worker.log_tail()
    finally:
        worker.kill()
    [job] = client.peek(queue, 10)
    assert (job.state, job.attempts) == ("available", 0)
    assert "cancelling 1 Spark jobs" in worker.log_path.read_text()
    run.cancel()


def test_the_data_source_works_in_a_spark_connect_session(broker: BrokerProcess, connect_server: str,
                                                          tmp_path: Path) -> None:
    environment = {**os.environ, "SPARK_REMOTE": connect_server}
    environment.pop("PYSPARK_PYTHON", None)  # the client's choice counts for nothing: the server's does
    done = subprocess.run([sys.executable, str(EXAMPLES / "spark_source.py"), broker.url], cwd=tmp_path,
                          env=environment, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    assert done.stdout == "".join(f"order-{n} amount={n * 10} available\n" for n in range(5))


@pytest.mark.parametrize("args, says", [
    (["--remote", "sc://127.0.0.1:1", "--master", "local[1]"], "--remote and --master exclude each other"),
    (["--remote", "127.0.0.1:15002"], "is not a Spark Connect URL"),
])
def test_remote_is_refused_with_master_or_without_its_scheme(args: list[str], says: str) -> None:
    """Refused before a flow loads or a session starts (no Spark needed)."""
    from click.testing import CliRunner

    from kittiwake.cli.main import cli

    result = CliRunner().invoke(cli, ["--url", "kw://127.0.0.1:1", "spark-worker", "flow.pipelines:sales", *args])
    assert result.exit_code == 2 and says in result.output, result.output

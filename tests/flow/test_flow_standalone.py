"""`kittiwake spark-worker --master spark://…` on a real standalone Spark cluster: a master and a
worker started with the `spark-class` launcher that ships in the PySpark wheel, one flow run whose
Spark steps execute on the cluster's executor, then everything stopped."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Iterator

import pytest

from flow import pipelines
from flow.spark_process import SparkWorkerProcess
from flow.test_flow_spark import read_totals, write_parts
from kittiwake import Client
from kittiwake.flow import Dataset
from kittiwake.worker.registry import all_workers
from support.broker_process import BrokerProcess

START_TIMEOUT_SECS = 90.0


def spark_class() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent / "bin" / "spark-class"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Daemon:
    """One `spark-class` JVM in its own process group, its output in a log file."""

    def __init__(self, log_path: Path, *args: str, env: dict[str, str]) -> None:
        self.log_path = log_path
        with open(log_path, "wb") as log:
            self.proc = subprocess.Popen([str(spark_class()), *args], stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, env=env, start_new_session=True)

    def wait_for(self, pattern: str) -> None:
        deadline = time.monotonic() + START_TIMEOUT_SECS
        while not re.search(pattern, self.log_path.read_text(errors="replace")):
            assert self.proc.poll() is None, f"{self.log_path.name} exited:\n{self.log_path.read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"{self.log_path.name}: no {pattern!r}:\n{self.log_path.read_text()[-3000:]}"
            time.sleep(0.1)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(20)


@pytest.fixture
def standalone_cluster(tmp_path: Path, spark_session: object) -> Iterator[str]:
    """A standalone master and one worker (1 core, 1 GiB) on 127.0.0.1; yields the master URL.
    (`spark_session` only for its skip: no PySpark or no Java, no cluster.)"""
    port = free_port()
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_WORKER_DIR": str(tmp_path / "spark-work"),
           "SPARK_LOG_DIR": str(tmp_path / "spark-logs"), "SPARK_NO_DAEMONIZE": "1"}
    master_url = f"spark://127.0.0.1:{port}"
    master = Daemon(tmp_path / "master.log", "org.apache.spark.deploy.master.Master",
                    "--host", "127.0.0.1", "--port", str(port), "--webui-port", "0", env=env)
    worker = Daemon(tmp_path / "worker.log", "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                    "--webui-port", "0", "--cores", "1", "--memory", "1g", master_url, env=env)
    try:
        master.wait_for(r"I have been elected leader")
        worker.wait_for(r"Successfully registered with master")
        yield master_url
    finally:
        worker.stop()
        master.stop()


def test_a_spark_worker_runs_flow_steps_on_a_standalone_cluster(
    broker: BrokerProcess, client: Client, python_workers, standalone_cluster: str, tmp_path: Path
) -> None:
    expected = write_parts(tmp_path / "in", 1)
    worker = SparkWorkerProcess(broker.url, tmp_path / "spark-worker.log", ["flow.pipelines:sales"],
                                "--master", standalone_cluster, "--concurrency", "2",
                                "--conf", "spark.executor.memory=512m", "--conf", "spark.cores.max=1")
    try:
        worker_id = worker.wait_ready()
        [record] = [r for r in all_workers(client) if r.id == worker_id]
        assert (record.info["spark_master"], record.info["scheduler_mode"]) == (standalone_cluster, "FAIR")
        python_workers(pipelines.sales)
        run = pipelines.sales.run(client, {"raw": Dataset.path(tmp_path / "in")}, data_dir=tmp_path / "runs")
        status = run.wait(timeout=180)
        assert status.state == "done", f"{status}\n{worker.log_tail()}"
        assert worker.terminate() == 0  # SIGTERM: a graceful stop
    finally:
        worker.kill()
    # the cluster's executor did the work: its application folder holds the executor's log
    assert list((tmp_path / "spark-work").glob("app-*/0/stderr"))
    from pyspark.sql import SparkSession

    session = SparkSession.getActiveSession()
    assert session is not None
    assert read_totals(session, run.outputs()["totals.out"]) == {r: (t, 1) for r, t in expected.items()}

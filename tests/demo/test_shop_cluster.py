"""The main job on a real Spark cluster: a standalone master and two workers, each on a host of its
own — a network namespace with its own address on a bridge (`cluster.hosts`; loopback ports where
namespaces cannot be made) — started from the PySpark wheel's `spark-class`; `kittiwake demo
--spark-master spark://…` runs the flow through them (its spark-worker the cluster's driver, on the
bridge's address) and checks its report in plain Python, as `make demo` does."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest

from cluster import hosts
from support.spark_daemons import SparkDaemon, free_port, require_spark, spark_home

MASTER_PORT = 7077


def bridge_address(host: hosts.TestHost) -> str:
    """The root namespace's address on the hosts' bridge (the test's side), or the loopback."""
    return "127.0.0.1" if host.namespace is None else host.ip.rsplit(".", 1)[0] + ".1"


@pytest.fixture
def spark_cluster(tmp_path: Path) -> Iterator[tuple[str, str, list[Path]]]:
    """A master and two 1-core workers on hosts of their own; yields the master URL, the address
    the driver must use, and the workers' work folders."""
    require_spark()
    spark_class = str(spark_home() / "bin" / "spark-class")
    daemons: list[SparkDaemon] = []
    with hosts.test_hosts(3, ["master", "worker-1", "worker-2"]) as (master_host, *worker_hosts):
        port = MASTER_PORT if master_host.namespace is not None else free_port()
        master_url = f"spark://{master_host.ip}:{port}"
        work_dirs = []
        try:
            for host in (master_host, *worker_hosts):
                env = {**os.environ, "SPARK_LOCAL_IP": host.ip, "SPARK_LOCAL_HOSTNAME": host.ip,
                       "SPARK_LOG_DIR": str(tmp_path / host.name),
                       "SPARK_WORKER_DIR": str(tmp_path / host.name / "work"), "SPARK_NO_DAEMONIZE": "1"}
                if host is master_host:
                    argv = [spark_class, "org.apache.spark.deploy.master.Master", "--host", host.ip,
                            "--port", str(port), "--webui-port", str(free_port() if host.namespace is None else 8080)]
                else:
                    argv = [spark_class, "org.apache.spark.deploy.worker.Worker", "--host", host.ip, "--webui-port",
                            str(free_port() if host.namespace is None else 8081), "--cores", "1", "--memory", "1g",
                            master_url]
                    work_dirs.append(tmp_path / host.name / "work")
                (tmp_path / host.name).mkdir()
                daemons.append(SparkDaemon(tmp_path / f"{host.name}.log", host.command(argv), env))
                if host is master_host:
                    daemons[0].wait_for(r"I have been elected leader")
            for worker in daemons[1:]:
                worker.wait_for(r"Successfully registered with master")
            yield master_url, bridge_address(master_host), work_dirs
        finally:
            for daemon in reversed(daemons):
                daemon.stop()


@pytest.mark.timeout(600)
def test_the_demo_runs_on_a_standalone_cluster_of_two_workers(spark_cluster: tuple[str, str, list[Path]],
                                                              tmp_path: Path) -> None:
    master_url, driver_address, work_dirs = spark_cluster
    environment = {**os.environ, "SPARK_LOCAL_IP": driver_address}  # executors call the driver back there
    completed = subprocess.run(
        [sys.executable, "-m", "kittiwake", "demo", "--size", "600kB", "--shards", "2", "--check-shards", "2",
         "--spark-master", master_url, "--keep", str(tmp_path / "demo"), "--json"],
        capture_output=True, text=True, timeout=560, env=environment,
    )
    logs = "\n".join(path.read_text(errors="replace")[-2000:] for path in (tmp_path / "demo").glob("*.log"))
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:] + logs
    result = json.loads(completed.stdout.strip().splitlines()[-1])
    assert result["ok"] is True and result["state"] == "done"
    assert result["check"]["ok"] is True, result["check"]["differences"]
    assert result["check"]["shards_checked"] == [0, 1]  # every shard recomputed in plain Python
    assert result["report"]["totals"]["events"] == result["dataset"]["clean_rows"]
    assert {step["step"]: (step["done"], step["dead"]) for step in result["steps"]} == {
        "shards": (1, 0), "clean": (2, 0), "users": (2, 0), "enrich": (2, 0), "report": (1, 0)}
    # both workers ran an executor of the spark-worker's application
    for work in work_dirs:
        assert list(work.glob("app-*/*/stderr")), f"no executor ran in {work}"

"""`spark.readStream.format("kittiwake")` into Spark's Parquet sink, against a real broker: a query
stopped and restarted from its checkpoint, and a driver SIGKILLed while a batch is in flight and
restarted from its checkpoint. Either way every task reaches the sink exactly once and the queue
ends empty, by the queue checker's count (lost, unexpected, duplicated; docs/testing.md)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import kittiwake.spark
from kittiwake import Client
from kittiwake.spark import stream_log
from support.broker_process import BrokerProcess
from support.checker import DELIVER, DEQUEUE, ENQUEUE, History, Result, check

DRIVER = Path(__file__).with_name("stream_driver.py")
KILL_AFTER_BATCHES = 1  # batches committed before the one killed
DRIVER_START_SECS = 120.0
# The throwaway driver's JVM starts in about half the time without the optimising compiler.
QUICK_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


@pytest.fixture
def spark(spark_session: Any) -> Any:
    kittiwake.spark.register(spark_session)
    return spark_session


def enqueue(client: Client, history: History, queue: str, values: list[str]) -> None:
    operation = history.invoke("producer", ENQUEUE, values)
    client.enqueue_many([{"queue": queue, "pid": value, "data": value.encode()} for value in values])
    history.ok(operation)


def start(spark: Any, url: str, queue: str, tmp_path: Path, **options: str) -> Any:
    reader = spark.readStream.format("kittiwake").option("url", url).option("queue", queue).option("name", "sink")
    for key, value in options.items():
        reader = reader.option(key, value)
    return (
        reader.load().writeStream.format("parquet").option("path", str(tmp_path / "sink"))
        .option("checkpointLocation", str(tmp_path / "checkpoint")).start()
    )


def run_until_idle(query: Any) -> None:
    try:
        query.processAllAvailable()
    finally:
        query.stop()


def sink_rows(spark: Any, sink: Path) -> list[Any]:
    """The rows of the sink's committed files (Spark reads its metadata log), with their file."""
    from pyspark.sql.functions import input_file_name

    frame = spark.read.parquet(str(sink)).select("pid", "data", "state", input_file_name().alias("file"))
    return frame.collect()


def checked(client: Client, history: History, queue: str, rows: list[Any]) -> Result:
    """Every row of the sink as a delivery the stream also finished, against what is left in the queue."""
    for row in rows:
        assert bytes(row.data).decode() == row.pid and row.state == "leased"
        history.ok(history.invoke("stream", DELIVER), [row.pid])
        history.ok(history.invoke("stream", DEQUEUE, [row.pid]))
    left = [view.pid for view in client.peek(queue, 10_000)]
    return check(history, left)


def test_a_stopped_query_restarts_from_its_checkpoint(broker: BrokerProcess, spark: Any, tmp_path: Path) -> None:
    history = History()
    with Client(broker.url) as client:
        enqueue(client, history, "jobs", [f"a{index:03d}" for index in range(60)])
        run_until_idle(start(spark, broker.url, "jobs", tmp_path, max_tasks_per_batch="40", partitions="2"))
        assert client.stats(["jobs"])[0].size == 0
        enqueue(client, history, "jobs", [f"b{index:03d}" for index in range(40)])
        run_until_idle(start(spark, broker.url, "jobs", tmp_path, max_tasks_per_batch="40", partitions="2"))
        result = checked(client, history, "jobs", sink_rows(spark, tmp_path / "sink"))
    print(result.format())
    assert result.valid and not result.duplicated, result.format()
    assert result.acked == 100 and result.drained == 0


def test_a_driver_killed_mid_batch_loses_and_repeats_nothing(broker: BrokerProcess, spark: Any, tmp_path: Path) -> None:
    history = History()
    checkpoint = tmp_path / "checkpoint"
    with Client(broker.url) as client:
        enqueue(client, history, "jobs", [f"t{index:04d}" for index in range(200)])
        driver_log = tmp_path / "driver.log"
        with open(driver_log, "wb") as output:
            driver = subprocess.Popen(
                [sys.executable, str(DRIVER), broker.url, "jobs", "sink", str(tmp_path / "sink"), str(checkpoint), "0.03"],
                stdout=output, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                env={**os.environ, "JDK_JAVA_OPTIONS": QUICK_JVM},
            )
        try:
            batch = wait_for_a_batch_in_flight(driver, checkpoint, driver_log)
        finally:
            os.killpg(driver.pid, signal.SIGKILL)  # the driver, its JVM and their Python workers at once
            driver.wait(timeout=30)
            history.crash(f"driver killed during batch {batch}")
        assert client.stats(["jobs"])[0].leased > 0, "the killed driver held a batch"
        logged = stream_log.load(client, "jobs.stream.sink")
        number = logged_batch(checkpoint, batch)
        in_flight = sorted(task.pid for task in logged.pending[number].tasks)

        run_until_idle(start(spark, broker.url, "jobs", tmp_path))  # the same checkpoint, in this driver
        rows = sink_rows(spark, tmp_path / "sink")
        files = batch_files(tmp_path / "sink", batch)
        assert sorted(row.pid for row in rows if row.file in files) == in_flight  # the replay had the same tasks
        result = checked(client, history, "jobs", rows)
    print(result.format())
    assert result.valid and not result.duplicated, result.format()
    assert result.acked == 200 and result.drained == 0


def logged_batch(checkpoint: Path, spark_batch: int) -> int:
    """The stream's batch number that ends Spark's batch `spark_batch`, from Spark's offset log."""
    offsets = (checkpoint / "offsets" / str(spark_batch)).read_text().splitlines()
    return json.loads(offsets[-1])["batch"]


def batch_files(sink: Path, spark_batch: int) -> set[str]:
    """The files the Parquet sink committed for one Spark batch, from its metadata log."""
    entries = (sink / "_spark_metadata" / str(spark_batch)).read_text().splitlines()[1:]
    return {json.loads(entry)["path"] for entry in entries}


def wait_for_a_batch_in_flight(driver: subprocess.Popen[bytes], checkpoint: Path, driver_log: Path) -> int:
    """The number of a batch Spark has planned (its offsets are logged) and not yet committed, once
    a batch has been committed before it."""
    deadline = time.monotonic() + DRIVER_START_SECS
    while time.monotonic() < deadline:
        if driver.poll() is not None:
            tail = "\n".join(driver_log.read_text(errors="replace").splitlines()[-30:])
            raise AssertionError(f"the streaming driver exited before it could be killed:\n{tail}")
        for batch in range(KILL_AFTER_BATCHES, 1000):
            if not (checkpoint / "offsets" / str(batch)).exists():
                break
            if not (checkpoint / "commits" / str(batch)).exists():
                return batch
        time.sleep(0.02)
    raise AssertionError(f"no batch in flight within {DRIVER_START_SECS} s")

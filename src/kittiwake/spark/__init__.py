"""Kittiwake as a Spark data source: `kittiwake.spark.register(spark)`, then the format `kittiwake`.

    import kittiwake.spark
    kittiwake.spark.register(spark)

    # batch read: tasks as rows, nothing leased
    spark.read.format("kittiwake").option("url", "kw://broker:7370").option("queue", "jobs").load()
    # write: rows become tasks; rows with a pid are idempotent
    df.write.format("kittiwake").option("url", "kw://broker:7370").mode("append").save()
    # stream: leased batch by batch, dequeued once Spark has written the batch
    (spark.readStream.format("kittiwake").option("url", "kw://broker:7370")
        .option("queue", "jobs").option("name", "to-parquet").load())

Modules: `source` (the `DataSource`), `options`, `rows` (the schema),
`batch_reader` and `pid_ranges` (reads), `writer`, and for streams
`stream_reader` (Spark's calls), `stream_consumer` (batches and offsets on
the driver), `stream_log` (batches made durable in the broker) and
`lease_renewer`; `executor_python` (which Python Spark runs the source
with, and the probe that says so when it cannot import kittiwake). Needs PySpark 4 and PyArrow: `pip install kittiwake[spark]`.
"""

from __future__ import annotations

from typing import Any

try:  # PySpark's Python data sources exist from PySpark 4.0 on, and import PyArrow when they run
    import pyarrow  # noqa: F401
    import pyspark.sql.datasource  # noqa: F401
except ImportError as missing:
    raise ImportError(
        f"kittiwake.spark needs PySpark 4 and PyArrow ({missing}): pip install 'kittiwake[spark]'"
    ) from missing

from kittiwake.spark import executor_python  # noqa: E402
from kittiwake.spark.executor_python import ExecutorPythonError  # noqa: E402
from kittiwake.spark.source import FORMAT, KittiwakeDataSource  # noqa: E402

__all__ = ["FORMAT", "ExecutorPythonError", "KittiwakeDataSource", "register"]


def register(spark: Any) -> None:
    """Make the format `kittiwake` available to `spark` (a SparkSession, classic or Spark Connect).

    On a local master whose Python workers nobody chose, the data source's workers run this
    interpreter; elsewhere a one-row probe checks that Spark's Python imports kittiwake, and
    `ExecutorPythonError` says how to fix it if not (`executor_python`)."""
    with executor_python.functions_run(spark, executor_python.workers_python(spark)):
        spark.dataSource.register(KittiwakeDataSource)
        if executor_python.needs_probe(spark):
            executor_python.probe(spark)

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
`lease_renewer`. Needs PySpark 4 and PyArrow: `pip install kittiwake[spark]`.
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

from kittiwake.spark.source import FORMAT, KittiwakeDataSource  # noqa: E402

__all__ = ["FORMAT", "KittiwakeDataSource", "register"]


def register(spark: Any) -> None:
    """Make the format `kittiwake` available to `spark` (a SparkSession)."""
    spark.dataSource.register(KittiwakeDataSource)

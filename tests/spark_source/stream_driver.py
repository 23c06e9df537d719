"""A Spark driver of its own for the killed-driver test: it streams a queue into a Parquet sink
through a slow step, so that a batch is always in flight, and stops once the queue is empty.

    python stream_driver.py URL QUEUE NAME SINK CHECKPOINT ROW_SECS

It prints "started" once the query runs. The test SIGKILLs its process group (this Python
driver, Spark's JVM and their Python workers) while a batch is between Spark's offset log and its
commit log, then restarts the query from the same checkpoint.
"""

from __future__ import annotations

import sys
import time

import kittiwake.spark
from kittiwake import Client
from kittiwake.testing.spark_session import start_spark

TASKS_PER_BATCH = "25"
LEASE_SECS = "30"


def main(url: str, queue: str, name: str, sink: str, checkpoint: str, row_secs: float) -> None:
    from pyspark.sql.functions import udf
    from pyspark.sql.types import BinaryType

    spark = start_spark()
    kittiwake.spark.register(spark)

    def slowly(data: bytes) -> bytes:
        time.sleep(row_secs)
        return data

    frame = (
        spark.readStream.format("kittiwake").option("url", url).option("queue", queue).option("name", name)
        .option("max_tasks_per_batch", TASKS_PER_BATCH).option("lease_secs", LEASE_SECS).load()
    )
    frame = frame.withColumn("data", udf(slowly, BinaryType())("data"))
    query = frame.writeStream.format("parquet").option("path", sink).option("checkpointLocation", checkpoint).start()
    print("started", flush=True)
    with Client(url) as client:
        while query.isActive and client.stats([queue])[0].size > 0:
            time.sleep(0.2)
    query.stop()
    spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:6], float(sys.argv[6]))

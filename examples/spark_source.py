"""Kittiwake as a Spark data source: rows written as tasks, then read back, never leased
(docs/spark-source.md; a test runs it, from a virtualenv's python without activating it).

    kittiwake broker --data ./.kittiwake &
    python spark_source.py                    # or: python spark_source.py kw://HOST:7370
    SPARK_REMOTE=sc://HOST:15002 python spark_source.py   # the same through a Spark Connect server

`kittiwake.spark.register(spark)` adds the format "kittiwake" to the session. On a local master whose
Python workers nobody chose (no PYSPARK_PYTHON, no spark.pyspark.python), it points the data source's
workers at this interpreter, so they import kittiwake as the driver does. Anywhere else (a cluster, a
Connect server) it checks that Spark's Python imports kittiwake, and says how to fix it if not.
"""

from __future__ import annotations

import sys

from pyspark.sql import SparkSession

import kittiwake.spark

url = sys.argv[1] if len(sys.argv) > 1 else "kw://127.0.0.1:7370"
spark = SparkSession.builder.appName("kittiwake-example").getOrCreate()  # local[*], or $SPARK_REMOTE
kittiwake.spark.register(spark)  # once per SparkSession: the format "kittiwake"

orders = spark.createDataFrame([(f"order-{n}", f"amount={n * 10}") for n in range(5)], "pid string, data string")
(orders.write.format("kittiwake")
       .option("url", url)
       .option("queue", "example#orders")   # rows with a pid are idempotent: run it twice, still 5 tasks
       .mode("append").save())

tasks = (spark.read.format("kittiwake")
         .option("url", url)
         .option("queue", "example#orders")
         .load())
for row in tasks.orderBy("pid").select("pid", "data", "state").collect():
    print(row.pid, row.data.decode(), row.state)
spark.stop()

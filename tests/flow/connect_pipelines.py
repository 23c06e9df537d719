"""A flow whose one Spark step keeps an executor busy: a Python UDF sleeping `secs` seconds on one
row. It uses no SparkContext, so it runs on Spark Connect as on a classic session
(`kittiwake spark-worker flow.connect_pipelines:nap`)."""

from __future__ import annotations

import time

from kittiwake.flow import Flow

nap = Flow("nap", lease_secs=10, max_attempts=2)


@nap.step(engine="spark", inputs={"secs": nap.input("secs")})
def sleep_on_an_executor(spark, secs):
    from pyspark.sql.functions import udf

    naps = udf(lambda _: time.sleep(secs) or secs, "long")
    return spark.range(1).select(naps("id").alias("slept"))

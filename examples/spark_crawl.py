"""The Spark data source's three ways in and out of a broker: write rows as tasks, read a queue
without leasing it, stream a queue into Parquet (docs/spark-source.md shows each part).

    kittiwake broker --data ./.kittiwake &
    python spark_crawl.py [kw://HOST:7370] [LAKE_DIRECTORY]
"""

from __future__ import annotations

import sys

from pyspark.sql import SparkSession

import kittiwake.spark

url = sys.argv[1] if len(sys.argv) > 1 else "kw://127.0.0.1:7370"
lake = sys.argv[2] if len(sys.argv) > 2 else "./lake"
spark = SparkSession.builder.appName("kittiwake-crawl").getOrCreate()
kittiwake.spark.register(spark)

pages = [(f"https://example.com/{n}", f"https://example.com/{n}", "eu" if n % 2 else None) for n in range(6)]
df = spark.createDataFrame(pages, "pid string, data string, receiver string")
# --8<-- [start:write]
(df.select("pid", "data", "receiver")  # data: binary or string (sent as UTF-8)
   .write.format("kittiwake")
   .option("url", url)
   .option("queue", "crawl#fetch")       # for rows without a queue column, or with a null queue
   .mode("append").save())
# --8<-- [end:write]

# --8<-- [start:read]
tasks = (spark.read.format("kittiwake")
         .option("url", url)
         .option("queue", "crawl#fetch")   # or .option("pattern", "^crawl#"): every queue it matches
         .option("partitions", 8)          # optional
         .load())
# --8<-- [end:read]
print("to fetch:", tasks.count())

parsed = tasks.selectExpr("pid", "concat('parsed ', cast(data AS string)) AS data")
parsed.write.format("kittiwake").option("url", url).option("queue", "crawl#parsed").mode("append").save()

# --8<-- [start:stream]
query = (spark.readStream.format("kittiwake")
         .option("url", url)
         .option("queue", "crawl#parsed")
         .option("name", "parsed-to-lake")  # the stream's identity: keep it with the checkpoint
         .load()
         .writeStream.format("parquet")
         .option("path", f"{lake}/parsed")
         .option("checkpointLocation", f"{lake}/_checkpoints/parsed")
         .start())
# --8<-- [end:stream]
query.processAllAvailable()  # here: until every task so far is in the lake; a real stream runs on
query.stop()
print("in the lake:", spark.read.parquet(f"{lake}/parsed").count())

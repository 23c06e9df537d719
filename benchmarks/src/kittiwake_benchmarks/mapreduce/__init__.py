"""`kittiwake bench mapreduce`: grep, wordcount and sort on Kittiwake's workers and on PySpark, same input.

* `data`: the datasets (one per kind and partition size, made with gen-data or reused) and the samples.
* `run`: the benchmark — a broker, `kittiwake worker --node` commands and a Spark session, warm-up,
  the reference check, then every app × partition size on both systems, outputs compared.
* `targets`: the targets judged from the result rows (met or not).
* `show`: the table, the targets and the throughput chart.
"""

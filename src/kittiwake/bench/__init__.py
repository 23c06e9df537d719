"""Benchmarks, run from the CLI (`kittiwake bench ops | latency | scale | tasks | peers`).

Each benchmark starts its own broker subprocess on a throwaway directory,
drives it from separate load processes, prints a table, and writes JSON in
one stable shape (`report`). The figures are compared with the seeds' —
TaskMaster §6 Table 1 and §5.3–5.4, Fabriq's push latency, CloudKon and
Albatross on task scheduling — and with the targets of the benchmark issues
(`references`).

* `settings`: every default, declared once (the CLI's options read them too).
* `wire`: the one raw connection `ops`, `latency` and `scale` speak the protocol through.
* `harness`: broker process, load process pool, measurement windows, percentiles.
* `jobs`: the plain data sent to load processes and back.
* `load`: what runs inside a load process (closed-loop connections on raw frames).
* `probes`: sequential probes in a load process (long-poll wake-up, the disk's fsync).
* `processes`: spawning, serving and stopping helper processes.
* `ops`, `latency`, `scale`, `tasks`: one benchmark each.
* `task_processes`: what runs in the worker and submitter processes of `tasks`.
* `spark_peer`: the same null tasks on PySpark `local[2]`, for `tasks`.
* `report`: machine facts, figure records, tables, JSON, CDF plot.
* `cold_restart`: `scale`'s restart over millions of tasks written straight through the store.
* `peers`: Kittiwake's App and workers beside Celery, RQ, Dramatiq, Huey and pgqueuer (a package).
* `mapreduce`: grep, wordcount and sort on `kittiwake worker --node` commands against PySpark on the same
  gen-data input, MB/s against partition size (a package).
"""

"""`kittiwake bench peers`: Kittiwake beside Celery, RQ, Dramatiq, Huey and pgqueuer, in one run.

* `run`: the benchmark — one system at a time, latency, submits, drain.
* `systems`: every system as the benchmark sees it: packages, service, worker commands, changed settings.
* `services`: the Redis database and the PostgreSQL schema the peers use, claimed and emptied.
* `submitter`: the submitting side, in a process of its own per system.
* In the wheel, shared with `bench cluster`: `kittiwake.bench.worker_group` (a system's worker
  commands, started and stopped as process groups) and `kittiwake.bench.tally` (the null task every
  system runs, and the record it leaves of each run).
* `show`: the table and the bar chart.
* `kittiwake_peer`, `celery_peer`, `rq_peer`, `dramatiq_peer`, `huey_peer`, `pgqueuer_peer`: each
  system's task definitions, loaded by its workers, and its `Submitter`.

Importing this package imports no peer: the peers' packages (`kittiwake[peers]`, a dependency of this distribution) are
loaded only by their own worker and submitter processes.
"""

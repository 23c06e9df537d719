"""Kittiwake's benchmarks against other systems, a distribution beside the `kittiwake` wheel.

Its commands join `kittiwake bench` through the entry points of `kittiwake.bench` (`commands`);
they run on the broker's own harness (`kittiwake.bench`: a broker subprocess, load processes,
reports, the references the figures are held against) and read their defaults from `settings`.

* `tasks`, `task_processes`: worker processes running null, sleep and mixed tasks, against
  CloudKon, Albatross and `spark_peer` (the same null tasks on PySpark `local[2]`).
* `peers`: Kittiwake's App and workers beside Celery, RQ, Dramatiq, Huey and pgqueuer (a package);
  `huey_reference` is `bench producer`'s Huey row, through its submitter.
* `celery_transport`, `celery_transport_app`: one Celery app on the kombu transport `kittiwake://`
  and on Redis.
* `workers`: the App and `kittiwake worker` with its default flags (a package).
* `flows`, `flow_probe`, `join_load`: joins, a Spark step's start, the main job's flow against one
  PySpark script.
* `mapreduce`: grep, wordcount and sort on `kittiwake worker --node` commands against PySpark on
  the same gen-data input (a package).
* `sqs`: boto3 against the broker's SQS API and moto_server; `dashboard`: the HTTP port's views
  over many queues.
"""

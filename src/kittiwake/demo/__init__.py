"""The main job (`kittiwake demo`): a data pipeline on Spark through the broker, and the classic demo.

`main_job` runs it: `dataset` generates the event logs and users, `shop_flow`
is the flow (its steps call the Spark functions of `transforms`, under the
rules of `rules`), `services` starts the broker and workers, `live` draws the
run's progress, `step_times` says where the time went, `check` recomputes the
report in plain Python. `plain_spark` is the same work as one PySpark script
(the peer of `kittiwake bench flows`). `documents` is the classic broker-only
demo (`kittiwake demo --classic`).
"""

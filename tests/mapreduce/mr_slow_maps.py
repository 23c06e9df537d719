"""The MapReduce tasks with a short lease and maps that take a while, for the kill test
(`mapreduce.mr_slow_maps:app`): a killed worker's maps come back within seconds."""

from __future__ import annotations

import time
from typing import Any

from kittiwake.app import App
from kittiwake.mapreduce import tasks

LEASE_SECS = 2.0
MAP_PAUSE_SECS = 0.03

app = App()


@app.task(name=tasks.MAP_TASK, queue=tasks.QUEUE, lease_secs=LEASE_SECS, max_attempts=5)
def map_partition(spec: dict[str, Any], index: int, path: str) -> dict[str, Any]:
    time.sleep(MAP_PAUSE_SECS)
    return tasks._map_partition(app, spec, index, path)


@app.task(name=tasks.REDUCE_TASK, queue=tasks.QUEUE, lease_secs=LEASE_SECS, max_attempts=5)
def reduce_partition(spec: dict[str, Any], reducer: int) -> dict[str, Any]:
    return tasks._reduce_partition(app, spec, reducer)


@app.task(name=tasks.BARRIER_TASK, queue=tasks.QUEUE, lease_secs=LEASE_SECS, ignore_result=True)
def barrier() -> None:
    return None

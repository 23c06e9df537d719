"""The MapReduce tasks with one run that stalls, for the failed-job tests (`mapreduce.mr_stalled:app`):
map 0 stalls before it reads its partition, or every reducer stalls after it fetched its input,
its partial part file open (MR_STALL = "map" or "reduce", MR_STALL_SECS), so the run is still going
when its job fails and the driver cancels it."""

from __future__ import annotations

import os
import time
from typing import Any, Iterable, Iterator

from kittiwake.app import App
from kittiwake.mapreduce import tasks

STALL = os.environ.get("MR_STALL", "map")
STALL_SECS = float(os.environ.get("MR_STALL_SECS", "4"))

app = App()


class _StalledReduce:
    """A kernel module's stand-in whose `reduce` stalls before its first chunk, its input read."""

    def __init__(self, kernel: Any) -> None:
        self._kernel = kernel

    def __getattr__(self, name: str) -> Any:
        return getattr(self._kernel, name)

    def reduce(self, segments: Iterable[bytes], spec: Any) -> Iterator[bytes]:
        chunks = list(self._kernel.reduce(segments, spec))  # every location read, every segment fetched
        time.sleep(STALL_SECS)
        yield from chunks


if STALL == "reduce":  # this worker process serves this test app only
    tasks.KERNELS.update({name: _StalledReduce(kernel) for name, kernel in tasks.KERNELS.items()})  # type: ignore[misc]


@app.task(name=tasks.MAP_TASK, queue=tasks.QUEUE, lease_secs=30, max_attempts=1)
def map_partition(spec: dict[str, Any], index: int, path: str) -> dict[str, Any]:
    if STALL == "map" and index == 0:
        time.sleep(STALL_SECS)
    return tasks._map_partition(app, spec, index, path)


@app.task(name=tasks.REDUCE_TASK, queue=tasks.QUEUE, lease_secs=30, max_attempts=1)
def reduce_partition(spec: dict[str, Any], reducer: int) -> dict[str, Any]:
    return tasks._reduce_partition(app, spec, reducer)


@app.task(name=tasks.BARRIER_TASK, queue=tasks.QUEUE, lease_secs=30, ignore_result=True)
def barrier() -> None:
    return None

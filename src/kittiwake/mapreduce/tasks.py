"""The map, reduce and barrier tasks of a MapReduce job, as a Kittiwake app workers run.

    kittiwake worker kittiwake.mapreduce.tasks:app --node n0 -c 2

* map (`map_partition`): reads its partition in blocks of whole lines or
  records (`read_blocks`), runs the app's map kernel on each block into a
  `MapOutput` (memory, spilling to disk), then records the output's
  `Location` in the job's locations queue in the broker at pid = the map
  index (Albatross keeps it in ZHT) — in the same atomic update that finishes
  the map (`TaskContext.enqueue_on_success`): a location is recorded exactly
  when its map is done, never by a run that was lost or failed, and costs no
  round trip of its own.
* reduce (`reduce_partition`): blocked by the broker until its maps finished
  (`after=`), reads their locations (`peek`, in pages), fetches its segment
  of each, runs the app's reduce kernel and writes ``part-r-NNNNN`` under a
  temporary name renamed into place: a reduce run twice writes the same file.
* a map or reduce run that no longer holds its task — its job failed and the
  driver cancelled the job's tasks, or the job ended without it — writes no
  intermediates (the driver made the job's directories and removed them; a map
  does not make them again) and no part file: each checks that it still holds
  its lease (`holds_its_task`, one `get`) after writing, and removes what it
  wrote if not (`JobEnded`).
* barrier: an empty task standing for a group of maps when a job has more
  maps than one task may name as parents (`Limits.max_batch`).

Each returns what it did (seconds of run time, bytes, spills, the process),
which the driver adds up. The tasks wait in the ``mapreduce`` queue (map
tasks in ``mapreduce@<node>`` when their partition has a node).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from types import ModuleType
from typing import Any, Iterator

from kittiwake.app import App
from kittiwake.app.context import TaskContext, current_task
from kittiwake.errors import BadRequest, TaskNotFound
from kittiwake.mapreduce import grep, sort, wordcount
from kittiwake.mapreduce.allocator import keep_freed_memory
from kittiwake.mapreduce.intermediate import Location, MapOutput, gather_segments, read_segments
from kittiwake.mapreduce.spec import GREP, SORT, WORDCOUNT, JobSpec
from kittiwake.model import TaskState

QUEUE = "mapreduce"
MAP_TASK = "kittiwake.mapreduce.map"
REDUCE_TASK = "kittiwake.mapreduce.reduce"
BARRIER_TASK = "kittiwake.mapreduce.barrier"
DEFAULT_LEASE_SECS = 30.0
MAX_ATTEMPTS = 3
LOCATIONS_PAGE = 1_000
KERNELS: dict[str, ModuleType] = {WORDCOUNT: wordcount, GREP: grep, SORT: sort}
LEASED = TaskState.LEASED.value


def read_blocks(path: str, block_bytes: int, unit: bytes | int) -> Iterator[bytes]:
    """The file in blocks of about `block_bytes`, each ending at a line break (`unit` = b"\\n") or
    holding whole records (`unit` = the record size); a last line without a break comes last."""
    carry = b""
    with open(path, "rb") as handle:
        while True:
            chunk = handle.read(block_bytes)
            if not chunk:
                break
            data = carry + chunk if carry else chunk
            cut = data.rfind(unit) + 1 if isinstance(unit, bytes) else len(data) - len(data) % unit
            if cut:
                yield data[:cut] if cut < len(data) else data
            carry = data[cut:]
    if carry:
        yield carry


def segments_per_map(spec: JobSpec) -> int:
    return 1 if spec.app == GREP else spec.reducers


def output_path(spec: JobSpec, reducer: int) -> Path:
    return Path(spec.out_dir) / f"part-r-{reducer:05d}{KERNELS[spec.app].OUTPUT_SUFFIX}"


def location_pid(index: int) -> str:
    return f"{index:08d}"


class JobEnded(Exception):
    """This run of a map or reduce no longer holds its task: the job was cancelled or ended, or a
    later delivery took the task over. It wrote nothing (or removed what it wrote)."""


def holds_its_task(app: App, task: TaskContext) -> bool:
    """Whether the running delivery still holds its task's lease: the task is in its queue, leased,
    by this delivery. A task cancelled (the driver cancels a failed job's tasks), finished by another
    delivery, or leased again after this run's lease expired is not found, or shows another state
    or a later delivery."""
    try:
        view = app.client.get(task.queue, task.pid)
    except TaskNotFound:
        return False
    return view.state == LEASED and view.deliveries == task.deliveries


def _map_partition(app: App, spec_record: dict[str, Any], index: int, path: str) -> dict[str, Any]:
    started = time.perf_counter()
    spec = JobSpec.from_dict(spec_record)
    if not isinstance(index, int) or not 0 <= index < spec.maps:
        raise BadRequest(f"map index {index!r} out of range for {spec.maps} maps")
    kernel = KERNELS[spec.app]
    # the driver made the job's directories and removes them when the job ends: a run that outlived
    # its job finds them gone and writes nothing (make_dirs=False) ...
    output = MapOutput(f"map-{index:08d}", segments_per_map(spec), Path(spec.memory_dir), Path(spec.spill_dir),
                       spec.spill_bytes, make_dirs=False)
    size = 0
    for block in read_blocks(path, spec.block_bytes, kernel.UNIT):
        size += len(block)
        for reducer, segment in enumerate(kernel.map_block(block, spec)):
            output.add(reducer, segment)
    location = output.finish()
    task = current_task()
    if not holds_its_task(app, task):  # ... and one that wrote while the driver cleaned up removes its files
        output.discard()
        raise JobEnded(f"map {index} of job {spec.job} lost its task (cancelled, or the job ended); "
                       "its output is removed")
    task.enqueue_on_success(spec.locations_queue, location.encode(), pid=location_pid(index))
    return {"seconds": time.perf_counter() - started, "bytes": size, "output_bytes": location.bytes,
            "spilled": location.spilled, "process": os.getpid(), "queue": task.queue,
            "node": os.environ.get("KITTIWAKE_NODE")}


def locations(app: App, spec: JobSpec, maps: range) -> Iterator[Location]:
    """The recorded output locations of `maps`, in map order; raises if one is missing."""
    expected = maps.start
    while expected < maps.stop:
        page = app.client.peek(spec.locations_queue, min(LOCATIONS_PAGE, maps.stop - expected),
                               location_pid(expected))
        pids = [view.pid for view in page]
        if pids != [location_pid(index) for index in range(expected, expected + len(page))] or not page:
            missing = next((index for index, pid in enumerate(pids, expected) if pid != location_pid(index)),
                           expected + len(page))
            raise BadRequest(f"map {missing} of job {spec.job} recorded no output location")
        for view in page:
            yield Location.decode(view.data)
        expected += len(page)


def _reduce_partition(app: App, spec_record: dict[str, Any], reducer: int) -> dict[str, Any]:
    started = time.perf_counter()
    spec = JobSpec.from_dict(spec_record)
    if not isinstance(reducer, int) or not 0 <= reducer < spec.reducers:
        raise BadRequest(f"reducer {reducer!r} out of range for {spec.reducers} reducers")
    grep_app = spec.app == GREP
    maps = spec.maps_of_reducer(reducer) if grep_app else range(spec.maps)
    segment = 0 if grep_app else reducer
    fetched = 0

    def segments() -> Iterator[bytes | memoryview]:
        nonlocal fetched
        if getattr(KERNELS[spec.app], "WHOLE_INPUT", False):  # one buffer, no joining copy
            whole = gather_segments(locations(app, spec, maps), segment)
            fetched += len(whole)
            yield whole
            return
        for location in locations(app, spec, maps):
            for data in read_segments(location, segment):
                fetched += len(data)
                yield data

    target = output_path(spec, reducer)
    partial = target.with_name(f".{target.name}.{os.getpid()}.partial")
    written = 0
    try:
        with open(partial, "wb") as handle:
            for chunk in KERNELS[spec.app].reduce(segments(), spec):
                handle.write(chunk)
                written += len(chunk)
        if not holds_its_task(app, current_task()):  # no part file from a run that outlived its job
            raise JobEnded(f"reducer {reducer} of job {spec.job} lost its task (cancelled, or the job ended); "
                           "it writes no part file")
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    os.replace(partial, target)
    return {"seconds": time.perf_counter() - started, "bytes": fetched, "output_bytes": written,
            "process": os.getpid(), "queue": current_task().queue}


def _barrier() -> None:
    return None


def make_app(url: str | None = None, *, lease_secs: float = DEFAULT_LEASE_SECS, **app_options: Any) -> App:
    """An app with the three tasks; workers load the module's `app`, drivers make their own. The
    process keeps freed memory for its next block (`allocator.keep_freed_memory`)."""
    keep_freed_memory()
    app = App(url, **app_options)

    def map_partition(spec: dict[str, Any], index: int, path: str) -> dict[str, Any]:
        """Map partition file `path` (map number `index`) and record where its output is."""
        return _map_partition(app, spec, index, path)

    def reduce_partition(spec: dict[str, Any], reducer: int) -> dict[str, Any]:
        """Fetch reducer `reducer`'s segments of every map output and write its part file."""
        return _reduce_partition(app, spec, reducer)

    app.task(name=MAP_TASK, queue=QUEUE, lease_secs=lease_secs, max_attempts=MAX_ATTEMPTS)(map_partition)
    app.task(name=REDUCE_TASK, queue=QUEUE, lease_secs=lease_secs, max_attempts=MAX_ATTEMPTS)(reduce_partition)
    app.task(name=BARRIER_TASK, queue=QUEUE, lease_secs=lease_secs, ignore_result=True)(_barrier)
    return app


app = make_app()

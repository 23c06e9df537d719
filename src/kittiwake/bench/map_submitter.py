"""The submitting side of `kittiwake bench workers` and `bench cluster`'s user path, a process of its own.

It imports the bench's app (`user_app`) the way a user's program does and
submits with one `app.map(f, items, chunk=...)` call. The benchmark sends
this process one job at a time (`processes.ProcessPool`):

* `Open`: set the environment (the broker's URL), import the app, and
  connect (a `ping`), so that no figure counts the connection.
* `Map`: `app.map(f, items, chunk=chunk)`, items being `count` copies of a
  payload or one task's seconds each; with `keep_results`, then
  `app.results(handles)`. It answers with the wall-clock times
  (`time.time()`, the clock the tally uses) of the first submit, of each
  chunk's answer, and of the last result collected.
* `CLOSE`: `app.close()`.

When each chunk was answered is read through the items themselves:
`app.map` sends a chunk as soon as it holds `chunk` prepared tasks, and takes
the next item only once that request was answered, so the moment item
`k × chunk` is taken is the moment chunk `k - 1` was acknowledged; the last
chunk's answer is the moment `app.map` returns. The progress counter shows
tasks acknowledged.
"""

from __future__ import annotations

import importlib
import os
import time
from dataclasses import dataclass, field
from multiprocessing.connection import Connection as Pipe
from multiprocessing.sharedctypes import Synchronized
from typing import Any, Iterator, Sequence

from kittiwake.bench.processes import serve_jobs

APP_MODULE = "kittiwake.bench.user_app"
CLOSE = "close"


@dataclass(frozen=True)
class Open:
    env: dict[str, str]


@dataclass(frozen=True)
class Map:
    """One `app.map` call of `task` (a name of `user_app.TASKS`)."""

    task: str
    chunk: int
    count: int = 0  # copies of `payload`
    payload: str = ""
    seconds: Sequence[float] | None = None  # or one task per item, its argument (sleep tasks)
    keep_results: bool = False
    results_timeout_secs: float = 600.0


@dataclass
class Mapped:
    submitted_at: float  # just before app.map was called
    acknowledged: list[tuple[float, int]] = field(default_factory=list)  # (when answered, tasks) per chunk
    returned_at: float = 0.0  # app.map returned
    results: int = 0  # results collected (keep_results)
    collected_at: float | None = None  # app.results returned

    @property
    def tasks(self) -> int:
        return sum(count for _, count in self.acknowledged)


class _Session:
    """What this process holds between jobs: the app module."""

    module: Any = None


def _noting(items: Sequence[Any] | Iterator[Any], chunk: int, mapped: Mapped, counter: Synchronized) -> Iterator[Any]:
    """The items, noting when each full chunk was answered (see the module docstring)."""
    for index, item in enumerate(items):
        if index and index % chunk == 0:
            mapped.acknowledged.append((time.time(), chunk))
            counter.value = index
        yield item


def _map(job: Map, counter: Synchronized) -> Mapped:
    module = _Session.module
    app, task = module.app, module.TASKS[job.task]
    if job.seconds is not None:
        items: Any = list(job.seconds)
        total = len(items)
    else:
        items = (job.payload for _ in range(job.count))
        total = job.count
    mapped = Mapped(time.time())
    handles = app.map(task, _noting(items, job.chunk, mapped, counter), chunk=job.chunk)
    mapped.returned_at = time.time()
    last = total - sum(count for _, count in mapped.acknowledged)
    if last > 0:
        mapped.acknowledged.append((mapped.returned_at, last))
    counter.value = total
    if job.keep_results:
        mapped.results = len(app.results(handles, timeout=job.results_timeout_secs))
        mapped.collected_at = time.time()
    return mapped


def _run(job: Any, counter: Synchronized) -> Any:
    if isinstance(job, Open):
        os.environ.update(job.env)
        _Session.module = importlib.import_module(APP_MODULE)
        _Session.module.app.client.ping()
        return None
    if isinstance(job, Map):
        return _map(job, counter)
    if job == CLOSE:
        module, _Session.module = _Session.module, None
        if module is not None:
            module.app.close()
        return None
    raise ValueError(f"unknown job {job!r}")


def serve(pipe: Pipe, counter: Synchronized) -> None:
    """The submitter process: run each job the parent sends (see `processes.serve_jobs`)."""
    serve_jobs(pipe, counter, lambda job: _run(job, counter))

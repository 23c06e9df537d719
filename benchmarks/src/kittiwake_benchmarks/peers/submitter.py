"""The submitting side of `kittiwake bench peers`, run in a process of its own per system.

A system's module (`kittiwake_peer`, `celery_peer`, …) has a `Submitter`
class with the tool's own calls behind five methods: `submit(payload)` (one
task), `submit_many(payloads)` (its bulk API), `waiting()` (tasks left in
its queue), `purge()` (drop them) and `close()`; Kittiwake's kept-results row
adds `collect(timeout)` and `forget()`.
The benchmark sends this process one job at a time (`processes.ProcessPool`):

* `Open`: set the environment (broker URL, tally file), import the module,
  make its `Submitter`.
* `Submit`: `count` tasks one by one from this one thread, or in calls of
  `chunk` through the bulk API, or one by one from `threads` threads at once
  (`count` split between them, started together); the time of the whole
  loop. A submitter whose `threaded_submit` attribute gives a reason cannot
  share its client between threads: nothing is submitted, and the reason
  is returned.
* `Collect`: wait for every result (the kept-results row's drain ends here).
* `Sample`: submit → start latency. One task at a time on an idle system:
  read the clock, submit, wait until the tally has one more record, take
  its start; then pause `gap_secs` and go on. Submit time is taken before
  the call, so the call's own round trip is part of the figure, as it is
  of what a user waits for.
* `WAITING`: tasks left in the queue, asked again for up to `SETTLE_SECS`
  until none is (the tally is written inside the task, a moment before the
  tool acknowledges it).
* `PURGE`, `CLOSE`.

The progress counter shows tasks submitted or samples taken.
"""

from __future__ import annotations

import importlib
import os
import threading
import time
from array import array
from dataclasses import dataclass, field
from multiprocessing.connection import Connection as Pipe
from multiprocessing.sharedctypes import Synchronized
from pathlib import Path
from typing import Any

from kittiwake.bench import tally
from kittiwake.bench.processes import serve_jobs

WAITING = "waiting"
PURGE = "purge"
CLOSE = "close"
SETTLE_SECS = 5.0
PROGRESS_EVERY = 25  # submits between updates of the progress counter
SAMPLE_POLL_SECS = 0.0005  # how often a sample looks at the tally file


@dataclass(frozen=True)
class Open:
    module: str
    options: dict[str, Any]
    env: dict[str, str]


@dataclass(frozen=True)
class Submit:
    count: int
    payload: str
    bulk: bool = False
    chunk: int = 1000
    threads: int = 1


@dataclass(frozen=True)
class Collect:
    timeout_secs: float


@dataclass(frozen=True)
class Sample:
    samples: int
    payload: str
    tally_path: str
    gap_secs: float
    timeout_secs: float  # for one task to start


@dataclass
class Submitted:
    tasks: int
    seconds: float
    reason: str | None = None  # why nothing was submitted

    @property
    def tasks_per_sec(self) -> float | None:
        return self.tasks / self.seconds if self.seconds > 0 else None


@dataclass
class Collected:
    results: int
    finished_at: float  # time.time() when the last result was in


@dataclass
class Sampled:
    latencies_ns: array = field(default_factory=lambda: array("q"))


class _Session:
    """What this process holds between jobs: the system's Submitter."""

    submitter: Any = None


def _submit(job: Submit, counter: Synchronized) -> Submitted:
    submitter = _Session.submitter
    if job.threads > 1:
        return _submit_from_threads(submitter, job, counter)
    begin = time.perf_counter()
    if job.bulk:
        done = 0
        while done < job.count:
            size = min(job.chunk, job.count - done)
            submitter.submit_many([job.payload] * size)
            done += size
            counter.value = done
    else:
        for index in range(job.count):
            submitter.submit(job.payload)
            if index % PROGRESS_EVERY == 0:
                counter.value = index
    seconds = time.perf_counter() - begin
    counter.value = job.count
    return Submitted(job.count, seconds)


def _submit_from_threads(submitter: Any, job: Submit, counter: Synchronized) -> Submitted:
    """`job.count` single submits from `job.threads` threads, all released at once."""
    unsupported = getattr(submitter, "threaded_submit", None)
    if unsupported:
        return Submitted(0, 0.0, reason=unsupported)
    shares = [job.count // job.threads + (1 if index < job.count % job.threads else 0) for index in range(job.threads)]
    start = threading.Barrier(job.threads + 1)
    counting = threading.Lock()  # the shared counter has no lock of its own
    failures: list[BaseException] = []

    def submit_share(share: int) -> None:
        start.wait()
        try:
            for index in range(share):
                submitter.submit(job.payload)
                if index % PROGRESS_EVERY == 0:
                    with counting:
                        counter.value += min(PROGRESS_EVERY, share - index)
        except BaseException as exc:  # raised in the submitter process once every thread ended
            failures.append(exc)

    threads = [threading.Thread(target=submit_share, args=(share,), name=f"submit-{index}")
               for index, share in enumerate(shares)]
    counter.value = 0
    for thread in threads:
        thread.start()
    start.wait()
    begin = time.perf_counter()
    for thread in threads:
        thread.join()
    seconds = time.perf_counter() - begin
    if failures:
        raise failures[0]
    counter.value = job.count
    forget = getattr(submitter, "forget", None)
    if forget is not None:  # a submitter that keeps handles waits for none of these
        forget()
    return Submitted(job.count, seconds)


def _sample(job: Sample, counter: Synchronized) -> Sampled:
    submitter = _Session.submitter
    path = Path(job.tally_path)
    sampled = Sampled()
    for index in range(job.samples):
        before = tally.count(path)
        submitted_at = time.time()
        submitter.submit(job.payload)
        deadline = time.monotonic() + job.timeout_secs
        while tally.count(path) <= before:
            if time.monotonic() > deadline:
                raise TimeoutError(f"sample {index}: the task did not start within {job.timeout_secs:.0f}s")
            time.sleep(SAMPLE_POLL_SECS)
        started_at = tally.start_of(path, before)
        assert started_at is not None
        sampled.latencies_ns.append(int((started_at - submitted_at) * 1e9))
        counter.value = index + 1
        time.sleep(job.gap_secs)
    forget = getattr(submitter, "forget", None)
    if forget is not None:  # a submitter that keeps handles waits for none of the samples' results
        forget()
    return sampled


def _run(job: Any, counter: Synchronized) -> Any:
    if isinstance(job, Open):
        os.environ.update(job.env)
        module = importlib.import_module(job.module)
        _Session.submitter = module.Submitter(**job.options)
        return getattr(_Session.submitter, "bulk_api", None)
    if isinstance(job, Submit):
        return _submit(job, counter)
    if isinstance(job, Sample):
        return _sample(job, counter)
    if isinstance(job, Collect):
        results = _Session.submitter.collect(job.timeout_secs)
        return Collected(results, time.time())
    if job == WAITING:
        deadline = time.monotonic() + SETTLE_SECS
        while True:
            waiting = _Session.submitter.waiting()
            if not waiting or time.monotonic() > deadline:
                return waiting
            time.sleep(0.1)
    if job == PURGE:
        return _Session.submitter.purge()
    if job == CLOSE:
        submitter, _Session.submitter = _Session.submitter, None
        if submitter is not None:
            submitter.close()
        return None
    raise ValueError(f"unknown job {job!r}")


def serve(pipe: Pipe, counter: Synchronized) -> None:
    """The submitter process: run each job the parent sends (see `processes.serve_jobs`)."""
    serve_jobs(pipe, counter, lambda job: _run(job, counter))

"""What runs inside the processes of `kittiwake bench tasks`: workers and the submitter.

The benchmark is CloudKon's design on one broker (CloudKon §3.2.1): a
submitter puts tasks into a shared task queue, in bundles; worker processes
pull them with long-poll batch leases, run them, and finish each batch with
one atomic update that dequeues the batch and enqueues its results into the
submitter's reply queue, in the same consistency group; the submitter reads
its results back from that queue. No result database, no central dispatcher.

Task data is a msgpack array `[reply_queue, index, submit_ns, sleep_us]`: the
submitter reads `time.monotonic_ns()` just before it sends the bundle (one
clock for every process on the machine), so submit→start latency is the
worker's clock at the start of the task minus that. A result is `[index,
submit_ns, start_ns, end_ns]`, and a result message a list of them: with
`results="batch"` one message carries the results of a whole batch (bundled
like the tasks), with `results="task"` there is one message per task.

Workers, theory of operation. A worker holds at most two batches: the one it
runs and the next, leased while it runs (prefetch); the update that finishes
a batch is not waited for either (up to MAX_UPDATES_IN_FLIGHT of them), so
no round trip is spent idle. The size of the next lease
follows the tasks: about `BATCH_TARGET_SECS` of work at the mean task time
measured so far, between 1 and `max_batch` — 500 null tasks, one 128 ms
task — so a worker never sits on work another worker could be running while
it is idle for longer than about one batch. A worker runs one task at a
time; `--workers N` processes are N slots.

Each process is spawned once and serves jobs from the parent over a pipe:
`WorkerJob` runs until the parent sends `STOP` (checked whenever a lease
comes back empty, at most `LEASE_WAIT_SECS` apart), `SubmitJob` until all its
results are back. Either answers with its report.
"""

from __future__ import annotations

import asyncio
import time
from array import array
from collections import deque
from dataclasses import dataclass, field
from multiprocessing.connection import Connection as Pipe
from multiprocessing.sharedctypes import Synchronized
from typing import Any

import msgspec

from kittiwake.bench.processes import cpu_secs, serve_jobs
from kittiwake.bench.settings import WORK_LEASE_SECS
from kittiwake.client import AsyncClient, LeasedTask

STOP = "stop"
LEASE_WAIT_SECS = 0.5  # long-poll of an idle worker: how often it looks for STOP
BATCH_TARGET_SECS = 0.02  # work per lease once the mean task time is known
SUBMIT_WINDOW = 2  # bundles in flight from the submitter
COLLECT_BATCH = 5000  # result messages leased per request by the submitter
DEQUEUE_EVERY = 2000  # the submitter dequeues results it has read in batches of this many messages
DEQUEUE_EVERY_SECS = 0.05  # or this often
FIRST_BUNDLE = 16  # the submitter's bundles double from this size up to the job's bundle
RESULT_WAIT_SECS = 1.0
MAX_IDLE_RESULT_SECS = 120.0  # the submitter gives up after this long without a result
MAX_UPDATES_IN_FLIGHT = 3  # a worker's finished batches not yet confirmed by the broker
PROGRESS_EVERY = 200  # a worker publishes its count at least every this many tasks


class TaskData(msgspec.Struct, array_like=True):
    """The data of one benchmark task."""

    reply_queue: str
    index: int
    submit_ns: int
    sleep_us: int  # 0: a null task


class TaskResult(msgspec.Struct, array_like=True):
    """What a worker sends back for one task."""

    index: int
    submit_ns: int
    start_ns: int
    end_ns: int


_encode = msgspec.msgpack.Encoder().encode
_decode_task = msgspec.msgpack.Decoder(TaskData).decode
_decode_results = msgspec.msgpack.Decoder(list[TaskResult]).decode


def null_task() -> None:
    """The null task: a Python function that does nothing (Spark's peer maps the same)."""
    return None


def run_task(data: TaskData) -> None:
    if data.sleep_us:
        time.sleep(data.sleep_us / 1e6)
    else:
        null_task()


# ------------------------------------------------------------------- jobs


@dataclass(frozen=True)
class WorkerJob:
    """Pull tasks from `queue` until told to stop."""

    url: str
    queue: str
    name: str
    results: str  # "batch": one result message per batch; "task": one per task
    max_batch: int


@dataclass
class WorkerReport:
    tasks: int = 0
    batches: int = 0
    empty_leases: int = 0
    largest_batch: int = 0
    busy_secs: float = 0.0  # time spent inside tasks
    starved_secs: float = 0.0  # waiting for a lease that then brought tasks (the prefetch came late)
    first_start_ns: int = 0  # the first task began
    last_end_ns: int = 0  # the last task ended
    cpu_secs: float = 0.0
    wall_secs: float = 0.0


@dataclass(frozen=True)
class SubmitJob:
    """Submit `tasks` tasks to `queue` and collect their results from `reply_queue`.

    `sleep_us` is every task's sleep, or one per task (`durations_us`).
    With `rate_per_sec` the tasks go one per request at that pace (open loop);
    without it in bundles of `bundle`, as fast as the broker takes them."""

    url: str
    queue: str
    reply_queue: str
    tasks: int
    bundle: int
    sleep_us: int = 0
    durations_us: array | None = None
    rate_per_sec: float | None = None


@dataclass
class SubmitReport:
    tasks: int = 0
    results: int = 0
    first_submit_ns: int = 0
    last_submit_ns: int = 0
    last_result_ns: int = 0
    latencies_ns: array = field(default_factory=lambda: array("q"))  # submit → start, per task
    run_ns: int = 0  # sum over the tasks of start → end in the worker
    cpu_secs: float = 0.0
    error: str | None = None

    @property
    def seconds(self) -> float:
        """First submit → last result back."""
        return (self.last_result_ns - self.first_submit_ns) / 1e9 if self.results else 0.0


# ----------------------------------------------------------------- worker


def next_batch_size(mean_task_secs: float | None, max_batch: int) -> int:
    """Tasks to lease next: about BATCH_TARGET_SECS of work, at least one."""
    if mean_task_secs is None:
        return 1
    if mean_task_secs <= 0:
        return max_batch
    return max(1, min(max_batch, int(BATCH_TARGET_SECS / mean_task_secs)))


def _results_for(leased: list[LeasedTask], bundle: bool) -> tuple[list[dict[str, Any]], float]:
    """Run every task of a batch; the result messages for the reply queues and the time spent in tasks."""
    by_reply: dict[str, list[TaskResult]] = {}
    busy_ns = 0
    for task in leased:
        data = _decode_task(task.data)
        start_ns = time.monotonic_ns()
        run_task(data)
        end_ns = time.monotonic_ns()
        busy_ns += end_ns - start_ns
        by_reply.setdefault(data.reply_queue, []).append(TaskResult(data.index, data.submit_ns, start_ns, end_ns))
    messages: list[dict[str, Any]] = []
    for reply_queue, results in by_reply.items():
        if bundle:
            messages.append({"queue": reply_queue, "data": _encode(results)})
        else:
            messages.extend({"queue": reply_queue, "data": _encode([result])} for result in results)
    return messages, busy_ns / 1e9


async def work(job: WorkerJob, pipe: Pipe, counter: Synchronized) -> WorkerReport:
    report = WorkerReport()
    cpu_before = cpu_secs()
    wall_before = time.monotonic()
    client = AsyncClient(job.url, worker=job.name)
    bundle = job.results == "batch"
    mean_task_secs: float | None = None
    updates: deque[asyncio.Future[Any]] = deque()

    def lease(max_tasks: int) -> asyncio.Future[list[LeasedTask]]:
        return asyncio.ensure_future(client.lease(job.queue, max_tasks=max_tasks, lease_secs=WORK_LEASE_SECS,
                                                  wait_secs=LEASE_WAIT_SECS))

    try:
        leasing = lease(1)
        published = 0
        while True:
            waiting_ns = time.monotonic_ns()
            leased = await leasing
            if not leased:
                report.empty_leases += 1
                if pipe.poll():
                    pipe.recv()
                    break
                leasing = lease(next_batch_size(mean_task_secs, job.max_batch))
                continue
            if report.tasks:  # the wait for the very first batch is not starvation
                report.starved_secs += (time.monotonic_ns() - waiting_ns) / 1e9
            leasing = lease(next_batch_size(mean_task_secs, job.max_batch))
            await asyncio.sleep(0)  # the prefetch leaves before the batch runs
            started_ns = time.monotonic_ns()
            report.first_start_ns = report.first_start_ns or started_ns
            messages, busy_secs = _results_for(leased, bundle)
            report.last_end_ns = time.monotonic_ns()
            count = len(leased)
            batch_mean = busy_secs / count
            mean_task_secs = batch_mean if mean_task_secs is None else 0.5 * (mean_task_secs + batch_mean)
            while updates and (updates[0].done() or len(updates) >= MAX_UPDATES_IN_FLIGHT):
                await updates.popleft()  # raises if the broker refused it
            updates.append(asyncio.ensure_future(client.update(dequeue=leased, enqueue=messages)))
            report.tasks += count
            report.batches += 1
            report.busy_secs += busy_secs
            report.largest_batch = max(report.largest_batch, count)
            if report.tasks - published >= PROGRESS_EVERY or count < PROGRESS_EVERY:
                counter.value = published = report.tasks
        while updates:
            await updates.popleft()
        counter.value = report.tasks
    finally:
        await client.close()
    report.cpu_secs = cpu_secs() - cpu_before
    report.wall_secs = time.monotonic() - wall_before
    return report


# -------------------------------------------------------------- submitter


def _duration_us(job: SubmitJob, index: int) -> int:
    return job.durations_us[index] if job.durations_us is not None else job.sleep_us


async def _collect(client: AsyncClient, job: SubmitJob, report: SubmitReport, counter: Synchronized) -> None:
    """Lease results from the reply queue until every task has one.

    Results stay leased (for WORK_LEASE_SECS) until dequeued, and they are dequeued
    in batches — every DEQUEUE_EVERY messages or DEQUEUE_EVERY_SECS — so reading
    one result does not cost the broker a commit of its own."""
    dequeuing: asyncio.Future[Any] | None = None
    read: list[LeasedTask] = []
    last_seen = last_dequeue = time.monotonic()
    while report.results < job.tasks:
        leased = await client.lease(job.reply_queue, max_tasks=COLLECT_BATCH, lease_secs=WORK_LEASE_SECS,
                                    wait_secs=RESULT_WAIT_SECS)
        now_ns = time.monotonic_ns()
        now = time.monotonic()
        if not leased:
            if now - last_seen > MAX_IDLE_RESULT_SECS:
                raise TimeoutError(f"no result for {MAX_IDLE_RESULT_SECS:.0f}s; "
                                   f"{report.results} of {job.tasks} results back")
            continue
        last_seen = now
        latencies = report.latencies_ns
        for message in leased:
            results = _decode_results(message.data)
            for result in results:
                latencies.append(result.start_ns - result.submit_ns)
                report.run_ns += result.end_ns - result.start_ns
            report.results += len(results)
        report.last_result_ns = now_ns
        counter.value = report.results
        read.extend(leased)
        if len(read) >= DEQUEUE_EVERY or now - last_dequeue >= DEQUEUE_EVERY_SECS:
            if dequeuing is not None:
                await dequeuing
            dequeuing = asyncio.ensure_future(client.dequeue(read))
            read = []
            last_dequeue = now
    if dequeuing is not None:
        await dequeuing
    if read:
        await client.dequeue(read)


async def _submit_bundles(client: AsyncClient, job: SubmitJob, report: SubmitReport) -> None:
    window = asyncio.Semaphore(SUBMIT_WINDOW)
    sending: list[asyncio.Future[Any]] = []
    reply_queue, queue = job.reply_queue, job.queue

    async def send(tasks: list[dict[str, Any]]) -> None:
        try:
            await client.enqueue_many(tasks)
        finally:
            window.release()

    first = 0
    size = min(FIRST_BUNDLE, job.bundle)  # small first bundles: the workers start within a millisecond
    while first < job.tasks:
        await window.acquire()
        submit_ns = time.monotonic_ns()
        if not report.first_submit_ns:
            report.first_submit_ns = submit_ns
        report.last_submit_ns = submit_ns
        tasks = [{"queue": queue, "data": _encode(TaskData(reply_queue, index, submit_ns, _duration_us(job, index)))}
                 for index in range(first, min(job.tasks, first + size))]
        sending.append(asyncio.ensure_future(send(tasks)))
        await asyncio.sleep(0)  # let it leave now
        report.tasks += len(tasks)
        first += size
        size = min(job.bundle, size * 2)
    await asyncio.gather(*sending)


async def _submit_paced(client: AsyncClient, job: SubmitJob, report: SubmitReport) -> None:
    """One task per request at `rate_per_sec`, open loop: the next leaves on time whatever the replies do."""
    assert job.rate_per_sec
    interval_ns = int(1e9 / job.rate_per_sec)
    sending: list[asyncio.Future[Any]] = []
    start_ns = time.monotonic_ns()
    for index in range(job.tasks):
        due_ns = start_ns + index * interval_ns
        wait_ns = due_ns - time.monotonic_ns()
        if wait_ns > 0:
            await asyncio.sleep(wait_ns / 1e9)
        submit_ns = time.monotonic_ns()
        if not report.first_submit_ns:
            report.first_submit_ns = submit_ns
        report.last_submit_ns = submit_ns
        data = _encode(TaskData(job.reply_queue, index, submit_ns, _duration_us(job, index)))
        sending.append(asyncio.ensure_future(client.enqueue(job.queue, data)))
        report.tasks += 1
        if len(sending) >= 1000:
            await asyncio.gather(*sending)
            sending.clear()
    await asyncio.gather(*sending)


async def submit(job: SubmitJob, counter: Synchronized) -> SubmitReport:
    report = SubmitReport()
    cpu_before = cpu_secs()
    client = AsyncClient(job.url)
    try:
        await client.ping()  # connected before the clock starts
        collecting = asyncio.ensure_future(_collect(client, job, report, counter))
        if job.rate_per_sec:
            await _submit_paced(client, job, report)
        else:
            await _submit_bundles(client, job, report)
        await collecting
    finally:
        await client.close()
    report.cpu_secs = cpu_secs() - cpu_before
    return report


# ------------------------------------------------------------ process main


def serve(pipe: Pipe, counter: Synchronized) -> None:
    """A worker or submitter process: run each job the parent sends; answer ("ok", report) or ("error", text)."""

    def run(job: Any) -> Any:
        if isinstance(job, WorkerJob):
            return asyncio.run(work(job, pipe, counter))
        if isinstance(job, SubmitJob):
            return asyncio.run(submit(job, counter))
        raise ValueError(f"unknown job {job!r}")

    # a stop that arrived after its job ended is skipped
    serve_jobs(pipe, counter, run, ignore=lambda job: job == STOP)

"""Running one job of a step, whatever the engine: from a leased job to the tasks that finish it.

`FlowJobs.prepare` decodes a leased job, finds its flow and step, reads the
run's record (cached: it never changes) and says whether the run was
cancelled (such a job is dequeued unrun). The engine calls the step's
function with the inputs (`arguments`); `items_of` checks what came back
against the step's outputs (one item, or many for a split); `finish` builds
the update's enqueues (`tokens.job_outputs`), which the caller sends in the
same atomic update that dequeues the job.

`FlowJobs.complete` runs a prepared job through the reuse index
(`kittiwake.flow.reuse`): a job of a step that declares ``reuse`` looks its
fingerprint up first and, on a hit, is finished with the recorded outputs
without running (its ``done`` marker says which run it reused); one that
runs adds its record to the update that finishes it.

The broker reads that come before a job runs — the run's record, whether
the run ended, the reuse lookup — are repeated after a `Transient` failure
(the broker restarting, a lost connection) for up to `READ_RETRY_SECS`, as
the settler repeats its updates: the worker still holds the job's lease, and
a read changes nothing, so a broker restart at that moment costs the job no
attempt. Past that the error is raised: the Spark worker hands the job
back unrun, a python worker's runner counts a failed attempt.

`Finisher`: after a job's update, a background thread asks whether the run
still holds a job; the one that finds it holds none ends the run
(`runs.finish_run`). Requests for one run coalesce, so a burst of jobs costs
one check.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

from kittiwake import errors
from kittiwake.client import LeasedTask
from kittiwake.client.retries import retrying
from kittiwake.client.interfaces import QueueClient
from kittiwake.flow import context as step_context
from kittiwake.flow import reuse
from kittiwake.flow.context import StepContext
from kittiwake.flow.dataset import FUSED_KIND, Dataset
from kittiwake.flow.definition import OPTIONAL, SEQUENCE, FlowDefinition, Step
from kittiwake.flow.fingerprints import job_fingerprint, step_version
from kittiwake.flow.records import RunRecord
from kittiwake.flow.runs import ended_of, finish_run, load_record
from kittiwake.flow.tokens import JobInput, decode_job, job_outputs
from kittiwake.model import group_of

log = logging.getLogger("kittiwake.flow")

RECORDS_CACHED = 1000
MAX_REASON_CHARS = 1000
READ_RETRY_SECS = 60.0  # as long as the settler repeats an update (`worker.outcomes.RETRY_FOR_SECS`)



@dataclass(slots=True)
class PreparedJob:
    """A leased job with everything needed to run it; `skip` says why it must not run."""

    task: LeasedTask
    flow: FlowDefinition
    step: Step
    job: JobInput
    record: RunRecord | None
    context: StepContext | None
    skip: str | None = None
    started_at: float = field(default_factory=time.monotonic)
    reused_from: str | None = None  # the run whose outputs this job took (reuse hit)
    unrecorded: str | None = None  # why its outputs, made, must not go into the reuse index

    def arguments(self, convert: Callable[[Dataset], Any], merge: Callable[[list[Dataset]], Any]) -> dict[str, Any]:
        """Keyword arguments by input port: `convert` of each token's dataset; a merge port's
        datasets, in sequence order, go to `merge`; a missing optional port is None."""
        datasets = {port: [token.dataset for token in self.job.tokens.get(port) or []] for port in self.step.inputs}
        return step_arguments(self.step, self.job.key, datasets, convert, merge)

    def call(self, first: Any, arguments: Mapping[str, Any]) -> Any:
        """Call the step's function inside the job's `StepContext`."""
        return call_step(self.step, self.context, first, arguments)


def step_arguments(step: Step, key: str, datasets: Mapping[str, Sequence[Dataset]], convert: Callable[[Dataset], Any],
                   merge: Callable[[list[Dataset]], Any]) -> dict[str, Any]:
    """`step`'s keyword arguments for a job at `key` from its input datasets by port (see
    `PreparedJob.arguments`)."""
    arguments: dict[str, Any] = {}
    for port, spec in step.inputs.items():
        given = datasets.get(port) or []
        if spec.mode == SEQUENCE:
            arguments[port] = merge(list(given))
        elif not given:
            if spec.mode != OPTIONAL:
                raise errors.BadRequest(f"job {key} of {step.name!r} has no token at port {port!r}")
            arguments[port] = None
        else:
            arguments[port] = convert(given[0])
    return arguments


def call_step(step: Step, context: StepContext | None, first: Any, arguments: Mapping[str, Any]) -> Any:
    """Call `step`'s function inside `context` (what `current_step()` returns there)."""
    token = step_context.enter(context) if context is not None else None
    try:
        return step.function(first, **arguments)
    finally:
        if token is not None:
            step_context.leave(token)


def items_of(step: Step, value: Any) -> list[dict[str, Any]]:
    """What a step returned, as one dict port -> data per output item (see `Flow.step`)."""
    if step.split:
        if isinstance(value, (Mapping, Dataset, str, bytes)) or not isinstance(value, Iterable) or _is_dataframe(value):
            raise errors.BadRequest(
                f"split step {step.name!r} must return or yield its items (a list or a generator), "
                f"not {type(value).__name__}"
            )
        raw = list(value)
    else:
        raw = [value]
    items: list[dict[str, Any]] = []
    for item in raw:
        if len(step.outputs) == 1:
            items.append({step.outputs[0]: item})
            continue
        if not isinstance(item, Mapping):
            raise errors.BadRequest(
                f"step {step.name!r} has outputs {', '.join(step.outputs)}: return a dict port -> data, "
                f"not {type(item).__name__}"
            )
        unknown = [port for port in item if port not in step.outputs]
        if unknown:
            raise errors.BadRequest(f"step {step.name!r} has no output port {', '.join(map(str, unknown))}")
        items.append(dict(item))
    return items


def _is_dataframe(value: Any) -> bool:
    return type(value).__name__ == "DataFrame" and hasattr(value, "schema")


def failure_reason(error: BaseException) -> str:
    text = f"STEP_FAILED {type(error).__name__}: {error}"
    return text[:MAX_REASON_CHARS]


class FlowJobs:
    """Prepares and finishes the jobs of some flows' steps for one worker (see the module docstring)."""

    def __init__(self, flows: Sequence[FlowDefinition], client: QueueClient) -> None:
        self.flows = {flow.names.group: flow for flow in flows}
        self.client = client
        self._records: OrderedDict[tuple[str, str], RunRecord] = OrderedDict()
        self._ended: OrderedDict[tuple[str, str], str] = OrderedDict()
        self._lock = threading.Lock()

    def job_queues(self, engine: str) -> list[str]:
        return [queue for flow in self.flows.values() for queue in flow.job_queues(engine)]

    def prepare(self, task: LeasedTask) -> PreparedJob:
        flow = self.flows.get(group_of(task.queue))
        if flow is None:
            raise errors.BadRequest(f"job {task.queue}/{task.pid} is of no flow this worker runs")
        job = decode_job(task.data)
        step = flow.step_of_join(job.join)
        record = self._record(flow, job.run)
        if record is None:
            return PreparedJob(task, flow, step, job, None, None, skip=f"run {job.run} has no record")
        ended = self._ended_state(flow, record)
        if ended is not None:
            return PreparedJob(task, flow, step, job, record, None, skip=f"run {job.run} is {ended}")
        context = StepContext(flow=flow.name, step=step.name, run=job.run, key=job.key, indices=job.indices,
                              data_dir=record.data_dir, attempt=task.attempts + 1, lease=task.lease_id)
        return PreparedJob(task, flow, step, job, record, context)

    def finish(self, prepared: PreparedJob, items: Sequence[Mapping[str, Dataset]], worker: str | None = None) -> list[dict[str, Any]]:
        """The enqueues of the update that finishes a job that ran (or reused outputs)."""
        done: dict[str, Any] = {"secs": round(time.monotonic() - prepared.started_at, 3), "worker": worker,
                                "attempt": prepared.task.attempts + 1}
        if prepared.reused_from is not None:
            done["reused"] = prepared.reused_from
        return job_outputs(prepared.flow, prepared.step, prepared.job, items, done=done)

    def complete(self, prepared: PreparedJob, compute: Callable[[], Sequence[Mapping[str, Dataset]]],
                 worker: str | None = None, *, deferring: bool = False) -> list[dict[str, Any]]:
        """Run a prepared job through the reuse index (see the module docstring): the enqueues of
        the update that finishes it; `compute` runs the step and returns its output items.
        `deferring`: this worker would hand the job's consumers a recipe rather than run it
        (`plan_fusion`); a record holding recipes is taken only then — otherwise (the wiring
        changed, a `--no-fuse` worker) the job runs and writes its outputs."""
        step = prepared.step
        fingerprint = version = None
        if step.reuse:
            version = self.version_of(step)
            fingerprint = self.fingerprint(prepared, version)
            fresh = prepared.record is not None and prepared.record.fresh
            if fingerprint is not None and not fresh:
                hit = retrying(lambda: reuse.lookup(self.client, prepared.flow, step, fingerprint), READ_RETRY_SECS)
                if hit is not None and not deferring and any(
                        dataset.kind == FUSED_KIND for item in hit.datasets() for dataset in item.values()):
                    hit = None
                if hit is not None:
                    prepared.reused_from = hit.run
                    return self.finish(prepared, hit.datasets(), worker)
        items = list(compute())
        if prepared.context is not None:
            prepared.context.outputs_written()
        enqueue = self.finish(prepared, items, worker)
        if fingerprint is not None and version is not None and prepared.unrecorded is None:
            enqueue.append(reuse.record_task(prepared.flow, step, fingerprint, version, prepared.job.run,
                                             prepared.job.key, [dict(item) for item in items]))
        return enqueue

    def version_of(self, step: Step) -> str:
        """The step's version for reuse (`fingerprints.step_version`, computed once per step)."""
        return step_version(step.function, step.version)

    def fingerprint(self, prepared: PreparedJob, version: str) -> str | None:
        """The job's fingerprint (`fingerprints.job_fingerprint`), None when an input has none."""
        ports = {port: (spec.mode, [token.dataset for token in prepared.job.tokens.get(port) or []])
                 for port, spec in prepared.step.inputs.items()}
        return job_fingerprint(version, prepared.job.indices, ports)

    def record_of(self, task: LeasedTask) -> RunRecord | None:
        """The record of a job's run (cached), None when it cannot be read."""
        flow = self.flows.get(group_of(task.queue))
        try:
            return None if flow is None else self._record(flow, decode_job(task.data).run)
        except errors.KittiwakeError:
            return None

    def _record(self, flow: FlowDefinition, run: str) -> RunRecord | None:
        key = (flow.names.group, run)
        with self._lock:
            record = self._records.get(key)
        if record is not None:
            return record
        try:
            record = retrying(lambda: load_record(self.client, flow.names.group, run), READ_RETRY_SECS)
        except errors.TaskNotFound:
            return None
        with self._lock:
            self._records[key] = record
            while len(self._records) > RECORDS_CACHED:
                self._records.popitem(last=False)
        return record

    def _ended_state(self, flow: FlowDefinition, record: RunRecord) -> str | None:
        key = (flow.names.group, record.run)
        with self._lock:
            if key in self._ended:
                return self._ended[key]
        ended = retrying(lambda: ended_of(self.client, record), READ_RETRY_SECS)
        if ended is None:
            return None
        with self._lock:
            self._ended[key] = ended.state
            while len(self._ended) > RECORDS_CACHED:
                self._ended.popitem(last=False)
        return ended.state


class Finisher:
    """Ends runs that hold no job any more, in a background thread (see the module docstring)."""

    def __init__(self, client: QueueClient) -> None:
        self.client = client
        self._pending: OrderedDict[tuple[str, str], RunRecord] = OrderedDict()
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self.finished = 0

    def check(self, record: RunRecord | None) -> None:
        """Look soon whether `record`'s run holds a job still; end it if not."""
        if record is None:
            return
        with self._lock:
            self._pending[(record.group, record.run)] = record
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="kittiwake-flow-finisher", daemon=True)
                self._thread.start()
        self._wake.set()

    def close(self, timeout: float = 10.0) -> None:
        """Check what is pending, then stop."""
        self._stopping = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _loop(self) -> None:
        while True:
            self._wake.wait(1.0)
            self._wake.clear()
            while True:
                with self._lock:
                    if not self._pending:
                        break
                    _, record = self._pending.popitem(last=False)
                self._finish(record)
            if self._stopping:
                return

    def _finish(self, record: RunRecord) -> None:
        for attempt in range(20):
            try:
                if finish_run(self.client, record) is not None:
                    self.finished += 1
                    log.info("run %s of flow %s is done", record.run, record.flow)
                return
            except errors.Transient as error:
                log.warning("checking whether run %s is done: %s", record.run, error)
                time.sleep(min(2.0, 0.1 * 2**attempt))
            except errors.KittiwakeError as error:
                log.error("checking whether run %s is done: %s", record.run, error)
                return

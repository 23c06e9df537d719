"""Runs of a flow: start one, follow it, end it, and collect what it leaves behind.

Starting (`start_run`): the joins are declared (idempotent), then ONE
atomic update enqueues the flow's input tokens (key = run id) and the run's
record in ``…#runs``. The tokens come first and carry ``unless`` = the
record, so starting the same run id twice (``run_id=``), even at once,
enqueues its tokens once. A token that completes a join starts its job in
that same commit, so from the start on, a running run always holds a job
(queued or running) until its last job is finished: every job's outputs and
its dequeue are one update.

State (`run_status`), derived from the broker, never stored twice:

* an end in ``…#runs.ended`` (done, cancelled): that;
* else a dead-lettered job of the run in ``…#steps.<engine>.dead``: failed
  (`retry` requeues them; the run goes on where it stopped);
* else a job of the run in a job queue: running;
* else: done — and whoever sees that first (a worker after a job, a handle's
  status, the CLI) finishes the run (`finish_run`).

Finishing writes the end (with the outputs, jobs done per step and the
tokens left waiting — an optional input that came too late, an item a step
left out of a merged sequence — which the end's reason names) and collects
garbage: those tokens in every join (``purge_join``) and the run's
``done.<run>`` queue.
Kept: the record, the end, the ``outputs.<run>`` queue (the results' dataset
references) and every file under the run's data directory. Cancelling
writes a cancelled end first, then cancels and purges the run's jobs (queued,
running: their workers lose the lease; dead ones too) and collects the same
garbage; a worker that leases a job of a cancelled run drops it unrun.

Runs are keyed apart (the run id leads every key), so any number go at once.
"""

from __future__ import annotations

import os
import time
from collections import deque
from typing import Any, Callable, Iterator, Mapping

from kittiwake import errors
from kittiwake.client import Client, DeadLetterPage, ItemOutcome, TaskView
from kittiwake.client.interfaces import QueueClient, QueueReads
from kittiwake.constants import DEAD_PID_HEADER, DEAD_REASON_HEADER, JOIN_HEADER
from kittiwake.flow import records
from kittiwake.flow.dataset import Dataset, as_dataset
from kittiwake.flow.definition import OPTIONAL, REQUIRED, SEQUENCE, FlowDefinition
from kittiwake.flow.names import FlowNames, check_run_id, new_run_id
from kittiwake.flow.records import CANCELLED, DONE, FAILED, RUNNING, Ended, RunRecord, RunStatus, StepProgress
from kittiwake.flow.tokens import decode, input_tokens, parse_output_pid

PAGE = 1000
RUNS_PATTERN = r"^flow\.[A-Za-z0-9_-]+#runs$"


def client_of(client: QueueClient | str | None) -> tuple[QueueClient, bool]:
    """(client, owned): a client as given (a `kittiwake.Client`, or another `QueueClient`), or a
    `Client` made from a URL (or $KITTIWAKE_URL for None); BadRequest for anything else."""
    if client is None or isinstance(client, str):
        return Client(client), True
    if isinstance(client, QueueClient):
        return client, False
    raise errors.BadRequest(f"give a kittiwake.Client or a broker URL, not {client!r:.80}")


# ------------------------------------------------------------------ joins


def declare_joins(flow: FlowDefinition, client: QueueClient) -> dict[str, str]:
    """Declare each step's join (its ports and job queue); returns join -> what the broker did."""
    if not flow.steps:
        raise errors.BadRequest(f"flow {flow.name!r} has no steps")
    done: dict[str, str] = {}
    for step in flow:
        done[step.join] = client.declare_join(
            step.join, step.job_queue,
            required=step.ports(REQUIRED), optional=step.ports(OPTIONAL), sequence=step.ports(SEQUENCE),
            max_attempts=step.max_attempts,
        )
    return done


# ---------------------------------------------------------------- starting


def start_run(
    flow: FlowDefinition, client: QueueClient | str | None, inputs: Mapping[str, object], *,
    data_dir: str | os.PathLike[str], run_id: str | None = None, fresh: bool = False,
) -> RunHandle:
    broker, owned = client_of(client)
    if not isinstance(inputs, Mapping):
        raise errors.BadRequest("inputs must be a mapping of flow input name -> Dataset")
    unknown = sorted(set(inputs) - set(flow.inputs))
    missing = sorted(set(flow.inputs) - set(inputs))
    if unknown or missing:
        raise errors.BadRequest(
            f"flow {flow.name!r} takes inputs {sorted(flow.inputs)}"
            + (f"; unknown: {unknown}" if unknown else "") + (f"; missing: {missing}" if missing else "")
        )
    datasets = {name: as_dataset(value) for name, value in inputs.items()}
    run = check_run_id(run_id) if run_id is not None else new_run_id()
    directory = data_dir_of(data_dir)
    declare_joins(flow, broker)
    names = flow.names
    record = records.record_of(flow, run, time.time(), directory,
                               {name: dataset.to_wire() for name, dataset in datasets.items()}, fresh=fresh)
    tokens = input_tokens(flow, run, datasets)
    for token in tokens:
        token["unless"] = [(names.runs_queue, run)]
    broker.update(enqueue=[*tokens, {"queue": names.runs_queue, "pid": run, "data": records.encode(record)}])
    return RunHandle(broker, names.group, run, owned=owned)


def data_dir_of(value: object) -> str:
    if isinstance(value, (str, os.PathLike)) and os.fspath(value):
        text = os.fspath(value)
        return text if "://" in text else os.path.abspath(text)
    raise errors.BadRequest(f"data_dir must be a path or URI every worker can reach, not {value!r}")


def attach_run(flow: FlowDefinition, client: QueueClient | str | None, run_id: str) -> RunHandle:
    broker, owned = client_of(client)
    broker.get(flow.names.runs_queue, check_run_id(run_id))  # TaskNotFound: no such run
    return RunHandle(broker, flow.names.group, run_id, owned=owned)


# ------------------------------------------------------------------ reading


def load_record(client: QueueReads, group: str, run: str) -> RunRecord:
    return records.decode_record(client.get(f"{group}#runs", run).data)


def find_record(client: QueueReads, run: str, flow: str | None = None) -> RunRecord:
    """The record of run `run` in flow `flow`, or in whichever flow has it (TaskNotFound: none)."""
    check_run_id(run)
    groups = [FlowNames(flow).group] if flow else [q.queue.rsplit("#", 1)[0] for q in client.list_queues(RUNS_PATTERN)]
    for group in groups:
        try:
            return load_record(client, group, run)
        except errors.TaskNotFound:
            continue
    raise errors.TaskNotFound(f"no run {run!r}" + (f" in flow {flow!r}" if flow else ""))


def ended_of(client: QueueReads, record: RunRecord) -> Ended | None:
    try:
        return records.decode_ended(client.get(f"{record.group}#runs.ended", record.run).data)
    except errors.TaskNotFound:
        return None


def scan_run(client: QueueReads, queue: str, run: str, *, dead: bool = False) -> Iterator[TaskView]:
    """Every task of `queue` whose pid is of run `run` (see `names.belongs_to_run`), in pid order.

    Pids of other runs may sort between ``run`` and ``run/`` (``run.x``), so the
    run's pids are read as up to three ranges: ``run`` itself, ``run/…`` and, in a
    dead-letter queue, ``run~…``."""
    first = client.peek(queue, 1, run)
    if first and first[0].pid == run:
        yield first[0]
    yield from scan_prefix(client, queue, run + "/")
    if dead:
        yield from scan_prefix(client, queue, run + "~")


def scan_prefix(client: QueueReads, queue: str, prefix: str = "") -> Iterator[TaskView]:
    """The tasks of `queue` whose pids start with `prefix` (every task: ""), a page at a time."""
    start, seen = prefix or None, None
    while True:
        page = client.peek(queue, PAGE, start)
        for view in page:
            if view.pid == seen:
                continue  # each page starts at the previous page's last pid
            if not view.pid.startswith(prefix):
                return
            yield view
        if len(page) < PAGE:
            return
        start = seen = page[-1].pid


def has_live_job(client: QueueReads, record: RunRecord) -> bool:
    """Whether a job of the run waits or runs (at most two peeks per job queue).

    The peeks are not one snapshot: jobs finish and start others between them. They go through
    the job queues in step order (`RunRecord.job_queues`), the way jobs flow, so a job that moves
    on is met again further down: were a job alive after the last peek but missed, it started
    after its queue was peeked, so its parent, in an earlier queue, was alive after that one's
    peek and was missed too, and so on up to the run's first job, which was there before the
    first peek. In any other order a job can start behind the peeks (a merge's job starts while
    its last input's queue is peeked) and the run would be ended with it still to run."""
    for queue in record.job_queues():
        for start in (record.run, record.run + "/"):
            page = client.peek(queue, 1, start)
            if page and (page[0].pid == record.run or page[0].pid.startswith(record.run + "/")):
                return True
    return False


def live_jobs(client: QueueReads, record: RunRecord) -> int:
    return sum(1 for queue in record.job_queues() for _ in scan_run(client, queue, record.run))


def dead_jobs(client: QueueReads, record: RunRecord) -> list[TaskView]:
    return [view for queue in record.job_queues() for view in scan_run(client, f"{queue}.dead", record.run, dead=True)]


def run_status(client: QueueReads, record: RunRecord, *, finish: bool = True) -> RunStatus:
    """The run's state and each step's progress (see the module docstring); with `finish` and a
    `QueueClient` (a reader cannot write), a run found done but not finished yet is finished here."""
    ended = ended_of(client, record)
    progress = {step.name: StepProgress(step=step.name, engine=step.engine) for step in record.steps}
    status = RunStatus(run=record.run, flow=record.flow, state=RUNNING, created_at=record.created_at,
                       data_dir=record.data_dir, steps=list(progress.values()))
    if ended is not None:
        status.state, status.ended_at, status.outputs, status.reason = ended.state, ended.ended_at, ended.outputs, ended.reason
        for name, count in ended.done_jobs.items():
            if name in progress:
                progress[name].done = count
        for name, count in ended.reused_jobs.items():
            if name in progress:
                progress[name].reused = count
        for name, count in ended.tokens_left.items():
            if name in progress:
                progress[name].waiting = count
        return status
    live = 0
    for queue in record.job_queues():
        for view in scan_run(client, queue, record.run):
            step = record.step_of_join((view.headers or {}).get(JOIN_HEADER))
            if step is not None and step in progress:
                live += 1
                if view.state == "leased":
                    progress[step].running += 1
                else:
                    progress[step].queued += 1
    for view in dead_jobs(client, record):
        headers = view.headers or {}
        step = record.step_of_join(headers.get(JOIN_HEADER))
        if step is not None and step in progress:
            progress[step].dead += 1
        status.dead.append(records.DeadJob(step=step, key=headers.get(DEAD_PID_HEADER, view.pid),
                                           reason=headers.get(DEAD_REASON_HEADER)))
    for name, count in waiting_tokens(client, record).items():
        progress[name].waiting = count
    done, reused = _done_counts(client, record)
    for name, count in done.items():
        if name in progress:
            progress[name].done = count
            progress[name].reused = reused.get(name, 0)
    if status.dead:
        status.state = FAILED
        status.reason = f"{len(status.dead)} job(s) dead-lettered"
    elif live == 0:
        if not finish or not isinstance(client, QueueClient):
            status.state = DONE
            return status
        finish_run(client, record)
        return run_status(client, record, finish=False)
    return status


def _done_counts(client: QueueReads, record: RunRecord) -> tuple[dict[str, int], dict[str, int]]:
    """(step -> jobs done, step -> of those, jobs that reused an earlier run's outputs)."""
    counts: dict[str, int] = {}
    reused: dict[str, int] = {}
    for view in scan_prefix(client, f"{record.group}#done.{record.run}"):
        name = view.pid.split("/", 1)[0]
        counts[name] = counts.get(name, 0) + 1
        if _reused(view.data):
            reused[name] = reused.get(name, 0) + 1
    return counts, reused


def _reused(data: bytes) -> bool:
    try:
        marker = decode(data)
    except Exception:  # a marker is msgpack; anything else counts as a job that ran
        return False
    return isinstance(marker, dict) and bool(marker.get("reused"))


def outputs_of(client: QueueReads, record: RunRecord) -> dict[str, list[Any]]:
    """"step.port" -> [[indices, dataset wire], ...] from ``outputs.<run>``, in index order."""
    outputs: dict[str, list[Any]] = {}
    for view in scan_prefix(client, f"{record.group}#outputs.{record.run}"):
        name, indices = parse_output_pid(view.pid)
        outputs.setdefault(name, []).append([indices, decode(view.data)["dataset"]])
    return outputs


# --------------------------------------------------------------- finishing


def finish_run(client: QueueClient, record: RunRecord) -> RunRecord | None:
    """End a run that holds no job any more: write its end (done, outputs, jobs per step) and
    collect its garbage. Returns None when it did nothing: the run had ended, or a job of it
    lives or is dead. The job queues are looked at again after the dead-letter queues: a dead job
    that `retry` puts back between the two looks is in neither where it was looked for."""
    if (ended_of(client, record) is not None or has_live_job(client, record) or dead_jobs(client, record)
            or has_live_job(client, record)):
        return None
    left = waiting_tokens(client, record)
    done, reused = _done_counts(client, record)
    ended = Ended(state=DONE, ended_at=time.time(), done_jobs=done, reused_jobs=reused,
                  outputs=outputs_of(client, record), tokens_left=left,
                  reason=f"{sum(left.values())} token(s) never met the rest of their job's inputs "
                  f"({', '.join(f'{step}: {count}' for step, count in left.items())})" if left else None)
    client.enqueue(f"{record.group}#runs.ended", records.encode(ended), pid=record.run)
    collect_garbage(client, record)
    return record


def waiting_tokens(client: QueueReads, record: RunRecord) -> dict[str, int]:
    """Step -> tokens of the run waiting at its ports (only steps with some)."""
    counts: dict[str, int] = {}
    for shape in record.steps:
        count = sum(1 for queue, _mode in shape.ports.values() for _ in scan_run(client, queue, record.run))
        if count:
            counts[shape.name] = count
    return counts


def collect_garbage(client: QueueClient, record: RunRecord) -> int:
    """Purge the run's tokens from every join and drop its ``done.<run>`` queue; returns tokens purged."""
    purged = 0
    for step in record.steps:
        try:
            while (count := client.purge_join(step.join, record.run)) > 0:
                purged += count
        except errors.TaskNotFound:
            pass  # the join was dropped: its tokens are not the flow's any more
    client.delete_queue(f"{record.group}#done.{record.run}")
    return purged


def cancel_run(client: QueueClient, record: RunRecord, reason: str | None = None) -> RunStatus:
    """Cancel a run (see the module docstring); an ended run is left as it is (its garbage is collected again)."""
    done, reused = _done_counts(client, record)
    ended = Ended(state=CANCELLED, ended_at=time.time(), done_jobs=done, reused_jobs=reused,
                  outputs=outputs_of(client, record), reason=reason or "cancelled")
    client.enqueue(f"{record.group}#runs.ended", records.encode(ended), pid=record.run)  # collapses if ended
    if (current := ended_of(client, record)) is not None and current.state == CANCELLED:
        for queue in record.job_queues():
            live = [(view.queue, view.pid) for view in scan_run(client, queue, record.run)]
            for start in range(0, len(live), PAGE):
                client.cancel(live[start:start + PAGE], "RUN_CANCELLED")
            dead = [view.pid for view in scan_run(client, f"{queue}.dead", record.run, dead=True)]
            for start in range(0, len(dead), PAGE):
                _dead_pages(client.purge_dead, queue, dead[start:start + PAGE])
    collect_garbage(client, record)
    return run_status(client, record)


def retry_run(client: QueueClient, record: RunRecord) -> int:
    """Requeue the run's dead-lettered jobs (attempts from zero); returns how many went back."""
    ended = ended_of(client, record)
    if ended is not None:
        raise errors.BadRequest(f"run {record.run} has ended ({ended.state}): nothing to retry")
    requeued = 0
    for queue in record.job_queues():
        dead = [view.pid for view in scan_run(client, f"{queue}.dead", record.run, dead=True)]
        for start in range(0, len(dead), PAGE):
            outcomes = _dead_pages(client.requeue_dead, queue, dead[start:start + PAGE])
            requeued += sum(1 for outcome in outcomes if outcome.ok)
    return requeued


def _dead_pages(call: Callable[..., DeadLetterPage], queue: str, pids: list[str]) -> list[ItemOutcome]:
    """Every outcome of a requeue or purge of `pids`, asked a page at a time (the broker bounds each)."""
    outcomes: list[ItemOutcome] = []
    after: str | None = None
    while True:
        page = call(queue, pids, after_pid=after, limit=PAGE)
        outcomes += page.outcomes
        if page.next_pid is None:
            return outcomes
        after = page.next_pid


def list_runs(flow: FlowDefinition | str | None, client: QueueClient | str | None, *, limit: int = 100) -> list[RunStatus]:
    """Status of the runs of one flow (a Flow or its name), or of every flow for None, oldest first."""
    broker, owned = client_of(client)
    try:
        return read_runs(broker, flow, limit=limit)
    finally:
        if owned:
            broker.close()


def read_runs(
    reader: QueueReads, flow: FlowDefinition | str | None, *, limit: int = 100, finish: bool = True,
    newest: bool = False,
) -> list[RunStatus]:
    """`list_runs` over any `QueueReads` (with `finish` and a `QueueClient`, a run found done is finished). `newest`: the newest
    `limit` runs of each flow (every record is read, a page at a time), newest first."""
    if flow is None:
        groups = [q.queue.rsplit("#", 1)[0] for q in reader.list_queues(RUNS_PATTERN)]
    else:
        groups = [flow.names.group if isinstance(flow, FlowDefinition) else FlowNames(flow).group]
    found: list[RunStatus] = []
    for group in groups:
        queue = f"{group}#runs"
        views = deque(scan_prefix(reader, queue), maxlen=limit) if newest else reader.peek(queue, max(1, min(limit, PAGE)))
        for view in views:
            found.append(run_status(reader, records.decode_record(view.data), finish=finish))
    found.sort(key=lambda status: status.created_at, reverse=newest)
    return found[:limit]


# ------------------------------------------------------------------ handle


class RunHandle:
    """A run of a flow: `id`, and `status()`, `wait()`, `outputs()`, `cancel()`, `retry()`."""

    def __init__(self, client: QueueClient, group: str, run: str, *, owned: bool = False) -> None:
        self.client = client
        self.group = group
        self.id = run
        self._owned = owned
        self._record: RunRecord | None = None

    def __repr__(self) -> str:
        return f"<RunHandle {self.group} {self.id}>"

    @property
    def record(self) -> RunRecord:
        if self._record is None:
            self._record = load_record(self.client, self.group, self.id)
        return self._record

    def status(self) -> RunStatus:
        """The run's state (running, done, failed, cancelled) and each step's progress."""
        return run_status(self.client, self.record)

    def wait(self, timeout: float | None = None, *, poll_secs: float = 0.2) -> RunStatus:
        """Wait until the run is done, failed or cancelled; TimeoutError after `timeout` seconds.
        A broker that is away meanwhile (a restart) is waited for. A run that ended done or
        cancelled has its garbage collected when this returns."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            try:
                status = self.status()
            except errors.Transient:  # the broker restarts: ask again
                status = None
            if status is not None and status.finished:
                if status.state in (DONE, CANCELLED):
                    # the end is written before the garbage is collected (by whoever finished the
                    # run, maybe still at it, maybe dead since): once wait returns, it is collected
                    collect_garbage(self.client, self.record)
                return status
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"run {self.id} is still {status.state if status else 'unknown'} after {timeout} s")
            time.sleep(poll_secs)

    def outputs(self) -> dict[str, Dataset | list[Dataset]]:
        """The run's results by "step.port": a Dataset, or a list in sequence order for an output
        inside a sequence. Read from the end once the run is done, from the broker before."""
        ended = ended_of(self.client, self.record)
        raw = ended.outputs if ended is not None else outputs_of(self.client, self.record)
        result: dict[str, Dataset | list[Dataset]] = {}
        for name, items in raw.items():
            ordered = sorted(items, key=lambda item: list(item[0]))
            if len(ordered) == 1 and not ordered[0][0]:
                result[name] = Dataset.from_wire(ordered[0][1])
            else:
                result[name] = [Dataset.from_wire(item[1]) for item in ordered]
        return result

    def cancel(self, reason: str | None = None) -> RunStatus:
        """Cancel the run: no job of it runs again; its tokens and jobs are removed."""
        return cancel_run(self.client, self.record, reason)

    def retry(self) -> int:
        """Requeue the run's dead-lettered jobs; returns how many."""
        return retry_run(self.client, self.record)

    def close(self) -> None:
        """Close the client if this handle made it (from a URL)."""
        if self._owned:
            self.client.close()

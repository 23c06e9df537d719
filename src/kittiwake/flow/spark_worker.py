"""The Spark worker: one long-lived SparkSession running flow step jobs, several at once.

``kittiwake spark-worker MODULE:FLOW`` runs a `SparkWorker`. Starting a JVM
and a SparkSession costs seconds, so the worker holds ONE session for its
whole life and runs every Spark step job of its flows on it:

* a leaser long-polls the job queues of the flows' Spark steps for as many
  jobs as slots are free (no prefetch: a job waits in the broker, where
  another worker can take it, rather than here);
* `concurrency` slot threads each run one job at a time
  (`spark_steps.run_spark_job`), each in its own FAIR scheduler pool
  (``kittiwake-slot-<n>``; the session is made with
  ``spark.scheduler.mode=FAIR``), so a short job is not stuck behind a long
  one;
* it keeps a record in the worker registry, so ``kittiwake workers`` lists it;
* the heartbeat (`worker.heartbeat.LeaseKeeper`) renews the leases of the
  jobs held at a third of the lease, so a job runs as long as it needs and a
  dead worker's job comes back one lease after its last renewal;
* a finished job is settled by `worker.outcomes.Settler`: its output tokens
  and its dequeue in ONE atomic update (exactly-once), a failed attempt
  retried after a backoff, the last one dead-lettered (the run then shows
  failed); after the update the `Finisher` ends the run if it is done.
* the broker failing for a while (`errors.Transient`: a restart, a lost
  connection) is not the step's failure: leasing waits and tries again,
  the reads before a job runs are repeated (`FlowJobs`, up to
  `jobs.READ_RETRY_SECS`) and, if the broker is not back by then, the job is
  handed back unrun (`release(reject=True)`, no attempt counted), the
  settler repeats its updates. A `Transient` the step itself raises while
  it runs counts as its failure, like any other error.

Stopping (`stop`, SIGTERM): leasing stops; jobs leased and not started are
rejected (`release(reject=True)`: given back without counting an attempt);
running jobs get `shutdown_secs` to finish; then their Spark job groups are
cancelled and they are rejected too. A worker killed outright loses nothing:
its jobs come back when their leases run out (an attempt counted).

Fusion: a step declared ``fuse="plan"`` finishes its jobs with a recipe that
its consumers build into their own Spark jobs (`kittiwake.flow.plan_fusion`);
one declared ``fuse="cache"`` keeps an output DataFrame a Spark step of this
worker reads next cached in the session, so that step reads it from memory
rather than from its Parquet (which is written all the same:
`kittiwake.flow.fusion`). ``fuse=False`` (``--no-fuse``) turns both off for
the whole worker: it runs and writes every step (a fused input another
worker made is still built, there being nothing to read).

`session=` runs on an existing SparkSession (left running at the end), e.g.
a test's; its scheduler mode is then whatever it was made with. `remote=`
(``--remote sc://HOST:PORT``) makes the session a Spark Connect client
instead of a driver of its own (`spark_sessions`): jobs are tagged instead of
grouped and pooled, and the server's scheduler mode applies.
"""

from __future__ import annotations

import logging
import os
import queue
import socket
import threading
import time
from typing import Any, Callable, Mapping, Sequence

from kittiwake import errors
from kittiwake.client import Client, LeasedTask
from kittiwake.client.interfaces import QueueClient
from kittiwake.constants import WORKERS_QUEUE
from kittiwake.flow.dataset import Dataset
from kittiwake.flow.definition import FlowDefinition
from kittiwake.flow.fusion import FusedOutputs
from kittiwake.flow.jobs import Finisher, FlowJobs, PreparedJob, failure_reason
from kittiwake.flow.runs import declare_joins
from kittiwake.flow.spark_sessions import APP_NAME, LOG4J2_ERRORS_ONLY, cancel_job, describe, start_session
from kittiwake.flow.plan_fusion import defers
from kittiwake.flow.spark_steps import job_group, run_spark_job
from kittiwake.worker.capacity import Capacity
from kittiwake.worker.heartbeat import Held, LeaseKeeper
from kittiwake.worker.loop import default_worker_id
from kittiwake.worker.outcomes import DEFAULT_BROKER_MAX_ATTEMPTS, Kind, Outcome, Settler
from kittiwake.worker.registry import WorkerRegistry

log = logging.getLogger("kittiwake.flow.spark")

__all__ = ["APP_NAME", "LOG4J2_ERRORS_ONLY", "SparkWorker", "start_session"]  # the session's pieces, where they were

DEFAULT_MASTER = "local[*]"
DEFAULT_CONCURRENCY = 2
DEFAULT_WAIT_SECS = 1.0
DEFAULT_SHUTDOWN_SECS = 30.0
SHUTDOWN_REASON = "SHUTDOWN"


class SparkWorker:
    """Runs the Spark step jobs of `flows` on one SparkSession (see the module docstring)."""

    def __init__(
        self,
        flows: Sequence[FlowDefinition],
        *,
        client: QueueClient | None = None,
        url: str | None = None,
        session: Any = None,
        master: str = DEFAULT_MASTER,
        remote: str | None = None,
        conf: Mapping[str, str] | None = None,
        concurrency: int = DEFAULT_CONCURRENCY,
        lease_secs: float | None = None,
        wait_secs: float = DEFAULT_WAIT_SECS,
        shutdown_secs: float = DEFAULT_SHUTDOWN_SECS,
        worker_id: str | None = None,
        registry_queue: str = WORKERS_QUEUE,
        fuse: bool = True,
    ) -> None:
        if not flows or not all(isinstance(flow, FlowDefinition) for flow in flows):
            raise errors.BadRequest("a Spark worker needs one or more kittiwake.flow.Flow")
        if not isinstance(concurrency, int) or not 1 <= concurrency <= 256:
            raise errors.BadRequest(f"concurrency must be 1..256, not {concurrency!r}")
        self.flows = list(flows)
        self.id = worker_id or default_worker_id("spark")
        self._own_client = client is None
        self.client: QueueClient = client or Client(url, worker=self.id)
        self.jobs = FlowJobs(self.flows, self.client)
        self.queues = self.jobs.job_queues("spark")
        if not self.queues:
            raise errors.BadRequest("the flows have no Spark steps: nothing to run")
        self.lease_secs = float(lease_secs) if lease_secs is not None else max(flow.lease_secs for flow in self.flows)
        self.wait_secs = wait_secs
        self.shutdown_secs = shutdown_secs
        self.concurrency = concurrency
        self.master = master
        self.remote = remote
        self.conf = dict(conf or {})
        self._session = session
        self._own_session = session is None
        self.fused = FusedOutputs() if fuse else None  # outputs kept for the next step here (fusion)
        self.keeper = LeaseKeeper(self.client)
        self.settler = Settler(self.client)
        self.finisher = Finisher(self.client)
        self.capacity = Capacity(concurrency)
        self._ready: queue.SimpleQueue[Held | None] = queue.SimpleQueue()
        self._stopping = threading.Event()
        self._aborting = threading.Event()  # shutdown_secs ran out: running jobs are cancelled
        self._running: dict[int, tuple[Held, PreparedJob]] = {}
        self._lock = threading.Lock()
        self.started = threading.Event()  # the session is up and leasing began
        self.on_ready: Callable[[], None] | None = None  # called once, when leasing begins
        self.registry = WorkerRegistry(self.client, self.id, queue=registry_queue)
        self.done = 0
        self.failed = 0
        self.rejected = 0

    @property
    def session(self) -> Any:
        if self._session is None:
            self._session = start_session(self.master, self.conf, remote=self.remote)
        return self._session

    # ---------------------------------------------------------------- control

    def stop(self) -> None:
        """Graceful stop (SIGTERM): see the module docstring."""
        self._stopping.set()

    def run(self) -> str:
        """Serve until stopped, then drain; returns why it stopped."""
        session = self.session
        for flow in self.flows:
            declare_joins(flow, self.client)
        self.keeper.start()
        slots = [threading.Thread(target=self._slot_loop, args=(n,), name=f"kittiwake-spark-slot-{n}", daemon=True)
                 for n in range(self.concurrency)]
        for thread in slots:
            thread.start()
        spark = describe(session, self.remote)
        log.info("spark worker %s serving %s on %s (concurrency %d)", self.id, ", ".join(self.queues),
                 spark["spark_master"], self.concurrency)
        self.registry.start(
            {"host": socket.gethostname(), "pid": os.getpid(), "queues": self.queues,
             "concurrency": self.concurrency, "started_at": time.time(), **spark},
            self.status,
        )
        self.started.set()
        if self.on_ready is not None:
            self.on_ready()
        try:
            self._lease_loop()
        except KeyboardInterrupt:
            self.stop()
        self._drain(slots)
        self.registry.stop()
        self.keeper.stop()
        self.finisher.close()
        if self.fused is not None:
            self.fused.clear()
        if self._own_session and self._session is not None:
            self._session.stop()
        if self._own_client:
            self.client.close()
        log.info("spark worker %s stopped after %d jobs (%d failed, %d handed back)", self.id, self.done,
                 self.failed, self.rejected)
        return "stopped"

    def status(self) -> dict[str, Any]:
        """What the worker registry shows (`kittiwake workers`)."""
        with self._lock:
            running = [f"{held.task.queue}/{held.task.pid}" for held, _ in self._running.values()]
        return {"running": running[:20], "held": len(self.keeper.held()), "finished": self.done + self.failed,
                "utilisation": round(len(running) / self.concurrency, 3), "stopping": self._stopping.is_set()}

    # ---------------------------------------------------------------- leasing

    def _lease_loop(self) -> None:
        while not self._stopping.is_set():
            want = self.capacity.take(self.concurrency, timeout=self.wait_secs)
            if want <= 0:
                continue
            tasks: list[LeasedTask] = []
            try:
                if not self._stopping.is_set():
                    tasks = self.client.lease(self.queues, max_tasks=want, lease_secs=self.lease_secs,
                                              wait_secs=self.wait_secs, worker=self.id)
            except errors.Transient as error:
                log.warning("leasing: %s; retrying", error)
                self._stopping.wait(0.5)
            except errors.KittiwakeError as error:
                log.error("leasing refused: %s", error)
                self._stopping.wait(1.0)
            finally:
                self.capacity.give(want - len(tasks))
            now = time.monotonic()
            for task in tasks:
                held = Held(task, self.lease_secs, now)
                self.keeper.hold(held)
                self._ready.put(held)

    # ------------------------------------------------------------------ slots

    def _slot_loop(self, slot: int) -> None:
        while True:
            held = self._ready.get()
            if held is None:
                return
            try:
                if self._stopping.is_set():
                    self._reject(held)
                    continue
                outcome = self._run(held, slot)
                if outcome is None:
                    self._reject(held)
                else:
                    self.settler.settle([outcome])
                    if outcome.kind is Kind.DONE:
                        self.done += 1
                    elif outcome.kind is Kind.FAIL:
                        self.failed += 1
            except Exception:  # a bug here must not lose the job: its lease runs out and it comes back
                log.exception("running %s/%s", held.task.queue, held.task.pid)
            finally:
                self.keeper.drop(held)
                self.capacity.give(1)

    def _run(self, held: Held, slot: int) -> Outcome | None:
        """The outcome of one job, or None to hand it back unrun (shutdown; the broker away for
        longer than `FlowJobs` reads again before the step runs)."""
        task = held.task
        try:
            prepared = self.jobs.prepare(task)
        except errors.Transient as error:
            log.warning("job %s/%s handed back unrun: %s", task.queue, task.pid, error)
            return None
        except errors.KittiwakeError as error:
            return Outcome(held, Kind.FAIL, reason=failure_reason(error))
        if prepared.skip is not None:
            log.info("dropping job %s/%s unrun: %s", task.queue, task.pid, prepared.skip)
            return Outcome(held, Kind.DONE)
        held.started_at = time.monotonic()
        with self._lock:
            self._running[slot] = (held, prepared)
        plan = self.fused is not None
        ran = False

        def compute() -> list[dict[str, Dataset]]:
            nonlocal ran
            ran = True
            return run_spark_job(self.session, prepared, pool=f"kittiwake-slot-{slot}", fused=self.fused, plan=plan)

        try:
            enqueue = self.jobs.complete(prepared, compute, worker=self.id,
                                         deferring=plan and defers(prepared.flow, prepared.step))
        except Exception as error:
            if self._aborting.is_set():
                return None
            if isinstance(error, errors.Transient) and not ran:  # the broker, before the step ran: not its failure
                log.warning("job %s/%s handed back unrun: %s", task.queue, task.pid, error)
                return None
            log.warning("job %s/%s (%s) failed: %s: %s", task.queue, task.pid, prepared.step.name,
                        type(error).__name__, str(error).splitlines()[0] if str(error) else "")
            attempt = task.attempts + 1
            if attempt < (task.max_attempts or DEFAULT_BROKER_MAX_ATTEMPTS):
                backoff = min(300.0, prepared.step.retry_backoff_secs * 2 ** task.attempts)
                return Outcome(held, Kind.RETRY, backoff_secs=backoff,
                               reason=f"retry {attempt + 1} in {backoff:.1f}s after {type(error).__name__}"[:4000])
            return Outcome(held, Kind.FAIL, reason=failure_reason(error))
        finally:
            with self._lock:
                self._running.pop(slot, None)
        record = prepared.record
        return Outcome(held, Kind.DONE, enqueue=enqueue, settled=lambda: self.finisher.check(record))

    def _reject(self, held: Held) -> None:
        held.finishing = True
        try:
            self.client.release(held.task, SHUTDOWN_REASON, reject=True)
            self.rejected += 1
        except errors.KittiwakeError as error:
            log.warning("handing back %s/%s: %s", held.task.queue, held.task.pid, error)

    # --------------------------------------------------------------- stopping

    def _drain(self, slots: list[threading.Thread]) -> None:
        for _ in slots:
            self._ready.put(None)
        deadline = time.monotonic() + self.shutdown_secs
        for thread in slots:
            thread.join(max(0.0, deadline - time.monotonic()))
        if any(thread.is_alive() for thread in slots):
            self._aborting.set()
            with self._lock:
                running = list(self._running.values())
            log.warning("cancelling %d Spark jobs still running after %.0f s", len(running), self.shutdown_secs)
            for _held, prepared in running:
                try:
                    cancel_job(self.session, job_group(prepared))
                except Exception as error:  # the session may be going down already
                    log.warning("cancelling %s: %s", job_group(prepared), error)
            for thread in slots:
                thread.join(30.0)
        for held in self.keeper.held():  # anything a stuck slot still holds
            if not held.finishing:
                self._reject(held)
                self.keeper.drop(held)

"""Python steps on ordinary workers: a flow's `App`, whose join handler runs its python step jobs.

``kittiwake worker MODULE:FLOW`` loads the flow's app (`Flow.kittiwake_app`):
it serves the job queues of the flow's python steps
(``flow.<name>#steps.python.<step>``), and hands each job to
`PythonSteps.run`, which calls the step's function with a `StepContext` and
one Dataset per input port (a list for a merge, None for a missing optional
one). What it returns becomes the job's output tokens, which the worker
enqueues in the same atomic update that dequeues the job
(`kittiwake.app.join_handlers`). A job of a cancelled run is dequeued
unrun. A step declared with ``reuse`` takes an earlier run's outputs when
its inputs' fingerprint is in the reuse index (`FlowJobs.complete`). After a job, the flow's `Finisher` ends the run if it holds no job
any more.

Everything else a worker does applies: ``--processes``, ``--concurrency``,
lease renewal while a step runs, SIGTERM handing back unstarted jobs.
"""

from __future__ import annotations

import logging
from typing import Any

from kittiwake.app import App
from kittiwake.app.join_handlers import ProgressReporter
from kittiwake.app.shell import SHELL_TASK
from kittiwake.client import LeasedTask
from kittiwake.client.interfaces import QueueClient
from kittiwake.flow.dataset import Dataset, as_dataset
from kittiwake.flow.definition import FlowDefinition
from kittiwake.flow.jobs import Finisher, FlowJobs, failure_reason, items_of

log = logging.getLogger("kittiwake.flow")


class PythonSteps:
    """The join handler of one flow's python steps (see the module docstring)."""

    def __init__(self, flow: FlowDefinition) -> None:
        self.flow = flow
        self.lease_secs = flow.lease_secs
        self._jobs: FlowJobs | None = None
        self._finisher: Finisher | None = None

    def _for(self, client: QueueClient) -> tuple[FlowJobs, Finisher]:
        if self._jobs is None or self._jobs.client is not client:
            self._jobs = FlowJobs([self.flow], client)
            self._finisher = Finisher(client)
        assert self._finisher is not None
        return self._jobs, self._finisher

    def run(self, task: LeasedTask, client: QueueClient, report: ProgressReporter) -> list[dict[str, Any]]:
        jobs, _ = self._for(client)
        prepared = jobs.prepare(task)
        if prepared.skip is not None:
            log.info("dropping job %s/%s unrun: %s", task.queue, task.pid, prepared.skip)
            return []
        assert prepared.context is not None
        prepared.context.extra["report"] = report
        context = prepared.context

        def compute() -> list[dict[str, Dataset]]:
            value = prepared.call(context, prepared.arguments(lambda dataset: dataset, list))
            return [{port: as_dataset(data) for port, data in item.items()} for item in items_of(prepared.step, value)]

        return jobs.complete(prepared, compute, worker=client.worker)

    def backoff_secs(self, task: LeasedTask) -> float:
        step = self._step_of(task)
        base = step.retry_backoff_secs if step is not None else 1.0
        return min(300.0, base * 2 ** max(0, task.attempts))

    def failure_reason(self, error: BaseException) -> str:
        return failure_reason(error)

    def settled(self, task: LeasedTask, client: QueueClient) -> None:
        jobs, finisher = self._for(client)
        finisher.check(jobs.record_of(task))

    def _step_of(self, task: LeasedTask) -> Any:
        for step in self.flow.steps_of("python"):
            if step.job_queue == task.queue:
                return step
        return None


def flow_app(flow: FlowDefinition) -> App:
    """An App serving exactly the job queues of `flow`'s python steps."""
    app = App()
    app.tasks.pop(SHELL_TASK, None)  # a flow's workers run its steps, not shell commands
    handler = PythonSteps(flow)
    for step in flow.steps_of("python"):
        app.handle_joins(step.job_queue, handler)
    return app

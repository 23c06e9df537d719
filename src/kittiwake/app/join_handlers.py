"""Jobs a broker join starts, run by an app's workers: the `JoinHandler` seam.

A join (`kittiwake.join_spec`) enqueues a job — header ``kittiwake-join``,
data the tokens it took — into its job queue. An app that registers a
handler for that queue (`App.handle_joins`) has its workers lease those jobs
beside its tasks and hand each to the handler instead of decoding a call
(`worker.runner`). What the handler returns is enqueued in the same atomic
update that dequeues the job (`worker.outcomes`, DONE), which is what makes a
pipeline step exactly-once: its outputs exist if and only if its job is gone.

A handler that raises fails the attempt: the job is retried after
`backoff_secs` while attempts are left (the job's `max_attempts`, set by its
join), then dead-lettered with the handler's `failure_reason`.
`kittiwake.flow.python_steps` is the handler of a flow's python steps.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Protocol

if TYPE_CHECKING:
    from kittiwake.client import LeasedTask
    from kittiwake.client.interfaces import QueueClient

ProgressReporter = Callable[[float, "str | None"], None]


class JoinHandler(Protocol):
    """Runs the jobs of one job queue for a worker."""

    lease_secs: float  # how long a worker leases a job between renewals

    def run(self, task: LeasedTask, client: QueueClient, report: ProgressReporter) -> list[dict[str, Any]]:
        """Run one job; return the tasks to enqueue when it is dequeued ([] for none). Raise to fail
        the attempt."""
        ...

    def backoff_secs(self, task: LeasedTask) -> float:
        """Seconds to wait before the next attempt of a job whose attempt just failed."""
        ...

    def failure_reason(self, error: BaseException) -> str:
        """The dead-letter reason of a job whose last attempt raised `error`."""
        ...

    def settled(self, task: LeasedTask, client: QueueClient) -> None:
        """Called once the update that finished `task` is applied (quick: the settler waits)."""
        ...

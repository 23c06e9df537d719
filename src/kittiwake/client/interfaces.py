"""The seams other packages rely on, declared: what they need of a client, and nothing more.

`QueueReads` is the read side of a queue client: list the queues, page
through one, look up a task. `kittiwake.Client` satisfies it; so does a
reader that answers from a broker's engine in the broker's own process (the
dashboard's flows view, `kittiwake.observe.flow_views.EngineReader`), so
code that only reads — a flow run's status (`kittiwake.flow.runs`) — is
written once for both, and anything else such code tried to call would be
a type error rather than a runtime surprise.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from kittiwake.model import QueueInfo
from kittiwake.protocol.replies import TaskView


@runtime_checkable
class QueueReads(Protocol):
    """Reads of queues and tasks: what status views and readers need."""

    def list_queues(self, pattern: str | None = None, min_tasks: int = 0, limit: int = 1000) -> list[QueueInfo]:
        """Queues in name order whose name matches `pattern`, holding at least max(1, `min_tasks`) tasks."""

    def peek(self, queue: str, n: int = 10, from_pid: str | None = None) -> list[TaskView]:
        """Up to `n` tasks of `queue` in pid order from `from_pid` on, leasing none."""

    def get(self, queue: str, pid: str) -> TaskView:
        """One task by pid; raises `TaskNotFound`."""

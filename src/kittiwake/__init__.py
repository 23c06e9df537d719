"""Kittiwake: a durable task queue and pull-based scheduler for Python."""

__version__ = "0.1.0"

from kittiwake import errors
from kittiwake.client import AsyncClient, Client, LeasedTask
from kittiwake.errors import ResultUnavailable, TaskFailed
from kittiwake.model import LeaseRef, NewTask, pid_at

# A task to enqueue, as `Client.enqueue_many` and `Client.update` take it.
TaskSpec = NewTask


def __getattr__(name: str) -> object:
    # the task layer loads on first use, so `import kittiwake` stays light for producers
    if name == "App":
        from kittiwake import app

        return app.App
    raise AttributeError(f"module 'kittiwake' has no attribute {name!r}")

__all__ = [
    "App",
    "AsyncClient",
    "Client",
    "LeaseRef",
    "LeasedTask",
    "NewTask",
    "ResultUnavailable",
    "TaskFailed",
    "TaskSpec",
    "__version__",
    "errors",
    "pid_at",
]

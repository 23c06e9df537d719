"""Kittiwake: a durable task queue and pull-based scheduler for Python."""

__version__ = "0.1.0"

from kittiwake import errors
from kittiwake.client import AsyncClient, Client, LeasedTask
from kittiwake.model import LeaseRef, NewTask, pid_at

# A task to enqueue, as `Client.enqueue_many` and `Client.update` take it.
TaskSpec = NewTask

__all__ = [
    "AsyncClient",
    "Client",
    "LeaseRef",
    "LeasedTask",
    "NewTask",
    "TaskSpec",
    "__version__",
    "errors",
    "pid_at",
]

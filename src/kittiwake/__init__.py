"""Kittiwake: a durable task queue and pull-based scheduler for Python."""

__version__ = "0.1.0"

from typing import TYPE_CHECKING

from kittiwake import errors
from kittiwake.errors import ResultUnavailable, TaskFailed
from kittiwake.model import LeaseRef, NewTask, pid_at
from kittiwake.protocol.replies import LeasedTask

if TYPE_CHECKING:
    from kittiwake.app import App
    from kittiwake.client import AsyncClient, Client

# A task to enqueue, as `Client.enqueue_many` and `Client.update` take it.
TaskSpec = NewTask


def __getattr__(name: str) -> object:
    # the clients and the task layer load on first use, so `import kittiwake` stays light: the
    # broker, which imports the package with every module of its own, needs neither
    if name in ("AsyncClient", "Client"):
        from kittiwake import client

        return getattr(client, name)
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

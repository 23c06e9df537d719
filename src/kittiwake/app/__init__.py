"""Task execution on top of the broker: define tasks on an `App`, submit them, get results.

    from kittiwake.app import App

    app = App("kw://127.0.0.1:7370")

    @app.task(queue="images", max_attempts=3, timeout=60)
    def thumbnail(path: str, size: int) -> str: ...

    handle = thumbnail.submit("cat.jpg", 128)
    print(handle.result(timeout=30))

Workers run it: ``kittiwake worker module:app``. Module map: `app` (App),
`definitions` (task options), `handles` (Handle), `replies` (the
reply-queue collector), `result_slots` (where results wait for handles),
`collapse` (which run an idempotency key joined), `job` (DAGs), `schedule`
(periodic ticks), `serialization` (msgpack / pickle payloads), `envelope`
(how tasks travel: queue and header names shared with workers, declared in
`kittiwake.constants`), `locality` (node-local queues), `context` (the
running task), `shell` (shell commands as tasks). `TaskFailed` and
`ResultUnavailable` belong to the error tree (`kittiwake.errors`) and are
importable from here too.
"""

from kittiwake.app.app import App
from kittiwake.app.context import TaskContext, current_task
from kittiwake.app.definitions import Delivery, TaskDefinition, TaskOptions
from kittiwake.app.handles import Handle, TaskStatus
from kittiwake.app.job import Job, JobHandles, Node
from kittiwake.errors import ResultUnavailable, TaskFailed

__all__ = [
    "App",
    "Delivery",
    "Handle",
    "Job",
    "JobHandles",
    "Node",
    "ResultUnavailable",
    "TaskContext",
    "TaskDefinition",
    "TaskFailed",
    "TaskOptions",
    "TaskStatus",
    "current_task",
]

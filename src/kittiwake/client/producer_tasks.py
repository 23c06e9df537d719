"""The tasks a batching producer takes: built cheaply, checked before they join a batch.

Both producers (`Producer`, `AsyncProducer`) build each task here. A task the broker would refuse
for the limits should not reach a batch, where it would make the broker refuse the whole request
(the batcher would then send the batch again in parts to isolate it, `batching`): so each is
checked against the published limits (`model.Limits`) on this side, and BAD_REQUEST is raised at
once. What only the broker knows (rights, joins) is left to that split.

The plain case — a queue and data, no options — is the hot path of a producer loop: it builds the
`NewTask` directly and checks a queue name only the first time it is seen (names found valid are
remembered, up to `MAX_CHECKED_QUEUES`). Tasks with options go through the same conversions as
`Client.enqueue` (`calls.task_fields`, then `msgspec.convert`), which type-check every field.
"""

from __future__ import annotations

from typing import Any

import msgspec

from kittiwake import errors
from kittiwake.client import calls
from kittiwake.model import Limits, NewTask

LIMITS = Limits()
TASK_OVERHEAD_BYTES = 24  # msgpack keys and headers of one task, roughly
MAX_CHECKED_QUEUES = 1024  # queue names found valid, not checked again (a producer mostly feeds a few)


class TaskMaker:
    """Builds and checks tasks for one producer; each returns `(task, its size in bytes)`."""

    __slots__ = ("_checked_queues",)

    def __init__(self) -> None:
        self._checked_queues: set[str] = set()

    def plain(self, queue: object, data: object) -> tuple[NewTask, int]:
        """A task of `queue` and `data` only."""
        if type(data) is not bytes:
            data = calls.task_fields(queue, data)["data"]
        if type(queue) is not str:
            raise errors.BadRequest(f"queue must be a str, got {type(queue).__name__}")
        task = NewTask(queue, data)  # type: ignore[arg-type]
        if queue not in self._checked_queues or len(data) > LIMITS.max_data_bytes:  # type: ignore[arg-type]
            task.validate(LIMITS)
            if len(self._checked_queues) < MAX_CHECKED_QUEUES:
                self._checked_queues.add(queue)
        return task, len(data) + len(queue) + TASK_OVERHEAD_BYTES  # type: ignore[arg-type]

    def of_fields(self, fields: dict[str, Any]) -> tuple[NewTask, int]:
        """A task from the fields `calls.task_fields` (or `task_fields_of`) made."""
        try:
            task = msgspec.convert(fields, NewTask)
        except msgspec.ValidationError as exc:
            raise errors.BadRequest(f"enqueue: {exc}") from None
        task.validate(LIMITS)
        size = len(task.data) + len(task.queue) + (len(task.pid) if task.pid else 0) + TASK_OVERHEAD_BYTES
        if task.headers:
            size += sum(len(key) + len(value) for key, value in task.headers.items())
        return task, size

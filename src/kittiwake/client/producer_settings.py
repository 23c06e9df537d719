"""`ProducerSettings`: when a batching producer sends a batch and how much it may hold (CMQ's producer).

Shared by `Client.producer(...)` and `App(batching=...)`; every value is
checked here, so a wrong one fails where it is given, with BAD_REQUEST.

Defaults, and why:

* `max_batch_tasks` 2,000 and `max_batch_bytes` 1 MiB: a batch this large
  costs the broker one group commit, and leaves room under the broker's
  limits (10,000 items, 16 MiB frames) for tasks near the 1 MiB data limit;
* `linger_ms` 5: how long a batch gathering behind one in flight may wait
  for company before it goes out as the second one in flight;
* `max_buffer_tasks` 20,000: memory is bounded by tasks held, sent or not,
  and this is ten full batches, enough to keep two in flight at full speed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kittiwake import errors
from kittiwake.model import Limits

DEFAULT_LINGER_MS = 5.0
DEFAULT_MAX_BATCH_BYTES = 1 << 20
DEFAULT_MAX_BATCH_TASKS = 2_000
DEFAULT_MAX_BUFFER_TASKS = 20_000
MAX_LINGER_MS = 60_000.0
# a frame must fit the broker's (16 MiB by default); one task may carry 1 MiB of data
MAX_BATCH_BYTES_CEILING = 8 << 20


@dataclass(frozen=True, slots=True)
class ProducerSettings:
    """How a batching producer batches; see the module docstring for the defaults."""

    linger_ms: float = DEFAULT_LINGER_MS
    max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES
    max_batch_tasks: int = DEFAULT_MAX_BATCH_TASKS
    max_buffer_tasks: int = DEFAULT_MAX_BUFFER_TASKS
    block: bool = True  # a full buffer blocks enqueue (True) or refuses the task with PRODUCER_FULL

    def __post_init__(self) -> None:
        linger = self.linger_ms
        if isinstance(linger, bool) or not isinstance(linger, (int, float)) or not (0 <= linger <= MAX_LINGER_MS):
            raise errors.BadRequest(f"linger_ms must be a number in [0, {MAX_LINGER_MS:g}], got {linger!r}")
        _check_int("max_batch_bytes", self.max_batch_bytes, 1, MAX_BATCH_BYTES_CEILING)
        _check_int("max_batch_tasks", self.max_batch_tasks, 1, Limits().max_batch)
        _check_int("max_buffer_tasks", self.max_buffer_tasks, 1, 100_000_000)
        if self.max_buffer_tasks < self.max_batch_tasks:
            raise errors.BadRequest(
                f"max_buffer_tasks ({self.max_buffer_tasks}) must hold at least one full batch "
                f"(max_batch_tasks = {self.max_batch_tasks})"
            )
        if not isinstance(self.block, bool):
            raise errors.BadRequest(f"block must be True or False, got {self.block!r}")

    @classmethod
    def of(cls, value: ProducerSettings | bool | dict[str, Any] | None) -> ProducerSettings | None:
        """Settings from what `App(batching=...)` takes: True (defaults), a map of them, settings, or None/False."""
        if value is None or value is False:
            return None
        if value is True:
            return cls()
        if isinstance(value, ProducerSettings):
            return value
        if isinstance(value, dict):
            unknown = set(value) - set(cls.__dataclass_fields__)
            if unknown:
                raise errors.BadRequest(f"unknown producer settings: {', '.join(sorted(unknown))}")
            return cls(**value)
        raise errors.BadRequest(f"batching takes True, False, a ProducerSettings or a map of them, got {value!r}")


def _check_int(name: str, value: object, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not (low <= value <= high):
        raise errors.BadRequest(f"{name} must be an integer in [{low}, {high}], got {value!r}")

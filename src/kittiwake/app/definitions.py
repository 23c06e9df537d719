"""What `@app.task` and `@app.periodic` make of a function: its options and how to submit it.

A `TaskDefinition` wraps a plain function. Calling it runs the function here
and now; `submit` sends it to a worker and returns a `Handle`; `map` submits
one task per item in bundles. The options say where the task runs and how a
worker treats it:

* ``name``: how workers find the function; default ``<module>.<qualname>``
  (a script run directly is named after its file, as a worker importing it
  names it);
* ``queue``: the broker queue (``group#name`` picks the consistency group);
* ``lease_secs``: how long a worker holds the task between heartbeats'
  renewals — a crashed worker's task is offered again this long after it
  stopped renewing;
* ``max_attempts``: runs allowed in all (the first one included); an
  exception, a timeout or a crashed worker each use one. Once used up the task
  moves to ``<queue>.dead`` and its handle raises `TaskFailed`;
* ``delivery``: ``at_least_once`` (default: a crashed worker's task runs
  again) or ``at_most_once`` (a task once started never starts again; if its
  worker is lost it is dead-lettered with reason ``WORKER_LOST``);
* ``timeout``: seconds a run may take before the worker kills it (such
  tasks run in a child process of the worker, see `kittiwake.worker.runner`);
* ``retry_backoff`` / ``retry_backoff_max``: seconds before retry n is
  ``min(max, backoff * 2**(n-1))``, times a random jitter in [0.5, 1];
* ``retry_on``: exception types that are retried (others fail at once);
* ``rate_limit``: ``"100/s"``, ``"30/m"`` or ``"500/h"`` — leases from the
  task's queue per second across all workers, enforced by the broker's token
  bucket, so it holds however many workers run (it is a property of the
  queue: tasks sharing a queue share the limit, the lowest wins). Workers ask
  for a bucket of a tenth of a second's tokens, so a burst stays small. The
  ``.delayed`` queue has a bucket of its own: delayed tasks and immediate
  ones together may reach twice the rate while both are busy;
* ``ignore_result``: no result is posted (fire and forget; saves a write);
* ``bind``: the function gets the `TaskContext` as its first argument;
* ``needs``: worker slots the task runs on at once (a gang, see
  `kittiwake.worker.gang`); ``gang_timeout``: seconds the slots have to
  assemble before the leader frees them and tries again a little later.
"""

from __future__ import annotations

import inspect
import os
import re
import sys
from dataclasses import dataclass, field, replace
from datetime import datetime
from enum import Enum
from typing import TYPE_CHECKING, Any, Callable, Iterable, Protocol

from kittiwake.constants import (
    DEFAULT_LEASE_SECS,
    DEFAULT_QUEUE,
    GROUP_SEPARATOR,
    RESERVED_PREFIX,
    RESERVED_SUFFIXES,
)
from kittiwake.model import Limits, validate_queue

if TYPE_CHECKING:
    from kittiwake.app.handles import Handle
    from kittiwake.app.schedule import Schedule

DEFAULT_MAX_ATTEMPTS = 3
DEFAULT_RETRY_BACKOFF_SECS = 1.0
DEFAULT_RETRY_BACKOFF_MAX_SECS = 300.0
DEFAULT_MAP_CHUNK = 1000

_RATE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*/\s*(s|sec|second|m|min|minute|h|hour)\s*$")
_RATE_UNIT_SECS = {"s": 1, "sec": 1, "second": 1, "m": 60, "min": 60, "minute": 60, "h": 3600, "hour": 3600}


class Delivery(str, Enum):
    """How often a task may start."""

    AT_LEAST_ONCE = "at_least_once"  # a crashed worker's task runs again after its lease runs out
    AT_MOST_ONCE = "at_most_once"  # a task once started never starts again; a lost run is dead-lettered


def parse_rate(rate: str | float | None) -> float | None:
    """Tasks per second from "100/s", "30/m", "500/h" (or a number of tasks per second)."""
    if rate is None:
        return None
    if isinstance(rate, (int, float)) and not isinstance(rate, bool):
        per_sec = float(rate)
    else:
        match = _RATE.match(str(rate))
        if match is None:
            raise ValueError(f"rate_limit {rate!r} is not like '100/s', '30/m' or '500/h'")
        per_sec = float(match.group(1)) / _RATE_UNIT_SECS[match.group(2)]
    if per_sec <= 0:
        raise ValueError("rate_limit must be above zero")
    return per_sec


@dataclass(frozen=True, slots=True)
class TaskOptions:
    """How a worker runs a task; see the module docstring for each option."""

    name: str
    queue: str = DEFAULT_QUEUE
    lease_secs: float = DEFAULT_LEASE_SECS
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    delivery: Delivery = Delivery.AT_LEAST_ONCE
    timeout: float | None = None
    retry_backoff: float = DEFAULT_RETRY_BACKOFF_SECS
    retry_backoff_max: float = DEFAULT_RETRY_BACKOFF_MAX_SECS
    retry_on: tuple[type[BaseException], ...] = (Exception,)
    rate_per_sec: float | None = None
    ignore_result: bool = False
    bind: bool = False
    needs: int = 1
    gang_timeout: float = 30.0

    def __post_init__(self) -> None:
        validate_queue(self.queue, Limits())
        reserved_start = self.queue.startswith(RESERVED_PREFIX) or GROUP_SEPARATOR + RESERVED_PREFIX in self.queue
        if reserved_start or self.queue.endswith(RESERVED_SUFFIXES):
            raise ValueError(
                f"queue {self.queue!r} is a name Kittiwake keeps for itself (a leading {RESERVED_PREFIX!r}, "
                f"or {', '.join(map(repr, RESERVED_SUFFIXES))} at the end)"
            )
        if not 0 < self.lease_secs <= Limits().max_lease_secs:
            raise ValueError(f"lease_secs must be in (0, {Limits().max_lease_secs}]")
        if self.max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        if self.timeout is not None and self.timeout <= 0:
            raise ValueError("timeout must be above zero")
        if self.needs < 1:
            raise ValueError("needs must be at least 1")
        if self.gang_timeout <= 0:
            raise ValueError("gang_timeout must be above zero")
        if self.needs > 1 and self.timeout is not None:
            raise ValueError("a gang task (needs > 1) cannot have a timeout")
        if self.retry_backoff < 0 or self.retry_backoff_max < 0:
            raise ValueError("retry_backoff and retry_backoff_max must not be negative")

    @property
    def broker_max_attempts(self) -> int:
        """The task's `max_attempts` as the broker counts them (releases and expired leases).

        At most once: one more than the app's, so that a lost worker's last
        permitted run is not dead-lettered by the broker as LEASE_EXPIRED but
        seen by the next worker and dead-lettered as WORKER_LOST.
        """
        return self.max_attempts + (1 if self.delivery is Delivery.AT_MOST_ONCE else 0)

    def backoff_secs(self, attempt: int, jitter: float) -> float:
        """Seconds before retrying after failed attempt number `attempt` (1-based); jitter in [0, 1]."""
        base = min(self.retry_backoff_max, self.retry_backoff * (2 ** max(0, attempt - 1)))
        return base * (0.5 + 0.5 * jitter)


def module_name(function: Callable[..., Any]) -> str:
    """The module a function is defined in, as a worker importing it would name it: a script
    run directly (`python shop.py`, `python -m shop`) is `__main__` to itself but `shop` to a
    worker started with `shop:app`, and task names must agree."""
    module = function.__module__
    if module != "__main__":
        return module
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None and spec.name:
        return spec.name
    path = getattr(main, "__file__", None)
    return os.path.splitext(os.path.basename(path))[0] if path else module


def make_options(function: Callable[..., Any], **options: Any) -> TaskOptions:
    """TaskOptions from decorator keywords, with defaults and checks."""
    name = options.pop("name", None) or f"{module_name(function)}.{function.__qualname__}"
    if "delivery" in options:
        options["delivery"] = Delivery(options["delivery"])
    if "rate_limit" in options:
        options["rate_per_sec"] = parse_rate(options.pop("rate_limit"))
    retry_on = options.get("retry_on")
    if retry_on is not None and not isinstance(retry_on, tuple):
        options["retry_on"] = tuple(retry_on) if isinstance(retry_on, (list, set)) else (retry_on,)
    options = {key: value for key, value in options.items() if value is not None}
    return TaskOptions(name=name, **options)


class Submitter(Protocol):
    """What a task definition needs of its `App`: a way to submit its calls."""

    def submit_call(
        self, definition: TaskDefinition, args: tuple[Any, ...], kwargs: dict[str, Any], **options: Any
    ) -> Handle: ...

    def map(self, task: TaskDefinition, items: Iterable[Any], *, chunk: int = DEFAULT_MAP_CHUNK) -> list[Handle]: ...


class TaskDefinition:
    """A function registered as a task of an app. Call it to run it here; `submit` to run it on a worker."""

    def __init__(self, app: Submitter, function: Callable[..., Any], options: TaskOptions) -> None:
        self.app = app
        self.function = function
        self.options = options
        self.is_coroutine = inspect.iscoroutinefunction(function)  # asked at every run
        self.__name__ = getattr(function, "__name__", options.name)
        self.__doc__ = function.__doc__
        self.__wrapped__ = function

    @property
    def name(self) -> str:
        return self.options.name

    @property
    def queue(self) -> str:
        return self.options.queue

    def __repr__(self) -> str:
        return f"<task {self.name} queue={self.queue}>"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.function(*args, **kwargs)

    def submit(
        self,
        *args: Any,
        key: str | None = None,
        delay: float | None = None,
        at: datetime | float | None = None,
        after: Iterable[Any] | None = None,
        node: str | None = None,
        **kwargs: Any,
    ) -> Handle:
        """Send one run to a worker; returns its handle at once.

        `key`: an idempotency key — it becomes the task id, and a second submit
        with the same key while the first task exists collapses into it (both
        handles get that run's result). Once the task finished, the same key
        starts a new run, and only the new handle gets its result.
        `delay` (seconds) or `at` (a datetime, or epoch seconds): do not start
        before then. `after`: handles (or (queue, pid) pairs) of tasks that
        must all finish first; if one of them fails this task fails too.
        `node`: the node holding the task's data — the task goes to the local
        queue ``<queue>@<node>``, served first by workers run with ``--node``
        of that name (others steal it only when idle).
        The names key, delay, at, after and node are taken by these options: pass
        such function arguments with `submit_call`.
        """
        return self.app.submit_call(self, args, kwargs, key=key, delay=delay, at=at, after=after, node=node)

    def submit_call(
        self,
        args: Iterable[Any] = (),
        kwargs: dict[str, Any] | None = None,
        **options: Any,
    ) -> Handle:
        """`submit` with the function's arguments given as a tuple and a dict."""
        return self.app.submit_call(self, tuple(args), dict(kwargs or {}), **options)

    def map(self, items: Iterable[Any], *, chunk: int = DEFAULT_MAP_CHUNK) -> list[Handle]:
        """One task per item (called as `f(item)`), enqueued `chunk` per request."""
        return self.app.map(self, items, chunk=chunk)

    def with_options(self, **options: Any) -> TaskDefinition:
        """A copy submitting with other options (same name, so workers run it with theirs)."""
        if "rate_limit" in options:
            options["rate_per_sec"] = parse_rate(options.pop("rate_limit"))
        if "delivery" in options:
            options["delivery"] = Delivery(options["delivery"])
        return TaskDefinition(self.app, self.function, replace(self.options, **options))


@dataclass(slots=True)
class PeriodicDefinition:
    """A task fired on a schedule by the workers running the scheduler (``--beat``)."""

    task: TaskDefinition
    schedule: Schedule
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.task.name

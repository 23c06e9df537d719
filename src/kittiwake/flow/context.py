"""The job a step function runs in: `StepContext`, passed first to python steps and reachable
from any step (Spark steps too) through `current_step()`."""

from __future__ import annotations

import contextvars
from dataclasses import dataclass, field
from typing import Any, Callable

from kittiwake.flow.tokens import output_path

_current: contextvars.ContextVar[StepContext | None] = contextvars.ContextVar("kittiwake_step", default=None)


@dataclass(slots=True)
class StepContext:
    """One job of one step: which run, which key (sequence indices), where outputs go, which attempt
    (and the lease it holds: `lease`, None outside a worker)."""

    flow: str
    step: str
    run: str
    key: str
    indices: list[int]
    data_dir: str
    attempt: int = 1
    extra: dict[str, Any] = field(default_factory=dict)
    lease: int | None = None
    written_callbacks: list[Callable[[], None]] = field(default_factory=list)

    def when_written(self, callback: Callable[[], None]) -> None:
        """Call `callback` once this job's outputs are written: a Spark step returns lazy
        DataFrames that the worker writes after the function returns; a python step's outputs
        are written when it returns. (A step's own timing, for one, ends there.)"""
        self.written_callbacks.append(callback)

    def outputs_written(self) -> None:
        """The worker wrote the job's outputs: run the `when_written` callbacks, once."""
        callbacks, self.written_callbacks = self.written_callbacks, []
        for callback in callbacks:
            callback()

    @property
    def index(self) -> int | None:
        """This job's index in the innermost sequence (None at depth 0)."""
        return self.indices[-1] if self.indices else None

    def output_path(self, port: str = "out", item: int | None = None) -> str:
        """This attempt's place for the job's output on `port`:
        ``<data_dir>/<run>/<step>/<port>[/<index>…][/<item>]/lease-<lease>``, a folder no other
        attempt writes, so one that lost its lease and still runs cannot touch what the token of
        the attempt that finished the job names (`tokens.output_path`)."""
        return output_path(self.data_dir, self.run, self.step, port, self.indices, item, self.lease)


def current_step() -> StepContext:
    """The job this code runs in; RuntimeError outside a step run by a worker."""
    context = _current.get()
    if context is None:
        raise RuntimeError("current_step() is only available inside a flow step run by a worker")
    return context


def enter(context: StepContext) -> contextvars.Token[StepContext | None]:
    return _current.set(context)


def leave(token: contextvars.Token[StepContext | None]) -> None:
    _current.reset(token)

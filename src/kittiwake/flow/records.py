"""A run's record and status as plain data: what `…#runs` and `…#runs.ended` hold, what status shows.

The record carries the flow's shape (steps, ports, engines) so that status,
cancel, retry and garbage collection work from the broker alone, without
importing the flow's module (`kittiwake flow status RUN`).
"""

from __future__ import annotations

from typing import Any

import msgspec

from kittiwake.flow.definition import FlowDefinition

RUNNING, DONE, FAILED, CANCELLED = "running", "done", "failed", "cancelled"
STATES = (RUNNING, DONE, FAILED, CANCELLED)


class StepShape(msgspec.Struct, kw_only=True):
    """One step as a run record keeps it."""

    name: str
    engine: str
    join: str
    job_queue: str
    ports: dict[str, list[str]]  # port -> [queue, mode]
    outputs: list[str]


class RunRecord(msgspec.Struct, kw_only=True):
    """A run: its id, flow, inputs (dataset wire forms), data directory and the flow's shape."""

    run: str
    flow: str
    group: str
    created_at: float
    data_dir: str
    inputs: dict[str, Any]
    steps: list[StepShape]  # in declaration order: a step's inputs come from steps before it
    sinks: list[str]  # "step.port" of outputs nobody consumes
    fresh: bool = False  # every job runs: the reuse index is not looked up (it is still written)

    def engines(self) -> list[str]:
        return sorted({step.engine for step in self.steps})

    def job_queues(self) -> list[str]:
        """The steps' job queues in step order, which is the order jobs flow through them: a job
        only ever starts jobs of later steps (`runs.has_live_job` relies on it)."""
        return list(dict.fromkeys(step.job_queue for step in self.steps))

    def step_of_join(self, join: str | None) -> str | None:
        for step in self.steps:
            if step.join == join:
                return step.name
        return None


class Ended(msgspec.Struct, kw_only=True):
    """How a run ended (`…#runs.ended`): done with its outputs, or cancelled."""

    state: str
    ended_at: float
    done_jobs: dict[str, int] = {}  # step -> jobs finished
    reused_jobs: dict[str, int] = {}  # step -> of those, jobs that reused an earlier run's outputs
    outputs: dict[str, list[Any]] = {}  # "step.port" -> [[indices, dataset wire], ...]
    tokens_left: dict[str, int] = {}  # step -> tokens that waited at its ports when the run ended
    reason: str | None = None


class StepProgress(msgspec.Struct, kw_only=True):
    """One step of one run: tokens waiting at its ports, jobs queued / running / finished / dead."""

    step: str
    engine: str
    waiting: int = 0
    queued: int = 0
    running: int = 0
    done: int = 0
    dead: int = 0
    reused: int = 0  # of `done`: jobs that took an earlier run's outputs (`kittiwake.flow.reuse`)


class DeadJob(msgspec.Struct, kw_only=True):
    step: str | None
    key: str
    reason: str | None


class RunStatus(msgspec.Struct, kw_only=True):
    """A run as status shows it; `state` is running, done, failed (a job was dead-lettered) or cancelled."""

    run: str
    flow: str
    state: str
    created_at: float
    ended_at: float | None = None
    data_dir: str
    steps: list[StepProgress] = []
    dead: list[DeadJob] = []
    outputs: dict[str, list[Any]] = {}
    reason: str | None = None

    @property
    def finished(self) -> bool:
        """Done, failed or cancelled: nothing more happens without `retry`."""
        return self.state != RUNNING

    def to_dict(self) -> dict[str, Any]:
        return msgspec.to_builtins(self)


def record_of(flow: FlowDefinition, run: str, created_at: float, data_dir: str, inputs: dict[str, Any],
              fresh: bool = False) -> RunRecord:
    steps = [
        StepShape(
            name=step.name, engine=step.engine, join=step.join, job_queue=step.job_queue,
            ports={port: [step.port_queue(port), spec.mode] for port, spec in step.inputs.items()},
            outputs=list(step.outputs),
        )
        for step in flow
    ]
    sinks = [f"{output.step.name}.{output.port}" for output in flow.sinks()]
    return RunRecord(run=run, flow=flow.name, group=flow.names.group, created_at=created_at, data_dir=data_dir,
                     inputs=inputs, steps=steps, sinks=sinks, fresh=fresh)


_encoder = msgspec.msgpack.Encoder()


def encode(value: msgspec.Struct) -> bytes:
    return _encoder.encode(value)


def decode_record(data: bytes) -> RunRecord:
    return msgspec.msgpack.decode(data, type=RunRecord)


def decode_ended(data: bytes) -> Ended:
    return msgspec.msgpack.decode(data, type=Ended)

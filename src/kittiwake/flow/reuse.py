"""The reuse index: outputs of deterministic steps, by the fingerprint of the inputs that made them.

A step declared with ``reuse=True`` (or in a flow made with ``reuse=True``)
is deterministic: the same inputs and the same code give the same outputs.
Before such a job runs, its worker computes the job's fingerprint
(`fingerprints.job_fingerprint`: the step's version, the job's indices, every
input dataset's fingerprint) and looks it up here; on a hit the job is
finished with the outputs recorded there, without running its function — its
output tokens reference the data an earlier run wrote, where it is, so the
consumers' fingerprints match too and the reuse carries down the flow. A hit
whose data is gone (a folder deleted since) is a miss.

Where it lives: in the broker, in the flow's consistency group, one queue per
step, ``flow.<name>#reuse.<step>``, one task per fingerprint (pid = the hex
fingerprint; data = a `ReuseRecord`), kept like the run records. A job that
ran enqueues its record in the same atomic update as its outputs and its
dequeue, so a record exists exactly when a job with that fingerprint
finished; two runs that compute the same job at once enqueue the same pid and
the second collapses onto the first (either's outputs are right).

A run started with ``fresh=True`` (`flow run --fresh`) does not look records
up (every job runs) but still writes them, so the next run reuses its
outputs. `forget` drops a step's records (all of them, or the flow's).
"""

from __future__ import annotations

import os
import time
from typing import Any

import msgspec

from kittiwake import errors
from kittiwake.client.interfaces import QueueClient, QueueReads
from kittiwake.flow.dataset import Dataset
from kittiwake.flow.definition import FlowDefinition, Step
from kittiwake.flow.fingerprints import local_path_of


class ReuseRecord(msgspec.Struct, kw_only=True):
    """What a finished job left for reuse: its output items (port -> dataset wire, per item)
    and where it came from."""

    step: str
    version: str
    run: str
    key: str
    at: float
    items: list[dict[str, Any]]

    def datasets(self) -> list[dict[str, Dataset]]:
        return [{port: Dataset.from_wire(raw) for port, raw in item.items()} for item in self.items]


_encoder = msgspec.msgpack.Encoder()


def reuse_queue(flow: FlowDefinition, step: Step) -> str:
    return f"{flow.names.group}#reuse.{step.name}"


def lookup(client: QueueReads, flow: FlowDefinition, step: Step, fingerprint: str) -> ReuseRecord | None:
    """The record of `fingerprint`, None when there is none or its data is gone."""
    try:
        view = client.get(reuse_queue(flow, step), fingerprint)
    except errors.TaskNotFound:
        return None
    try:
        record = msgspec.msgpack.decode(view.data, type=ReuseRecord)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    for item in record.datasets():
        for dataset in item.values():
            path = local_path_of(dataset) if dataset.kind != "inline" else None
            if path is not None and not os.path.exists(path):
                return None
    return record


def record_task(flow: FlowDefinition, step: Step, fingerprint: str, version: str, run: str, key: str,
                items: list[dict[str, Dataset]]) -> dict[str, Any]:
    """The enqueue that records a finished job's outputs under its fingerprint."""
    record = ReuseRecord(step=step.name, version=version, run=run, key=key, at=time.time(),
                         items=[{port: dataset.to_wire() for port, dataset in item.items()} for item in items])
    return {"queue": reuse_queue(flow, step), "pid": fingerprint, "data": _encoder.encode(record)}


def records(client: QueueReads, flow: FlowDefinition, step: Step, limit: int = 1000) -> list[ReuseRecord]:
    """Up to `limit` records of `step`, in fingerprint order."""
    return [msgspec.msgpack.decode(view.data, type=ReuseRecord)
            for view in client.peek(reuse_queue(flow, step), limit)]


def forget(client: QueueClient, flow: FlowDefinition, step: Step | None = None) -> None:
    """Drop the reuse records of `step` (of every step of the flow for None)."""
    for each in [step] if step is not None else list(flow):
        client.delete_queue(reuse_queue(flow, each))

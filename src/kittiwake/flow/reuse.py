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
step, ``flow.<name>#reuse.<step>``, one task per job that ran (pid = the hex
fingerprint, a dot, then the time it finished counted *down*, so the newest
record of a fingerprint sorts first; data = a `ReuseRecord`), kept like the
run records. A job that ran enqueues its record in the same atomic update as
its outputs and its dequeue, so a record exists exactly when a job with that
fingerprint finished. A lookup takes the newest record of the fingerprint
(one `peek`): a job that runs although a record exists — in a fresh run, or
because the record's data is gone — leaves the record the next run takes.
Two runs that compute the same job at once each leave one (either's outputs
are right). A record of the older layout, whose pid is the bare fingerprint,
counts as the oldest.

A run started with ``fresh=True`` (`flow run --fresh`) does not look records
up (every job runs) but still writes them, so the next run reuses its
outputs. `forget` drops a step's records (all of them, or the flow's).
"""

from __future__ import annotations

import os
import time
from typing import Any

import msgspec

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
    """The newest record of `fingerprint`, None when there is none or its data is gone."""
    # in pid order: the bare fingerprint (the older layout) if any, then the newest dotted record
    views = [view for view in client.peek(reuse_queue(flow, step), 2, from_pid=fingerprint)
             if view.pid == fingerprint or view.pid.startswith(fingerprint + ".")]
    dotted = [view for view in views if view.pid != fingerprint]
    if not views:
        return None
    view = dotted[0] if dotted else views[0]
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
    at = time.time()
    record = ReuseRecord(step=step.name, version=version, run=run, key=key, at=at,
                         items=[{port: dataset.to_wire() for port, dataset in item.items()} for item in items])
    return {"queue": reuse_queue(flow, step), "pid": record_pid(fingerprint, at), "data": _encoder.encode(record)}


def record_pid(fingerprint: str, at: float) -> str:
    """The pid of a record made at `at`: the fingerprint, then the microseconds left to `_NEVER`,
    so that a later record of the same fingerprint sorts before an earlier one."""
    return f"{fingerprint}.{max(0, _NEVER - int(at * 1_000_000)):017d}"


_NEVER = 10**17 - 1  # microseconds: about the year 5138


def records(client: QueueReads, flow: FlowDefinition, step: Step, limit: int = 1000) -> list[ReuseRecord]:
    """Up to `limit` records of `step`, in fingerprint order."""
    return [msgspec.msgpack.decode(view.data, type=ReuseRecord)
            for view in client.peek(reuse_queue(flow, step), limit)]


def forget(client: QueueClient, flow: FlowDefinition, step: Step | None = None) -> None:
    """Drop the reuse records of `step` (of every step of the flow for None)."""
    for each in [step] if step is not None else list(flow):
        client.delete_queue(reuse_queue(flow, each))

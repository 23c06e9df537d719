"""A job's record in the job registry (``_jobs``): what the dashboard lists as a job.

`Job.submit` writes one record per job into its app's ``job_registry`` queue
(`constants.JOBS_QUEUE` unless the app names another, or None for none):

* pid = the job id, drawn when the job is made (`new_job_id`): 13 digits of
  its creation time in milliseconds, "-", 8 hex digits; so records sort by
  creation, and a job submitted again (after a failure half-way, say) collapses
  into its own record, as its tasks collapse into theirs;
* data = JSON: ``{"id", "name", "created_at" (epoch secs), "nodes": N,
  "queues": {queue: nodes in it}, "sinks": [[queue, pid], ...],
  "sinks_truncated": bool}``. The sinks are the nodes no other node of the job
  runs after; their fate is the job's: a sink dead-lettered means failed, one
  still in its queue means waiting (blocked), queued or running, one gone
  means done (`job_state`). The record stays small whatever the job's size: at
  most `MAX_SINKS` sinks (the first ones added) and `MAX_QUEUES` queues (the
  fullest; ``queues_truncated`` says whether some were left out).

The state is never written: a reader derives it from where the sinks are,
so a record is written once and never updated; the apps that write records
remove them after their `job_retention_secs` (`job_retention`).
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from typing import Any, Callable, Iterable, Mapping

from kittiwake.model import Limits

MAX_SINKS = 1000
MAX_QUEUES = 1000
MAX_NAME_CHARS = 200
RECORD_MAX_ATTEMPTS = 1_000_000  # nobody leases a record; if someone does, it does not die of it

# what `job_state` derives from the states of a job's sinks
SINK_STATES = ("done", "failed", "running", "queued", "waiting")


def new_job_id(epoch_secs: float, random_bytes: Callable[[int], bytes] = os.urandom) -> str:
    """``<creation time in ms, 13 digits>-<8 hex digits>``: sorts by creation time."""
    return f"{max(0, int(epoch_secs * 1000)):013d}-{random_bytes(4).hex()}"


JOB_ID = re.compile(r"[0-9]{13}-[0-9a-f]{8}")  # what `new_job_id` makes


def is_job_id(text: str) -> bool:
    return JOB_ID.fullmatch(text) is not None


def validate_job_name(name: object) -> str:
    if not isinstance(name, str) or not name or len(name) > MAX_NAME_CHARS or not name.isprintable():
        raise ValueError(f"a job's name must be 1 to {MAX_NAME_CHARS} printable characters, got {name!r}")
    return name


def job_record(
    job_id: str, name: str, created_at: float, nodes: Iterable[str], sinks: Iterable[tuple[str, str]]
) -> dict[str, Any]:
    """The record of a job: `nodes` is each node's queue, `sinks` the (queue, pid) of each sink."""
    per_queue = Counter(nodes)
    queues = dict(per_queue.most_common(MAX_QUEUES))
    listed: list[list[str]] = []
    truncated = False
    for queue, pid in sinks:
        if len(listed) == MAX_SINKS:
            truncated = True
            break
        listed.append([queue, pid])
    return {
        "id": job_id,
        "name": name,
        "created_at": created_at,
        "nodes": sum(per_queue.values()),
        "queues": queues,
        "queues_truncated": len(queues) < len(per_queue),
        "sinks": listed,
        "sinks_truncated": truncated,
    }


def record_task(registry: str, record: dict[str, Any]) -> dict[str, Any]:
    """The task that writes `record` into the queue `registry` (an `enqueue_many` item)."""
    data = json.dumps(record, separators=(",", ":")).encode()
    while len(data) > Limits().max_data_bytes:  # only with pids and names near their limits: keep what fits
        sinks, queues = record["sinks"], list(record["queues"].items())
        record = {**record, "sinks": sinks[: len(sinks) // 2], "sinks_truncated": True,
                  "queues": dict(queues[: len(queues) // 2]), "queues_truncated": True}
        data = json.dumps(record, separators=(",", ":")).encode()
    return {"queue": registry, "pid": record["id"], "data": data, "max_attempts": RECORD_MAX_ATTEMPTS}


def read_record(data: bytes | str) -> dict[str, Any]:
    """A record's data as written by `record_task`; ValueError when it is not one."""
    record = json.loads(data)
    if not isinstance(record, dict) or not isinstance(record.get("id"), str) or not isinstance(record.get("sinks"), list):
        raise ValueError("not a job record")
    return record


def job_state(sinks: Mapping[str, int]) -> str:
    """A job's state from how many of its sinks are in each of `SINK_STATES`: failed if any sink
    failed, done if all are done, running if any runs or is done, else waiting."""
    if sinks.get("failed", 0):
        return "failed"
    total = sum(sinks.get(state, 0) for state in SINK_STATES)
    if sinks.get("done", 0) == total:
        return "done"
    if sinks.get("running", 0) or sinks.get("done", 0):
        return "running"
    return "waiting"

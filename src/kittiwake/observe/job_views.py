"""`GET /api/jobs?limit=N&registry=Q`: the newest jobs apps submitted, each with its state, derived from the broker.

`Job.submit` writes one record per job in its app's job registry (`_jobs`,
or the `registry` parameter: a user whose rights cover only its prefix names
one there), as `kittiwake.app.job_records` says: pid = the job id, whose
first 13 characters are its creation time in milliseconds (so the records
sort by it), data = JSON naming the job's sinks, the (queue, pid) of the
nodes no other node runs after. The record is written once; the state is
derived from the sinks each time, never stored:

* a sink among its queue's dead letters: failed; still in its queue: waiting
  (on parents), queued (available) or running (leased); gone: done;
* the job: `job_records.job_state` of its sinks' states (failed if one
  failed, done if all are, running if one runs or is done, else waiting).

The newest records come first. The store scans forward only, so they are
found by time: a scan from the pid of `now - window`, the window growing
while it holds fewer than `limit` records and shrinking while it holds more
than a scan returns (`SCAN_ROWS`), then a bounded walk forward if the
records are packed tighter than a millisecond. A sink is looked up in memory
where the engine holds its whole queue, else in the store (one read).
Needs ADMIN on the registry.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any

from kittiwake.app.job_records import SINK_STATES, job_state, read_record
from kittiwake.broker.access import Principal
from kittiwake.broker.http_server import HttpRequest
from kittiwake.constants import JOBS_QUEUE
from kittiwake.engine.failures import dead_letters_of
from kittiwake.engine.head_cache import find
from kittiwake.engine.queue_state import QueueState
from kittiwake.engine.state import EngineState
from kittiwake.model import DEAD_PID_HEADER, Task, dead_letter_prefix, dead_queue_of, validate_queue
from kittiwake.observe import params
from kittiwake.observe.http_json import query
from kittiwake.observe.reads import engine_of, now_of, require_admin

if TYPE_CHECKING:
    from kittiwake.observe.registrar import Registrar

DEFAULT_JOBS = 20
MAX_JOBS = 100
SCAN_ROWS = 500
FIRST_WINDOW_MS = 60_000
MAX_PROBES = 40
MAX_WALK_PAGES = 100
TIME_DIGITS = 13


def _pid_at(ms: int) -> str | None:
    return f"{ms:0{TIME_DIGITS}d}" if ms > 0 else None


def newest_records(state: EngineState, queue: str, limit: int, now: float) -> list[Task]:
    """The `limit` records of `queue` with the highest pids, highest first (see the module docstring)."""
    if queue not in state.queues:
        return []
    store = state.store
    now_ms = int(now * 1000)
    too_few, too_many = 0, None  # windows (ms) known to hold fewer than `limit` records / more than a scan
    window = FIRST_WINDOW_MS
    for _ in range(MAX_PROBES):
        start = _pid_at(now_ms - window)
        rows = store.scan(queue, start, SCAN_ROWS)
        if len(rows) < SCAN_ROWS:  # every record from `start` on
            if len(rows) >= limit or start is None:
                return rows[::-1][:limit]
            too_few = window
            window = window * 16 if too_many is None else (window + too_many) // 2
        else:
            too_many = window
            window = (too_few + window) // 2
        if too_many is not None and too_many - too_few <= 1:
            break
    newest: deque[Task] = deque(maxlen=limit)  # packed tighter than a millisecond: walk forward
    start = _pid_at(now_ms - (too_many or 0))
    for _ in range(MAX_WALK_PAGES):
        rows = store.scan(queue, start, SCAN_ROWS)
        newest.extend(task for task in rows if task.pid != start)
        if len(rows) < SCAN_ROWS:
            break
        start = rows[-1].pid
    return list(newest)[::-1]


def _died(state: EngineState, dead: QueueState, pid: str) -> bool:
    """Whether `pid` has a dead letter in `dead`: in memory when the engine holds every one."""
    if not (dead.complete and not dead.leased):
        return bool(dead_letters_of(state, dead.name, pid))
    prefix = dead_letter_prefix(pid)
    for key in dead.available.irange(minimum=prefix):
        if not key.startswith(prefix):
            return False
        if (dead.available[key].headers or {}).get(DEAD_PID_HEADER) == pid:
            return True
    return False


def sink_state(state: EngineState, queue: str, pid: str, now: float) -> str:
    dead = state.queues.get(dead_queue_of(queue))
    if dead is not None and _died(state, dead, pid):
        return "failed"
    queue_state = state.queues.get(queue)
    task = find(state, queue_state, pid) if queue_state is not None else None
    if task is None:
        return "done"
    if task.waiting_on > 0:
        return "waiting"
    if task.lease_expires_at is not None and task.lease_expires_at > now:
        return "running"
    return "queued"


def job_of(state: EngineState, record: dict[str, Any], now: float) -> dict[str, Any]:
    counts = dict.fromkeys(SINK_STATES, 0)
    for sink in record["sinks"]:
        if isinstance(sink, list) and len(sink) == 2 and all(isinstance(part, str) and part for part in sink):
            counts[sink_state(state, sink[0], sink[1], now)] += 1
    return {
        "id": record["id"], "name": record.get("name"), "created_at": record.get("created_at"),
        "nodes": record.get("nodes"), "queues": record.get("queues") or {}, "state": job_state(counts),
        "sinks": counts, "sinks_truncated": bool(record.get("sinks_truncated")),
        "queues_truncated": bool(record.get("queues_truncated")),
    }


def jobs(state: EngineState, registry: str, limit: int, now: float) -> list[dict[str, Any]]:
    found = []
    for task in newest_records(state, registry, limit, now):
        try:
            record = read_record(task.data)
        except ValueError:
            continue  # not a job record: nothing to show
        found.append(job_of(state, record, now))
    return found


def install(observer: Registrar) -> None:
    host = observer.host
    limits = host.limits

    async def handle(request: HttpRequest, principal: Principal | None) -> Any:
        asked = query(request)
        limit = params.integer(asked, "limit", DEFAULT_JOBS, 1, MAX_JOBS)
        registry = validate_queue(params.text(asked, "registry") or JOBS_QUEUE, limits, "registry")
        require_admin(principal, registry)
        return {"jobs": jobs(engine_of(host).state, registry, limit, now_of(host))}

    observer.add_json("/api/jobs", handle)

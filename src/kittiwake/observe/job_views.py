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

A user writes what it likes into its own registry, so a record is read as
untrusted:

* one that does not decode as a job record (not JSON, not an object with an
  `id` and a list of `sinks`) is left out and counted: `skipped`; fields of
  the wrong type show as null;
* a sink is looked up only where the viewer could look the task up itself
  (`reads.GET`: consume, produce or admin) on both its queue and the queue's
  dead letters; otherwise it counts as `hidden`, and a job with a hidden
  sink shows the state `hidden`: only the record's own fields, nothing of
  the queues it names;
* at most `MAX_SINKS` sinks of one record are looked up (what `Job.submit`
  writes at most; `sinks_truncated` says when there were more), and at most
  `MAX_SINK_LOOKUPS` in one request: once those are spent the jobs left
  show the state `unknown` and the answer says `truncated`;
* the work runs in slices (`slices`): the scans of the registry and every
  few hundred sinks yield to the event loop.

The answer: `{"jobs": [...], "skipped": N, "truncated": bool}`.
"""

from __future__ import annotations

from collections import deque
from itertools import islice
from typing import TYPE_CHECKING, Any, Callable, Generator

from kittiwake.app.job_records import MAX_NAME_CHARS, MAX_QUEUES, MAX_SINKS, SINK_STATES, job_state, read_record
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
from kittiwake.observe.reads import GET, engine_of, may_read, now_of, require_admin
from kittiwake.observe.slices import Budget, BudgetSpent, Slices

if TYPE_CHECKING:
    from kittiwake.observe.registrar import Registrar

DEFAULT_JOBS = 20
MAX_JOBS = 100
SCAN_ROWS = 500
FIRST_WINDOW_MS = 60_000
MAX_PROBES = 40
MAX_WALK_PAGES = 100
TIME_DIGITS = 13
MAX_SINK_LOOKUPS = 50_000  # per request: some 0.5 s of the loop, in slices
MAX_ID_CHARS = 200
HIDDEN, UNKNOWN = "hidden", "unknown"  # a sink on a queue the viewer may not read; a job not looked at
VIEW_SINK_STATES = (*SINK_STATES, HIDDEN)

StateOf = Callable[[], EngineState]


def _pid_at(ms: int) -> str | None:
    return f"{ms:0{TIME_DIGITS}d}" if ms > 0 else None


def newest_records(state: EngineState, queue: str, limit: int, now: float) -> list[Task]:
    """The `limit` records of `queue` with the highest pids, highest first (see the module docstring)."""
    steps = newest_steps(lambda: state, queue, limit, now)
    while True:
        try:
            next(steps)
        except StopIteration as stop:
            return stop.value


def newest_steps(state_of: StateOf, queue: str, limit: int, now: float) -> Generator[None, None, list[Task]]:
    """`newest_records`, a scan at a time: it yields after each scan (a place to give the loop a
    turn) and returns the records; each scan reads the engine's state anew."""
    if queue not in state_of().queues:
        return []
    now_ms = int(now * 1000)
    too_few, too_many = 0, None  # windows (ms) known to hold fewer than `limit` records / more than a scan
    window = FIRST_WINDOW_MS
    for _ in range(MAX_PROBES):
        start = _pid_at(now_ms - window)
        rows = state_of().store.scan(queue, start, SCAN_ROWS)
        yield
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
        rows = state_of().store.scan(queue, start, SCAN_ROWS)
        yield
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


def may_look_up(principal: Principal | None, queue: str) -> bool:
    """Whether the viewer could find out itself where a task of `queue` is: `get` on the queue and
    on its dead letters."""
    return may_read(principal, queue, GET) and may_read(principal, dead_queue_of(queue), GET)


def _text(value: Any, most: int) -> str | None:
    return value if isinstance(value, str) and len(value) <= most else None


def _number(value: Any) -> float | int | None:
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def record_fields(record: dict[str, Any]) -> dict[str, Any]:
    """What a job shows of its record as written, each field checked for its type (else null)."""
    queues = record.get("queues")
    queues = queues if isinstance(queues, dict) else {}
    shown = {name: count for name, count in islice(queues.items(), MAX_QUEUES)
             if isinstance(name, str) and isinstance(_number(count), int)}
    nodes = record.get("nodes")
    return {
        "id": record["id"], "name": _text(record.get("name"), MAX_NAME_CHARS),
        "created_at": _number(record.get("created_at")),
        "nodes": nodes if isinstance(_number(nodes), int) else None, "queues": shown,
        "sinks_truncated": record.get("sinks_truncated") is True or len(record["sinks"]) > MAX_SINKS,
        "queues_truncated": record.get("queues_truncated") is True or len(queues) > MAX_QUEUES,
    }


async def job_of(state_of: StateOf, principal: Principal | None, record: dict[str, Any], now: float,
                 slices: Slices, budget: Budget) -> dict[str, Any]:
    """A job as the view shows it: its record's fields, its sinks' states and its own; raises
    `BudgetSpent` once the request's lookups are spent."""
    counts = dict.fromkeys(VIEW_SINK_STATES, 0)
    state = state_of()
    for sink in islice(record["sinks"], MAX_SINKS):
        if not (isinstance(sink, list) and len(sink) == 2 and all(isinstance(part, str) and part for part in sink)):
            continue
        queue, pid = sink
        if not may_look_up(principal, queue):
            counts[HIDDEN] += 1
            continue
        budget.charge()
        counts[sink_state(state, queue, pid, now)] += 1
        if await slices.pause():
            state = state_of()  # passes ran meanwhile: read what they committed
    return {**record_fields(record), "state": HIDDEN if counts[HIDDEN] else job_state(counts), "sinks": counts}


def decoded(task: Task) -> dict[str, Any] | None:
    """The job record `task` holds, or None when it holds something else."""
    try:
        record = read_record(task.data)
    except (ValueError, RecursionError):  # not JSON (or not UTF-8), nested past the parser, not a record
        return None
    return record if len(record["id"]) <= MAX_ID_CHARS else None


async def jobs(state_of: StateOf, principal: Principal | None, registry: str, limit: int, now: float,
               slices: Slices | None = None) -> dict[str, Any]:
    """`/api/jobs`'s answer (see the module docstring)."""
    slices = slices or Slices()
    steps = newest_steps(state_of, registry, limit, now)
    while True:
        try:
            next(steps)
        except StopIteration as stop:
            tasks: list[Task] = stop.value
            break
        await slices.pause()
    budget = Budget(MAX_SINK_LOOKUPS, max_rows=0)  # a lookup returns no rows
    found: list[dict[str, Any]] = []
    skipped = 0
    for task in tasks:
        record = decoded(task)
        if record is None:
            skipped += 1
            continue
        if budget.spent:
            job = None
        else:
            try:
                job = await job_of(state_of, principal, record, now, slices, budget)
            except BudgetSpent:
                job = None
        if job is None:  # not looked at: the record's own fields only
            job = {**record_fields(record), "state": UNKNOWN, "sinks": dict.fromkeys(VIEW_SINK_STATES, 0)}
        found.append(job)
        await slices.pause()
    return {"jobs": found, "skipped": skipped, "truncated": budget.spent}


def install(observer: Registrar) -> None:
    host = observer.host
    limits = host.limits

    async def handle(request: HttpRequest, principal: Principal | None) -> Any:
        asked = query(request)
        limit = params.integer(asked, "limit", DEFAULT_JOBS, 1, MAX_JOBS)
        registry = validate_queue(params.text(asked, "registry") or JOBS_QUEUE, limits, "registry")
        require_admin(principal, registry)
        return await jobs(lambda: engine_of(host).state, principal, registry, limit, now_of(host))

    observer.add_json("/api/jobs", handle)

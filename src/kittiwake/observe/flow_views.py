"""`GET /api/flows?limit=N`: the newest runs of every flow, each as `kittiwake flow status` shows it.

The runs' state is derived by `kittiwake.flow.runs` (`run_status`) from the
queues of the flow, as a client would; here it reads through `EngineReader`,
which answers the client's read calls it makes (`list_queues`, `peek`,
`get`) from the engine, without a network round trip or a group-commit
pass. `finish=False`: a view changes nothing, so a run found done but not
finished yet shows as done, and whoever finishes runs (a worker, a handle,
the CLI) still does. `flow.runs` reads one call after another, as much as a
record names, so it runs in a worker thread and each of its reads is
answered on the event loop (`loop_calls`): the loop is held one page of one
queue at a time.

With an auth file, a flow's runs show when the principal administers its
runs queue (`flow.<name>#runs`), as `list_queues` shows queues. A user writes
what it likes into its own runs queue, so a record is read as untrusted:

* a record (or its end in `…#runs.ended`) that does not decode, or that
  names no queue a broker has (a name or run id out of bounds), is left out
  and counted: `skipped`;
* a run's state is read only from queues the viewer could read itself:
  `peek` of a queue needs consume or admin on it, `get` consume, produce or
  admin (`reads.PEEK`, `reads.GET`). A run whose record names one the viewer
  may not read shows the state `hidden`: its record's own fields (run, flow,
  started, data directory, its steps with every count 0) and nothing read
  from any queue;
* a record of more than `MAX_STEPS` steps is not looked at; a run's reads
  stop at `MAX_RUN_CALLS` calls or `MAX_RUN_ROWS` rows, and a request's at
  `MAX_CALLS` or `MAX_ROWS`, the listing of the records included: such a run
  (and every run after a request's budget is spent) shows the state `unknown`
  with its record's fields, and the answer says `truncated`;
* at most `MAX_DEAD_SHOWN` dead jobs of a run are listed (its reason counts
  them all); the answer is encoded in the worker thread too.

The answer: `{"runs": [...], "skipped": N, "truncated": bool}`, newest first;
`limit` is at most `MAX_RUNS`.
"""

from __future__ import annotations

import asyncio
from collections import deque
from functools import partial
from typing import TYPE_CHECKING, Any, Callable, TypeVar

import msgspec

from kittiwake import errors
from kittiwake.broker.access import Principal
from kittiwake.broker.http_server import HttpRequest
from kittiwake.engine import inspection
from kittiwake.engine.queue_patterns import name_matcher
from kittiwake.engine.state import EngineState
from kittiwake.flow import records
from kittiwake.flow.records import RunRecord, RunStatus, StepProgress
from kittiwake.flow.runs import RUNS_PATTERN, run_status, scan_prefix
from kittiwake.json_records import to_json_value
from kittiwake.model import QueueInfo
from kittiwake.observe import params
from kittiwake.observe.http_json import query
from kittiwake.observe.loop_calls import LoopCalls
from kittiwake.observe.reads import GET, PEEK, engine_of, may_read, now_of, visibility
from kittiwake.observe.slices import Budget, BudgetSpent
from kittiwake.protocol.replies import TaskView

if TYPE_CHECKING:
    from kittiwake.observe.registrar import Registrar

T = TypeVar("T")

DEFAULT_RUNS = 20
MAX_RUNS = 100
MAX_STEPS = 200
MAX_RUN_CALLS = 2_000
MAX_RUN_ROWS = 100_000
MAX_CALLS = 20_000
MAX_ROWS = 300_000
MAX_DEAD_SHOWN = 100
NAMES_PER_CALL = 5_000  # queue names one `list_queues` call walks on the loop before it hands back
HIDDEN, UNKNOWN = "hidden", "unknown"
_PATTERN_SPECIAL = set(".^$*+?{}[]\\|()")


def literal_prefix(pattern: str) -> str:
    """The text every name an anchored pattern (`^…`) matches starts with ("" when there is none)."""
    if not pattern.startswith("^") or "|" in pattern:  # an alternative may start anywhere
        return ""
    prefix: list[str] = []
    index = 1
    while index < len(pattern):
        char = pattern[index]
        if char == "\\" and index + 1 < len(pattern) and not pattern[index + 1].isalnum():
            prefix.append(pattern[index + 1])
            index += 2
            continue
        if char in _PATTERN_SPECIAL:
            break
        prefix.append(char)
        index += 1
    if index < len(pattern) and pattern[index] in "*?{":  # the last character may repeat zero times
        prefix = prefix[:-1]
    return "".join(prefix)


class Hidden(Exception):
    """A read of a queue the viewer may not read: the run shows its record only."""


def _here(read: Callable[[], T]) -> T:
    return read()


class EngineReader:
    """`client.interfaces.QueueReads` (what `flow.runs` reads), answered from the engine at `now`
    for `principal`: each runs through `on_loop` (from the view's worker thread: on the event loop;
    by default, where it is called), reads the engine as it is then (`state_of`), raises `Hidden`
    for a queue the principal may not read, and is charged to `budget`."""

    def __init__(self, state_of: Callable[[], EngineState], now: float, principal: Principal | None, budget: Budget,
                 on_loop: Callable[[Callable[[], Any]], Any] = _here) -> None:
        self.state_of = state_of
        self.now = now
        self.principal = principal
        self.visible = visibility(principal)
        self.budget = budget
        self.on_loop = on_loop

    def list_queues(self, pattern: str | None = None, min_tasks: int = 0, limit: int = 1000) -> list[QueueInfo]:
        """Queues holding at least max(1, min_tasks) tasks whose name matches `pattern` and that the
        principal administers, in name order; an anchored literal start is looked up in the sorted
        names, not scanned for; each call on the loop walks at most `NAMES_PER_CALL` names."""
        matches = name_matcher(pattern) if pattern is not None else None
        prefix = literal_prefix(pattern) if pattern is not None else ""
        rows: list[QueueInfo] = []
        after: str | None = None
        while len(rows) < limit:
            read = partial(self._names, matches, prefix, max(1, min_tasks), after, limit - len(rows))
            page, after = self.on_loop(read)
            rows.extend(page)
            if after is None:
                break
        return rows

    def _names(self, matches: Callable[[str], bool] | None, prefix: str, floor: int, after: str | None,
               room: int) -> tuple[list[QueueInfo], str | None]:
        """Matching rows from the name after `after` on, and the name to go on after (None: done)."""
        self.budget.charge()
        state = self.state_of()
        queues = state.queues
        rows: list[QueueInfo] = []
        names = state.names.irange(minimum=after or prefix or None, inclusive=(after is None, True))
        for walked, name in enumerate(names, 1):
            if not name.startswith(prefix):
                break
            queue = queues[name]
            shown = matches is None or matches(name)
            if queue.size >= floor and shown and (self.visible is None or self.visible(name)):
                rows.append(QueueInfo(name, queue.size, len(queue.leased)))
                if len(rows) >= room:
                    break
            if walked >= NAMES_PER_CALL:
                return rows, name
        return rows, None

    def peek(self, queue: str, n: int = 10, from_pid: str | None = None) -> list[TaskView]:
        return self.on_loop(partial(self._peek, queue, n, from_pid))

    def _peek(self, queue: str, n: int, from_pid: str | None) -> list[TaskView]:
        if not may_read(self.principal, queue, PEEK):
            raise Hidden(queue)
        self.budget.charge()
        state = self.state_of()
        views, _ = inspection.scan_page(state, queue, min(n, state.limits.max_batch), from_pid, self.now)
        self.budget.charge(0, len(views))
        return [TaskView(**view) for view in views]

    def get(self, queue: str, pid: str) -> TaskView:
        return self.on_loop(partial(self._get, queue, pid))

    def _get(self, queue: str, pid: str) -> TaskView:
        if not may_read(self.principal, queue, GET):
            raise Hidden(queue)
        self.budget.charge(1, 1)
        return TaskView(**inspection.find_view(self.state_of(), queue, pid, self.now))


def record_only(record: RunRecord, state: str, reason: str) -> dict[str, Any]:
    """A run shown from its record alone, nothing read from its queues."""
    steps = [StepProgress(step=step.name, engine=step.engine) for step in record.steps[:MAX_STEPS]]
    return RunStatus(run=record.run, flow=record.flow, state=state, created_at=record.created_at,
                     data_dir=record.data_dir, steps=steps, reason=reason).to_dict()


def run_view(reader: EngineReader, request: Budget, record: RunRecord) -> dict[str, Any] | None:
    """One run as the view shows it (see the module docstring); None when its record is malformed."""
    if len(record.steps) > MAX_STEPS:
        steps = len(record.steps)
        return record_only(record, UNKNOWN, f"not looked at: its record has {steps} steps, over {MAX_STEPS}")
    if request.spent:
        return record_only(record, UNKNOWN, "not looked at: this view's reads were spent on the runs before it")
    reader.budget = request.part(MAX_RUN_CALLS, MAX_RUN_ROWS)
    try:
        status = run_status(reader, record, finish=False)
    except Hidden:
        return record_only(record, HIDDEN, "its record names queues you may not read")
    except BudgetSpent:
        return record_only(record, UNKNOWN, "not looked at in full: it reads more than this view may")
    except (errors.BadRequest, msgspec.DecodeError):  # a queue name or pid no broker has; an end that does not decode
        return None
    finally:
        reader.budget = request
    status.dead = status.dead[:MAX_DEAD_SHOWN]
    return status.to_dict()


def _newest(runs: list[RunRecord], limit: int) -> list[RunRecord]:
    return sorted(runs, key=lambda record: record.created_at, reverse=True)[:limit]


def runs_view(reader: EngineReader, limit: int) -> dict[str, Any]:
    """`/api/flows`'s answer: the newest `limit` runs over every flow the reader's principal sees."""
    request = reader.budget
    chosen: list[RunRecord] = []
    skipped = 0
    listed = True
    try:
        for row in reader.list_queues(RUNS_PATTERN):
            for view in deque(scan_prefix(reader, row.queue), maxlen=limit):  # the newest by run id
                try:
                    chosen.append(records.decode_record(view.data))
                except msgspec.DecodeError:  # not a run record (a ValidationError is one too)
                    skipped += 1
            chosen = _newest(chosen, limit)  # a group at a time, so at most 2 × `limit` records are held
    except BudgetSpent:
        listed = False  # the runs listed so far are shown
    runs = []
    for record in _newest(chosen, limit):
        shown = run_view(reader, request, record)
        if shown is None:
            skipped += 1
        else:
            runs.append(shown)
    truncated = not listed or any(run["state"] == UNKNOWN for run in runs)
    return {"runs": runs, "skipped": skipped, "truncated": truncated}


def install(observer: Registrar) -> None:
    host = observer.host
    calls = LoopCalls(asyncio.get_running_loop())
    observer.on_stop(calls.close)

    def encoded(reader: EngineReader, limit: int) -> msgspec.Raw:
        """The answer made and encoded in the worker thread: the loop only sends the bytes."""
        return msgspec.Raw(msgspec.json.encode(to_json_value(runs_view(reader, limit))))

    async def flows(request: HttpRequest, principal: Principal | None) -> Any:
        limit = params.integer(query(request), "limit", DEFAULT_RUNS, 1, MAX_RUNS)
        reader = EngineReader(lambda: engine_of(host).state, now_of(host), principal, Budget(MAX_CALLS, MAX_ROWS),
                              calls.call)
        return await calls.run(partial(encoded, reader, limit))

    observer.add_json("/api/flows", flows)

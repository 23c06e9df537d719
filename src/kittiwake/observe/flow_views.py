"""`GET /api/flows?limit=N`: the newest runs of every flow, each as `kittiwake flow status` shows it.

The runs' state is derived by `kittiwake.flow.runs` (`run_status`) from the
queues of the flow, as a client would; here it reads through `EngineReader`
(`observe.engine_reader`), which answers the client's read calls it makes
(`list_queues`, `peek`, `get`) from the engine, without a network round trip
or a group-commit pass. `finish=False`: a view changes nothing, so a run
found done but not finished yet shows as done, and whoever finishes runs (a
worker, a handle, the CLI) still does. `flow.runs` reads one call after another, as much as a
record names, so it runs in a worker thread and each of its reads is
answered on the event loop (`loop_calls`): the loop is held one page of one
queue, or one piece of a listing, at a time.

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
from typing import TYPE_CHECKING, Any

import msgspec

from kittiwake import errors
from kittiwake.broker.access import Principal
from kittiwake.broker.http_server import HttpRequest
from kittiwake.flow import records
from kittiwake.flow.records import RunRecord, RunStatus, StepProgress
from kittiwake.flow.runs import RUNS_PATTERN, run_status, scan_prefix
from kittiwake.json_records import to_json_value
from kittiwake.observe import params
from kittiwake.observe.engine_reader import EngineReader, Hidden
from kittiwake.observe.http_json import query
from kittiwake.observe.loop_calls import LoopCalls
from kittiwake.observe.reads import engine_of, now_of
from kittiwake.observe.slices import Budget, BudgetSpent

if TYPE_CHECKING:
    from kittiwake.observe.registrar import Registrar

DEFAULT_RUNS = 20
MAX_RUNS = 100
MAX_STEPS = 200
MAX_RUN_CALLS = 2_000
MAX_RUN_ROWS = 100_000
MAX_CALLS = 20_000
MAX_ROWS = 300_000
MAX_DEAD_SHOWN = 100
HIDDEN, UNKNOWN = "hidden", "unknown"


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

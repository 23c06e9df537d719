"""`GET /api/workers`: the worker registry's records, read from the engine.

Each worker process keeps one record in the registry queue (`_workers`, or
the `registry` parameter: a user whose rights cover only its prefix names
one there), decoded by the registry's own `record_of`
(`kittiwake.worker.registry`), so the page shows what `kittiwake workers
--all --json` shows. A record is alive while its lease runs; `last_beat_at`
is when the broker last renewed it. Needs ADMIN on the registry queue.

A user writes what it likes into its own registry: a record whose data or
note decodes to something else than a JSON object (or cannot be shown) is
left out and counted, `{"workers": [...], "skipped": N}`; the overview's
figures leave it out too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kittiwake.broker.access import Principal
from kittiwake.broker.http_server import HttpRequest
from kittiwake.constants import WORKERS_QUEUE
from kittiwake.engine import inspection
from kittiwake.engine.state import EngineState
from kittiwake.model import validate_queue
from kittiwake.observe import params
from kittiwake.observe.http_json import query
from kittiwake.observe.reads import engine_of, now_of, require_admin
from kittiwake.protocol.replies import TaskView
from kittiwake.worker.registry import WorkerRecord, record_of

if TYPE_CHECKING:
    from kittiwake.observe.registrar import Registrar

MAX_RECORDS = 1000


def decoded(view: TaskView) -> WorkerRecord | None:
    """The worker record `view` holds, or None when it holds something else."""
    try:
        record = record_of(view)
        if not (isinstance(record.info, dict) and isinstance(record.status, dict)):
            return None
        record.to_dict()  # each field it shows can be made
    except (ValueError, TypeError, RecursionError):  # JSON nested past the parser, `running` not a list, ...
        return None
    return record


def worker_records(state: EngineState, registry: str, now: float) -> tuple[list[WorkerRecord], int]:
    """Up to `MAX_RECORDS` records of the registry, by worker id, alive or not; and how many
    records were left out as malformed."""
    views, _ = inspection.scan_page(state, registry, MAX_RECORDS, None, now)
    records = [decoded(TaskView(**view)) for view in views]
    found = [record for record in records if record is not None]
    return found, len(records) - len(found)


def summary(records: list[WorkerRecord]) -> dict[str, int]:
    """The overview's figures: live workers, their slots, and the slots running a task."""
    alive = [record for record in records if record.alive]
    slots = sum(record.info.get("concurrency") or 0 for record in alive if isinstance(record.info.get("concurrency"), int))
    return {"alive": len(alive), "slots": slots, "busy": sum(len(record.running) for record in alive)}


def install(observer: Registrar) -> None:
    host = observer.host

    async def workers(request: HttpRequest, principal: Principal | None) -> Any:
        registry = validate_queue(params.text(query(request), "registry") or WORKERS_QUEUE, host.limits,
                                  "registry")
        require_admin(principal, registry)
        records, skipped = worker_records(engine_of(host).state, registry, now_of(host))
        return {"workers": [record.to_dict() for record in records], "skipped": skipped}

    observer.add_json("/api/workers", workers)

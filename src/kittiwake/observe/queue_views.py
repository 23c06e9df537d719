"""The queue views of the JSON API: the table, one queue, its tasks and its dead letters.

* `GET /api/queues?filter=&sort=&order=&offset=&limit=&dead=&after=`: the
  table, paged on the broker by position (`offset`) or, sorted by name, past
  a name (`after`; the answer's `next_after` starts the next page)
  (`queue_list`);
* `GET /api/queue?name=Q`: the row's figures, the 5-minute rates, the mean
  time from lease to dequeue, and up to `LEASES_SHOWN` leases (who holds
  which task, since when, until when);
* `GET /api/queue/tasks?name=Q&from=PID&limit=N`: tasks in pid order, as peek
  shows them (`inspection.view`), from `from` on; `next` is where the next
  page starts;
* `GET /api/queue/dead?name=Q&from=PID&limit=N`: the dead letters of Q (Q or
  `Q.dead` may be named), each with the pid it had, why it died, its attempts
  and when it died.

A queue the principal does not administer is FORBIDDEN; a queue that holds
nothing, not even dead letters, is QUEUE_NOT_FOUND (404). Pages of tasks stop
early at the broker's reply budget (`Limits.max_reply_data_bytes`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kittiwake.broker.access import Principal
from kittiwake.broker.http_server import HttpRequest
from kittiwake.engine import inspection
from kittiwake.model import DEAD_PID_HEADER, DEAD_REASON_HEADER, DEAD_SUFFIX, dead_queue_of
from kittiwake.observe import params
from kittiwake.observe.http_json import query
from kittiwake.observe.queue_list import QueuesQuery, queue_page, queue_row
from kittiwake.observe.reads import engine_of, known, now_of, require_admin, visibility

if TYPE_CHECKING:
    from kittiwake.observe.registrar import Registrar

LEASES_SHOWN = 50
DEFAULT_TASKS = 50
MAX_TASKS = 200


def queues_of(observer: Registrar, principal: Principal | None, asked: QueuesQuery) -> dict[str, Any]:
    host = observer.host
    return queue_page(engine_of(host).state, asked, visibility(principal), now_of(host), observer.row_index,
                      principal)


def queue_of(observer: Registrar, principal: Principal | None, name: str) -> dict[str, Any]:
    """`/api/queue`'s answer for queue `name`."""
    host = observer.host
    require_admin(principal, name)
    state = engine_of(host).state
    now = now_of(host)
    known(state, name)
    queue, dead = state.queues.get(name), state.queues.get(dead_queue_of(name))
    stats = inspection.queue_stats(name, queue, dead, LEASES_SHOWN, now)
    row = queue_row(state, name, visibility(principal), now)
    row.update(
        enqueue_rate_5m=stats.enqueue_rate_5m,
        lease_rate_5m=stats.lease_rate_5m,
        dequeue_rate_5m=stats.dequeue_rate_5m,
        avg_lease_secs=stats.avg_lease_secs,
    )
    leased = [
        {"pid": lease.pid, "worker": lease.worker, "peer": lease.peer, "leased_at": lease.leased_at,
         "expires_at": lease.expires_at}
        for lease in stats.leased_sample
    ]
    return {"stats": row, "leased": leased}


def tasks_of(observer: Registrar, principal: Principal | None, asked: dict[str, str]) -> dict[str, Any]:
    host = observer.host
    limits = host.limits
    name = params.queue(asked, "name", limits)
    from_pid = params.pid(asked, "from", limits, name)
    limit = params.integer(asked, "limit", DEFAULT_TASKS, 1, MAX_TASKS)
    require_admin(principal, name)
    state = engine_of(host).state
    known(state, name)
    views, next_pid = inspection.scan_page(state, name, limit, from_pid, now_of(host))
    return {"tasks": views, "next": next_pid}


def _dead_letter(view: dict[str, Any]) -> dict[str, Any]:
    headers = dict(view["headers"] or {})
    task_pid = headers.pop(DEAD_PID_HEADER, view["pid"])
    reason = headers.pop(DEAD_REASON_HEADER, None)
    return {"pid": view["pid"], "task_pid": task_pid, "reason": reason, "attempts": view["attempts"],
            "died_at": view["enqueued_at"], "data": view["data"], "headers": headers or None}


def dead_of(observer: Registrar, principal: Principal | None, asked: dict[str, str]) -> dict[str, Any]:
    host = observer.host
    limits = host.limits
    name = params.queue(asked, "name", limits)
    original = name[: -len(DEAD_SUFFIX)] if name.endswith(DEAD_SUFFIX) else name
    dead_name = dead_queue_of(original)
    from_pid = params.pid(asked, "from", limits, dead_name)
    limit = params.integer(asked, "limit", DEFAULT_TASKS, 1, MAX_TASKS)
    require_admin(principal, dead_name)
    state = engine_of(host).state
    known(state, original)
    views, next_pid = inspection.scan_page(state, dead_name, limit, from_pid, now_of(host))
    return {"dead": [_dead_letter(view) for view in views], "next": next_pid}


def install(observer: Registrar) -> None:
    limits = observer.host.limits

    async def queues(request: HttpRequest, principal: Principal | None) -> Any:
        return queues_of(observer, principal, QueuesQuery.of(query(request), limits))

    async def queue(request: HttpRequest, principal: Principal | None) -> Any:
        return queue_of(observer, principal, params.queue(query(request), "name", limits))

    async def tasks(request: HttpRequest, principal: Principal | None) -> Any:
        return tasks_of(observer, principal, query(request))

    async def dead(request: HttpRequest, principal: Principal | None) -> Any:
        return dead_of(observer, principal, query(request))

    observer.add_json("/api/queues", queues)
    observer.add_json("/api/queue", queue)
    observer.add_json("/api/queue/tasks", tasks)
    observer.add_json("/api/queue/dead", dead)

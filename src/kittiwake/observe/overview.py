"""`GET /api/overview`: the broker, its queues summed, and its workers, in one small answer.

* `broker`: version, store kind, when it started, whether auth is on and who
  asks, its ports, and its node name when it is a cluster node (`node`, else
  None: the page shows its cluster link only on a node);
* `totals`: sums over every queue the principal sees (`queue_list.totals`):
  queues (the rows `/api/queues` lists), tasks, available, leased, blocked,
  and dead letters;
* `workers`: live workers of the default registry (`_workers`), their slots,
  and the slots running a task (zeros for a user without ADMIN on it).

One pass over the engine's queues: the stream sends it once a second.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import kittiwake
from kittiwake.broker.access import Permission, Principal
from kittiwake.broker.http_server import HttpRequest
from kittiwake.constants import WORKERS_QUEUE
from kittiwake.observe import queue_list, worker_views
from kittiwake.observe.reads import engine_of, now_of, visibility

if TYPE_CHECKING:
    from kittiwake.observe.registrar import Registrar


def overview(observer: Registrar, principal: Principal | None) -> dict[str, Any]:
    host = observer.host
    state = engine_of(host).state
    now = now_of(host)
    started_at = host.started_at
    workers = {"alive": 0, "slots": 0, "busy": 0}
    if principal is None or principal.may(Permission.ADMIN, WORKERS_QUEUE):
        workers = worker_views.summary(worker_views.worker_records(state, WORKERS_QUEUE, now)[0])
    return {
        "broker": {
            "version": kittiwake.__version__,
            "store": host.store_kind,
            "started_at": started_at,
            "uptime_secs": max(0.0, now - started_at) if started_at is not None else None,
            "auth": observer.auth.enabled,
            "user": principal.user if principal is not None else None,
            "http_port": host.ports().get("http_port"),
            "port": host.ports().get("port"),
            "node": observer.cluster.node if observer.cluster is not None else None,
        },
        "totals": queue_list.totals(state, visibility(principal), observer.row_index, principal),
        "workers": workers,
    }


def install(observer: Registrar) -> None:
    async def handle(request: HttpRequest, principal: Principal | None) -> Any:
        return overview(observer, principal)

    observer.add_json("/api/overview", handle)

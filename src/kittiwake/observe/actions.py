"""The JSON API's actions on tasks: requeue or purge dead letters, cancel tasks.

Each is a POST whose JSON body names a queue and the pids to act on, and
each runs as the protocol request a client would send (`RequeueDead`,
`PurgeDead`, `Cancel`) through the broker's group commit
(`broker.local_calls.LocalCalls`), so its answer comes after the change is
durable, and with an auth file only after `access.authorise` let the
principal make it (ADMIN on the queue, and on its dead-letter queue for
requeue and purge):

* `POST /api/queue/requeue-dead {"queue", "pids"}` → `{"requeued": n}`: dead
  letters (their own pids, or a task's pid for all its dead letters) go back
  to the queue under their original pids;
* `POST /api/queue/purge-dead {"queue", "pids"}` → `{"purged": n}`;
* `POST /api/queue/cancel {"queue", "pids", "reason"?}` → `{"cancelled": n}`:
  each task, and every task waiting on it, goes to the dead letters, with the
  reason (default `CANCELLED by <user>`).

Each answer also lists `failed`: the items the broker refused, with its code
and message (a dead letter whose task exists again: TASK_EXISTS; a pid that
names nothing: TASK_NOT_FOUND). A queue that holds nothing, dead letters
included, is QUEUE_NOT_FOUND (404). Requeue and purge go a page of dead
letters per request, as many requests as the pids need (each is bounded
and checked before anything moves: a dead letter that cannot be requeued
as stored stays, with BAD_DEAD_LETTER).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kittiwake.broker.access import Principal, authorise
from kittiwake.broker.http_server import HttpRequest
from kittiwake.broker.local_calls import LocalCalls, request_id
from kittiwake.constants import CANCELLED_REASON
from kittiwake.model import DEAD_SUFFIX, ItemOutcome, dead_queue_of
from kittiwake.observe import params
from kittiwake.observe.http_json import JsonHandler, body
from kittiwake.observe.reads import engine_of, known
from kittiwake.protocol import messages as m

if TYPE_CHECKING:
    from kittiwake.observe.registrar import Registrar


def _failed(outcomes: list[ItemOutcome]) -> list[dict[str, Any]]:
    return [{"pid": outcome.pid, "code": outcome.code, "message": outcome.message}
            for outcome in outcomes if not outcome.ok]


def install(observer: Registrar) -> None:
    host = observer.host
    limits = host.limits
    calls = LocalCalls(host)

    def names(fields: dict[str, Any]) -> tuple[str, str]:
        """(queue, dead-letter queue) named by the body; either name may be given."""
        name = params.queue(fields, "queue", limits)
        original = name[: -len(DEAD_SUFFIX)] if name.endswith(DEAD_SUFFIX) else name
        return original, dead_queue_of(original)

    async def run(request: m.Request, principal: Principal | None, peer: str | None, queue: str,
                  check: bool = True) -> Any:
        """The result of `request`, once the principal may make it and (`check`) `queue` holds something."""
        if principal is not None:
            request = authorise(principal, request)  # FORBIDDEN before anything is said of the queue
        if check:
            known(engine_of(host).state, queue)
        return await calls.call(request, peer)

    def dead_letters(kind: type[m.RequeueDead] | type[m.PurgeDead], op: str, done: str) -> JsonHandler:
        """requeue-dead or purge-dead: the same body, the same answer but for its word."""

        async def act(request: HttpRequest, principal: Principal | None) -> Any:
            fields = body(request)
            queue, dead = names(fields)
            pids = params.pids(fields, "pids", limits, dead)
            outcomes: list[ItemOutcome] = []
            after: str | None = None
            while True:  # a request a page: the broker bounds each (`engine.dead_letter_walk`)
                page = await run(kind(id=request_id(), op=op, queue=queue, pids=pids, after_pid=after),
                                 principal, request.peer, queue, check=after is None)
                outcomes += page.outcomes
                if page.next_pid is None:
                    break
                after = page.next_pid
            return {done: sum(1 for outcome in outcomes if outcome.ok), "failed": _failed(outcomes)}

        return act

    async def cancel(request: HttpRequest, principal: Principal | None) -> Any:
        fields = body(request)
        queue = params.queue(fields, "queue", limits)
        pids = params.pids(fields, "pids", limits, queue)
        reason = params.text(fields, "reason", limits.max_header_value_bytes)
        if reason is None:
            reason = f"{CANCELLED_REASON} by {principal.user}" if principal is not None else CANCELLED_REASON
        outcomes = await run(m.Cancel(id=request_id(), op="cancel", tasks=[(queue, pid) for pid in pids],
                                      reason=reason), principal, request.peer, queue)
        return {"cancelled": sum(1 for outcome in outcomes if outcome.ok), "failed": _failed(outcomes)}

    observer.add_json("/api/queue/requeue-dead", dead_letters(m.RequeueDead, "requeue_dead", "requeued"), write=True)
    observer.add_json("/api/queue/purge-dead", dead_letters(m.PurgeDead, "purge_dead", "purged"), write=True)
    observer.add_json("/api/queue/cancel", cancel, write=True)

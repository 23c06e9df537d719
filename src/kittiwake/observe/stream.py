"""`GET /api/stream`: server-sent events, so the dashboard is pushed what changed and never polls.

One stream per open page (`EventSource`), chosen by `view`:

* every stream: `event: overview`, the `/api/overview` answer, when it
  changed (checked once a second; the uptime alone is no change);
* `view=queues` with `/api/queues`'s parameters: also `event: queues`, that
  page of the table, when it changed (its `generated_at` alone is no change);
* `view=queue&name=Q`: also `event: queue`, the `/api/queue` answer;
* every stream: `event: history`, the newest point of `/api/history` at the
  start, then each new one (one every 10 seconds, within a second of it);
  a comment `: ping` every 15 seconds keeps proxies from closing it; and
  `retry:` at the start tells the browser how soon to reconnect.

Each event's data is one line of JSON. A view that fails while the stream
runs (its queue deleted, or empty and idle for five minutes: QUEUE_NOT_FOUND;
the store failed: UNAVAILABLE)
sends `event: error` with `{"error": {"code", "message"}}` once, and the
stream goes on; bad parameters, unknown queues and missing rights are
refused before the stream starts, with the JSON API's statuses.

Rights are those of the principal as it is at each tick, as a request to the
REST API gets them: credentials are checked again before each tick's views
are made (`HttpAuth.principal`; the broker re-reads the auth file within a
second of a change, `broker.auth`). So a right taken away stops the events
it allowed at the next tick: a queue view sends `event: error` FORBIDDEN
once (and the queue again if the right comes back), the table and the
overview leave the queue out. A session that ended (logged out, its user
removed or given a new token), or credentials in a header that no longer
hold, end the stream: `event: error` UNAUTHORIZED, then the end. While
credentials cannot be checked (UNAVAILABLE: the broker is busy checking
others) a tick sends nothing. The stream ends when the broker stops.

Cost: the views a stream sends are computed at most twice a second however
many streams ask the same of them (`SharedViews`, keyed by view, parameters
and principal: a reload of the auth file makes new principals, so nothing
computed under rights that changed is shared on), so ten pages on 100K
queues cost what two do. A client that stops
reading is cut off by the HTTP server once 1 MiB waits unsent
(`HttpServer.max_stream_buffer_bytes`).
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any, AsyncIterator, Callable, Hashable

import msgspec

from kittiwake import errors
from kittiwake.broker.access import Principal
from kittiwake.broker.http_server import HttpRequest, HttpResponse
from kittiwake.json_records import to_json_value
from kittiwake.observe import params
from kittiwake.observe.http_json import query
from kittiwake.observe.overview import overview
from kittiwake.observe.queue_list import QueuesQuery
from kittiwake.observe.queue_views import queue_of, queues_of

if TYPE_CHECKING:
    from kittiwake.observe.registrar import Registrar

TICK_SECS = 1.0
PING_SECS = 15.0
RETRY_MS = 3000
SHARED_MAX_AGE_SECS = 0.5
SHARED_MAX_ENTRIES = 1024
VIEWS = ("overview", "queues", "queue")
VOLATILE_FIELDS = ("generated_at", "uptime_secs")
EVENT_STREAM = "text/event-stream; charset=utf-8"

View = Callable[[Principal | None], Any]  # the event's value for the principal as it is now


class SharedViews:
    """Views computed once for every stream that asks the same within `max_age_secs`."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, max_age_secs: float = SHARED_MAX_AGE_SECS) -> None:
        self.clock = clock
        self.max_age_secs = max_age_secs
        self._views: dict[Hashable, tuple[float, Any]] = {}
        self.computed = 0  # views computed (not shared), for tests

    def get(self, key: Hashable, make: Callable[[], Any]) -> Any:
        now = self.clock()
        hit = self._views.get(key)
        if hit is not None and now - hit[0] < self.max_age_secs:
            return hit[1]
        value = make()  # a failure is not kept: each stream sees it
        self.computed += 1
        if len(self._views) >= SHARED_MAX_ENTRIES:
            self._views = {k: v for k, v in self._views.items() if now - v[0] < self.max_age_secs}
        self._views[key] = (now, value)
        return value


def event(name: str, value: Any) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + msgspec.json.encode(to_json_value(value)) + b"\n\n"


def _unchanging(value: Any) -> Any:
    """What counts as a change: the value less the fields that move every second on their own."""
    if not isinstance(value, dict):
        return value
    return {key: _unchanging(item) for key, item in value.items() if key not in VOLATILE_FIELDS}


def _error(error: errors.KittiwakeError) -> dict[str, Any]:
    return {"error": {"code": error.code, "message": error.message}}


def install(observer: Registrar) -> None:
    shared = SharedViews()

    def views_of(asked: dict[str, str]) -> list[tuple[str, View]]:
        """The events this stream sends, each with how to make its value; checks the parameters.
        Shared views are keyed by the principal itself (compared by identity, and kept alive by
        the key, so its id is never reused while the entry lives)."""
        made: list[tuple[str, View]] = [
            ("overview", lambda principal: shared.get(("overview", principal), lambda: overview(observer, principal))),
        ]
        view = params.choice(asked, "view", VIEWS, "overview")
        if view == "queues":
            queues = QueuesQuery.of(asked, observer.host.limits)
            made.append(("queues", lambda principal: shared.get(("queues", principal, queues),
                                                                lambda: queues_of(observer, principal, queues))))
        elif view == "queue":
            name = params.queue(asked, "name", observer.host.limits)
            made.append(("queue", lambda principal: shared.get(("queue", principal, name),
                                                               lambda: queue_of(observer, principal, name))))
        return made

    async def events(request: HttpRequest, views: list[tuple[str, View]]) -> AsyncIterator[bytes]:
        clock = time.monotonic
        yield f"retry: {RETRY_MS}\n\n".encode()
        sent: dict[str, Any] = {}
        next_ping = clock() + PING_SECS
        history_sent = None
        while observer.host.accepting:
            checked = True
            try:
                principal = await observer.auth.principal(request)  # the rights as they are now
            except errors.Unauthorized as error:
                yield event("error", _error(error))
                return
            except errors.KittiwakeError:
                checked = False  # the broker is busy checking other credentials: nothing this tick
            if checked:
                for name, make in views:
                    try:
                        kind, value = name, make(principal)
                    except errors.KittiwakeError as error:
                        kind, value = "error", _error(error)
                    fingerprint = (kind, _unchanging(value))
                    if sent.get(name) != fingerprint:
                        sent[name] = fingerprint
                        yield event(kind, value)
                point = observer.history_point()
                if point is not None and point is not history_sent:
                    history_sent = point
                    yield event("history", point)
            now = clock()
            if now >= next_ping:
                next_ping = now + PING_SECS
                yield b": ping\n\n"
            await asyncio.sleep(TICK_SECS)

    async def stream(request: HttpRequest) -> HttpResponse:
        if request.method != "GET":
            raise _MethodNotAllowed("/api/stream takes GET")
        asked = query(request)
        principal = await observer.auth.principal(request)
        views = views_of(asked)
        for _, make in views:
            make(principal)  # refused now, with its status, rather than as the stream's first event
        return HttpResponse(
            200,
            content_type=EVENT_STREAM,
            headers=[("cache-control", "no-store"), ("x-content-type-options", "nosniff"), ("x-accel-buffering", "no")],
            stream=events(request, views),
        )

    observer.add_raw("/api/stream", stream)


class _MethodNotAllowed(errors.BadRequest):
    code = "METHOD_NOT_ALLOWED"

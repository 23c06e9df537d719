"""The dashboard, its JSON API and the metrics as a face of the broker (`kittiwake broker --http-port N`).

An `http_face.HttpFace` whose routes are the `Observer`'s (`kittiwake.observe`).
It owns its settings: how many queues get series of their own in `/metrics`
(`metrics_queue_series`), the host names it answers to, and on a cluster node
the source of its cluster page (`cluster`, `cluster_view.ClusterSource`). Requests to it are
small JSON (a login, an action on some tasks), so a body is capped at
`MAX_BODY_BYTES`; with an auth file, a body over the head check's size is
read only from a client whose credentials are valid — a live session cookie
or an `Authorization` the broker's `Authenticator` accepts, checked as any
request's (`http_json.HttpAuth.principal`) — and refused with 401
`UNAUTHORIZED` (503 `UNAVAILABLE` when the broker is too busy checking
credentials) before it is read.
"""

from __future__ import annotations

from typing import Awaitable

from kittiwake import errors
from kittiwake.broker.faces import Host
from kittiwake.broker.http_face import HttpFace
from kittiwake.broker.http_hosts import HostNames
from kittiwake.broker.http_server import HttpRequest, HttpResponse, Routes
from kittiwake.constants import DEFAULT_METRICS_QUEUE_SERIES, MAX_METRICS_QUEUE_SERIES
from kittiwake.observe import Observer
from kittiwake.observe.cluster_source import ClusterSource
from kittiwake.observe.http_json import error_response

MAX_BODY_BYTES = 256 * 1024


class ObserveFace(HttpFace):
    """The dashboard, the JSON API, /metrics and /healthz on their own HTTP port."""

    name = "http"
    what = "the dashboard and metrics port"

    def __init__(self, port: int, *, metrics_queue_series: int = DEFAULT_METRICS_QUEUE_SERIES,
                 host_names: HostNames | None = None, cluster: ClusterSource | None = None) -> None:
        if (isinstance(metrics_queue_series, bool) or not isinstance(metrics_queue_series, int)
                or not 0 <= metrics_queue_series <= MAX_METRICS_QUEUE_SERIES):
            raise ValueError(f"metrics_queue_series must be in [0, {MAX_METRICS_QUEUE_SERIES}], "
                             f"got {metrics_queue_series!r}")
        super().__init__(port, host_names=host_names, max_body_bytes=MAX_BODY_BYTES)
        self.metrics_queue_series = metrics_queue_series
        self.cluster = cluster
        self.observer: Observer | None = None

    async def install(self, host: Host, routes: Routes) -> None:
        self.observer = Observer(host, self.metrics_queue_series, self.cluster)
        self.observer.install(routes)

    def halt(self) -> None:
        if self.observer is not None:
            self.observer.stop()

    async def stop(self) -> None:
        await super().stop()
        if self.cluster is not None:
            await self.cluster.close()

    def check_head(self, request: HttpRequest) -> Awaitable[HttpResponse | None] | None:
        if self.observer is None or not self.observer.auth.enabled:
            return None
        return self._check_credentials(request)

    async def _check_credentials(self, request: HttpRequest) -> HttpResponse | None:
        """None when the request's credentials are valid; else the refusal, before its body is read."""
        assert self.observer is not None
        try:
            await self.observer.auth.principal(request)
        except errors.Unauthorized as exc:
            return error_response(errors.Unauthorized(f"log in before sending a body of this size: {exc.message}"))
        except errors.KittiwakeError as exc:
            return error_response(exc)
        return None

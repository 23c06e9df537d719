"""The dashboard, its JSON API and the metrics as a face of the broker (`kittiwake broker --http-port N`).

An `http_face.HttpFace` whose routes are the `Observer`'s (`kittiwake.observe`).
It owns its settings: how many queues get series of their own in `/metrics`
(`metrics_queue_series`), the host names it answers to, and on a cluster node
the source of its cluster page (`cluster`, `cluster_view.ClusterSource`). Requests to it are
small JSON (a login, an action on some tasks), so a body is capped at
`MAX_BODY_BYTES`; with an auth file, a body over the head check's size from a
client that shows no credentials at all (no cookie, no `Authorization`) is
refused before it is read.
"""

from __future__ import annotations

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
        self._auth = False

    async def install(self, host: Host, routes: Routes) -> None:
        self.observer = Observer(host, self.metrics_queue_series, self.cluster)
        self.observer.install(routes)
        self._auth = host.authenticator is not None

    def halt(self) -> None:
        if self.observer is not None:
            self.observer.stop()

    async def stop(self) -> None:
        await super().stop()
        if self.cluster is not None:
            await self.cluster.close()

    def check_head(self, request: HttpRequest) -> HttpResponse | None:
        if self._auth and "authorization" not in request.headers and "cookie" not in request.headers:
            return error_response(errors.Unauthorized("log in before sending a body of this size"))
        return None

"""What people and their tools see of a running broker, on its HTTP port (`kittiwake broker --http-port`).

`ObserveFace` (`face`) is the broker face of the port (`--http-port`): it
builds an `Observer` on the host the broker gives it (`broker.faces.Host`),
which registers the routes of each view on the port's `Routes` and stops their
upkeep when the broker stops. The views:

* `/api/...`: the JSON API (`http_json.JsonApi`: auth, methods, errors;
  each view registers its paths with `observer.add_json`): the overview
  (`overview`), the queues (`queue_views`, `queue_list`), the workers
  (`worker_views`), the jobs of apps (`job_views`), the runs of flows
  (`flow_views`, which reads as a client would through `engine_reader`), the
  actions on tasks (`actions`), and the events the page is pushed
  (`stream`); what views read and who sees what is in `reads`, how the views
  over records users write stay within bounds in `slices` and `loop_calls`;
* `/metrics`: Prometheus metrics (`metrics`), from what committed passes
  did (`observations`, fed by the group commit's `on_commit`) and the
  engine's queues at each scrape; `/api/history`: the last hour, a point
  per 10 s (`history`, sampled by a timer the observer runs);
* `/` and `/static/...`: the dashboard page (`pages`);
* `/healthz`: 200 while the broker takes requests, 503 once it stops (no
  credentials needed).

Everything here reads the broker's engine on the event loop between group-
commit passes (a pass commits before it returns, so what is read is what is
durable) or sends requests through the group commit like any client;
nothing opens a second path to the store. A view that may read much yields
to the loop between slices of its work (`slices`), or runs in a worker
thread that hands each of its reads to the loop (`loop_calls`).
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any, Awaitable, Callable

from kittiwake.broker.http_server import HttpRequest, HttpResponse, Routes, text_response
from kittiwake.engine.tally import Tally
from kittiwake.observe import actions, cluster_view, flow_views, job_views, overview, queue_list, queue_views, stream, worker_views
from kittiwake.observe.history import History, HistorySampler, Point
from kittiwake.observe.http_json import HttpAuth, JsonApi, JsonHandler
from kittiwake.observe.metrics import BrokerMetrics
from kittiwake.constants import DEFAULT_METRICS_QUEUE_SERIES
from kittiwake.observe.cluster_source import ClusterSource
from kittiwake.observe.observations import Observations
from kittiwake.observe.pages import Pages

if TYPE_CHECKING:
    from kittiwake.broker.faces import Host


class Observer:
    """The HTTP faces of one broker."""

    def __init__(self, host: Host, metrics_queue_series: int = DEFAULT_METRICS_QUEUE_SERIES,
                 cluster: ClusterSource | None = None) -> None:
        self.host = host
        self.cluster = cluster  # a cluster node's view of its cluster; None on a broker that is no node
        self.auth = HttpAuth(host)
        self.api = JsonApi(self.auth)
        self._stops: list[Callable[[], Any]] = []
        self.observations = Observations(metrics_queue_series)
        self.metrics = BrokerMetrics(self, self.observations)
        self.history = History()
        self.sampler = HistorySampler(self.history, self.observations.snapshot, also=self._evict_idle_series)
        self.on_stop(host.on_commit(self._committed))
        self.row_index = queue_list.RowIndex()  # the queue table's selections, shared by its views

    def install(self, routes: Routes) -> None:
        routes.add("/healthz", self._health)
        routes.add("/metrics", self.metrics.handle)
        routes.add("/api/", self.api.handle)
        self.api.add("/api/", self._index)
        self.api.add("/api/history", self._history)
        self.sampler.start(asyncio.get_running_loop())
        self.on_stop(self.sampler.stop)
        overview.install(self)
        queue_views.install(self)
        worker_views.install(self)
        job_views.install(self)
        flow_views.install(self)
        actions.install(self)
        stream.install(self)
        if self.cluster is not None:
            cluster_view.install(self, self.cluster)
        routes.add("/", Pages().handle)  # the longest-prefix fallback: other paths are its 404s

    def add_json(self, path: str, handler: JsonHandler, *, write: bool = False) -> None:
        """Serve `handler` at the exact API path `path` (`http_json.JsonApi.add`)."""
        self.api.add(path, handler, write=write)

    def add_raw(self, path: str, handler: Callable[[HttpRequest], Awaitable[HttpResponse]]) -> None:
        """Serve a path whose handler answers whole HTTP responses itself (`http_json.JsonApi.add_raw`)."""
        self.api.add_raw(path, handler)

    def on_stop(self, stop: Callable[[], Any]) -> None:
        self._stops.append(stop)

    def stop(self) -> None:
        for stop in self._stops:
            stop()
        self._stops.clear()

    async def _index(self, request: HttpRequest, principal: Any) -> dict[str, Any]:
        """`GET /api/`: the API's paths (each documented in docs/observability.md, "The JSON API")."""
        return {"paths": self.api.paths}

    def history_point(self) -> Point | None:
        """The newest point of `/api/history` (the stream sends each once)."""
        points = self.history.points
        return points[-1] if points else None

    async def _history(self, request: HttpRequest, principal: Any) -> dict[str, Any]:
        """`GET /api/history`: the last hour of the whole broker, a point per 10 s (`history`)."""
        return self.history.view()

    def _committed(self, tally: Tally, commit_secs: float | None) -> None:
        self.observations.add_pass(tally, commit_secs, time.monotonic())

    def _evict_idle_series(self) -> None:
        engine = self.host.reads()
        if engine is None:
            return  # nothing known of what queues hold

        def holds_tasks(name: str) -> bool:
            queue = engine.state.queues.get(name)
            return queue is not None and queue.size > 0

        self.observations.evict_idle(time.monotonic(), holds_tasks)

    async def _health(self, request: HttpRequest) -> HttpResponse:
        if self.host.accepting:
            return text_response(200, "ok")
        return text_response(503, "stopping")

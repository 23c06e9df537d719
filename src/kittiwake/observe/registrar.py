"""What a view of the dashboard may use of the face that serves it: the narrow seam views install through.

Each view module (`overview`, `queue_views`, `worker_views`, `job_views`,
`flow_views`, `actions`, `stream`, `metrics`) has an `install(registrar)`
that adds its paths and reads the broker through `registrar.host`
(`kittiwake.broker.faces.Host`). The `Observer` (`kittiwake.observe`) is the
one registrar there is; views name only this protocol, so none of them
imports the package that assembles them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Awaitable, Callable, Protocol

from kittiwake.broker.http_server import HttpRequest, HttpResponse

if TYPE_CHECKING:
    from kittiwake.broker.faces import Host
    from kittiwake.observe.cluster_source import ClusterSource
    from kittiwake.observe.history import Point
    from kittiwake.observe.http_json import HttpAuth, JsonHandler
    from kittiwake.observe.queue_list import RowIndex


class Registrar(Protocol):
    """Where a view adds its paths, and what it reads."""

    @property
    def host(self) -> Host: ...  # the broker: its engine between passes, limits, clock, commits

    @property
    def auth(self) -> HttpAuth: ...  # credentials of HTTP requests

    @property
    def cluster(self) -> ClusterSource | None: ...  # the cluster a node belongs to; None: not a node

    @property
    def row_index(self) -> RowIndex: ...  # the queue table's selections, shared by the views that page it

    def add_json(self, path: str, handler: JsonHandler, *, write: bool = False) -> None:
        """Serve `handler` at the exact API path `path` (JSON in and out, auth done)."""

    def add_raw(self, path: str, handler: Callable[[HttpRequest], Awaitable[HttpResponse]]) -> None:
        """Serve a path whose handler answers whole HTTP responses itself (a stream)."""

    def on_stop(self, stop: Callable[[], Any]) -> None:
        """Call `stop` when the broker stops accepting."""

    def history_point(self) -> Point | None:
        """The newest point of the last hour's history."""

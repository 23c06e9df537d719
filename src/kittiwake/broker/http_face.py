"""An HTTP port as a face: the part every HTTP face shares (the SQS API, the dashboard).

`HttpFace` owns one `http_server.HttpServer` and puts it under the host's
budgets (`broker.faces`): connections take slots of the broker's one
connection cap, bodies are charged to its read budget as they arrive, and
only the allowed `Host` names are answered (`http_hosts`). A subclass says
what it serves: `install(host, routes)` adds its routes (and starts its
upkeep), `halt()` stops that upkeep when the broker stops accepting,
`check_head(request)` may refuse a large body from its head alone (at once,
or later: an awaitable, while the body waits unread), and
`exposure_warnings` says what an operator should know at start.
"""

from __future__ import annotations

import asyncio
from typing import Awaitable

from kittiwake.broker.faces import Exposure, Host
from kittiwake.broker.http_hosts import HostNames
from kittiwake.broker.http_server import DEFAULT_MAX_BODY_BYTES, HttpRequest, HttpResponse, HttpServer, Routes
from kittiwake.broker.security import is_loopback

ANSWERS_FLUSH_SECS = 0.05  # at stop: handlers answered by the broker's last pass write their answers


class HttpFace:
    """One HTTP port of the broker; subclasses give it its routes."""

    name = "http"
    what = "the HTTP port"  # how warnings name it

    def __init__(self, port: int, *, host_names: HostNames | None = None,
                 max_body_bytes: int = DEFAULT_MAX_BODY_BYTES) -> None:
        if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
            raise ValueError(f"{self.name} port must be in [0, 65535], got {port!r}")
        self.port = port
        self.host_names = host_names if host_names is not None else HostNames()
        self.max_body_bytes = max_body_bytes
        self.server: HttpServer | None = None

    async def install(self, host: Host, routes: Routes) -> None:
        """Add this face's routes; start its upkeep."""
        raise NotImplementedError

    def halt(self) -> None:
        """Stop this face's upkeep (the broker stops accepting)."""

    def check_head(self, request: HttpRequest) -> HttpResponse | Awaitable[HttpResponse | None] | None:
        """A refusal of a request whose large body has not been read yet; None lets it come; an awaitable
        of either answers later."""
        return None

    async def start(self, host: Host) -> int:
        routes = Routes()
        await self.install(host, routes)
        self.server = HttpServer(
            routes, name=self.name, max_body_bytes=self.max_body_bytes, slots=host.connection_slots,
            budget=host.read_budget, host_names=self.host_names, check_head=self.check_head,
        )
        return await self.server.start(host.address, self.port)

    def stop_accepting(self) -> None:
        if self.server is not None:
            self.server.stop_accepting()
        self.halt()

    async def stop(self) -> None:
        if self.server is None:
            return
        if self.server.connections:
            await asyncio.sleep(ANSWERS_FLUSH_SECS)
        await self.server.stop()

    def connections(self) -> int:
        return len(self.server.connections) if self.server is not None else 0

    def exposure_warnings(self, exposure: Exposure) -> list[str]:
        if is_loopback(exposure.address):
            return []
        if not exposure.auth:
            return [f"{self.what} listens on {exposure.address} without --auth-file: anyone who can reach it "
                    "can read, change and delete every queue"]
        return [f"{self.what} listens on {exposure.address} without TLS: credentials and task data cross the "
                "network unencrypted (put it behind a TLS proxy, or keep it on a trusted network)"]

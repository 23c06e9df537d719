"""The SQS API as a face of the broker (`kittiwake broker --sqs-port N`, `kittiwake sqs`).

An `http_face.HttpFace` whose one route is the SQS service (`service`): it
reads its queue registry through the host's group commit when it starts, so
the broker starts it after its own ports; it warns at start when it listens
beyond the loopback without an auth file (anyone may then use every queue)
or with one (SigV4 signs requests; it does not encrypt them).
"""

from __future__ import annotations

from kittiwake.broker.faces import Host
from kittiwake.broker.http_face import HttpFace
from kittiwake.broker.http_hosts import HostNames
from kittiwake.broker.http_server import HttpRequest, HttpResponse, Routes
from kittiwake.sqs.service import MAX_REQUEST_BYTES, SqsService


class SqsFace(HttpFace):
    """The SQS API on its own HTTP port."""

    name = "sqs"
    what = "the SQS API"

    def __init__(self, port: int, *, host_names: HostNames | None = None) -> None:
        super().__init__(port, host_names=host_names, max_body_bytes=MAX_REQUEST_BYTES)
        self.service: SqsService | None = None

    async def install(self, host: Host, routes: Routes) -> None:
        self.service = SqsService(host)
        await self.service.start(routes)

    def halt(self) -> None:
        if self.service is not None:
            self.service.stop()

    def check_head(self, request: HttpRequest) -> HttpResponse | None:
        return self.service.check_head(request) if self.service is not None else None

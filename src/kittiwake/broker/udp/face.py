"""The UDP port as a face of the broker (`kittiwake broker --udp-port N`).

Starts the listener (`listener`) on the host's address,
hands it the host (its datagrams' requests go to the same group commit, under
the same access rules) and says at start what an operator should know: beyond
the loopback, without an auth file anyone may use every queue, and with one,
tokens and task data still travel in clear (there is no TLS for datagrams).
"""

from __future__ import annotations

import asyncio

from kittiwake.broker.faces import Exposure, Host
from kittiwake.broker.security import is_loopback
from kittiwake.broker.udp.listener import UdpListener


class UdpFace:
    """The broker's UDP port."""

    name = "udp"

    def __init__(self, port: int) -> None:
        if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
            raise ValueError(f"udp port must be in [0, 65535], got {port!r}")
        self.port = port
        self.listener: UdpListener | None = None

    async def start(self, host: Host) -> int:
        loop = asyncio.get_running_loop()
        _, listener = await loop.create_datagram_endpoint(
            lambda: UdpListener(host, host.authenticator), local_addr=(host.address, self.port)
        )
        self.listener = listener
        assert listener.transport is not None
        port: int = listener.transport.get_extra_info("sockname")[1]
        return port

    def stop_accepting(self) -> None:
        if self.listener is not None:
            self.listener.stopping = True  # take no more datagrams; replies of the last pass still go out

    async def stop(self) -> None:
        if self.listener is not None:
            self.listener.close()

    def connections(self) -> int:
        return len(self.listener.sessions) if self.listener is not None else 0

    def exposure_warnings(self, exposure: Exposure) -> list[str]:
        if is_loopback(exposure.address):
            return []
        if not exposure.auth:
            return [f"the UDP port listens on {exposure.address} without --auth-file: anyone who can reach it "
                    "can read, change and delete every queue, and forged sources can aim replies at others"]
        return [f"the UDP port listens on {exposure.address}: tokens and task data travel in clear in its "
                "datagrams (there is no TLS for UDP; keep it on a trusted network)"]

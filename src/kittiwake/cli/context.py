"""What every CLI command shares: the broker URL (and on a cluster the near node), the output mode,
and a client made on demand."""

from __future__ import annotations

import socket
from dataclasses import dataclass, field

import click

from kittiwake.client import Client


@dataclass(slots=True)
class CliContext:
    """Global options, parsed once by the group and read by commands."""

    url: str | None
    near: str | None  # on a cluster: the node leases ask first (None: one on this host)
    json: bool
    connect_timeout_secs: float
    _client: Client | None = field(default=None, repr=False)

    def client(self) -> Client:
        """A client of the broker at --url (near --near), opened on first use and closed when the command ends."""
        if self._client is None:
            self._client = Client(self.url, connect_timeout=self.connect_timeout_secs, near=self.near)
            click.get_current_context().find_root().call_on_close(self._client.close)
        return self._client


def default_worker_id() -> str:
    """How a lease taken from the command line names its holder in the broker's stats."""
    return f"kittiwake-cli@{socket.gethostname()}"


pass_cli = click.make_pass_decorator(CliContext)

"""A kombu transport on Kittiwake, so Celery (or any kombu program) runs on a Kittiwake broker.

    broker_url = "kittiwake://127.0.0.1:7370"      # kittiwakes:// for TLS; user:token@ for auth

Importing this package registers the URL schemes `kittiwake` and `kittiwakes`
with kombu (`kombu.transport.TRANSPORT_ALIASES`). Without the import, name the
transport instead: Celery's `broker_transport = "kittiwake.kombu:Transport"`
(also `Celery(..., broker_transport=...)`), or kombu's
`Connection(url, transport="kittiwake.kombu:Transport")`. The `celery`
command imports it by itself (the `celery.commands` entry point `kittiwake`);
a process that only sends tasks needs one of the two, because kombu 5.7 reads
no entry points for transports and refuses an import path in a URL's scheme.
What the transport does and promises: `transport.py`; its options: `options.py`.
"""

from __future__ import annotations

from kombu.transport import TRANSPORT_ALIASES

from kittiwake.kombu.names import SCHEME, TLS_SCHEME
from kittiwake.kombu.transport import Transport

TRANSPORT_PATH = "kittiwake.kombu:Transport"


def register_aliases() -> None:
    """Let kombu resolve `kittiwake://` and `kittiwakes://` to this transport."""
    TRANSPORT_ALIASES.setdefault(SCHEME, TRANSPORT_PATH)
    TRANSPORT_ALIASES.setdefault(TLS_SCHEME, TRANSPORT_PATH)


register_aliases()

__all__ = ["TRANSPORT_PATH", "Transport", "register_aliases"]

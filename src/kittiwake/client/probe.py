"""Whether a broker is there now: one short connection attempt and a ping, for code that is stopping.

A client waits for a broker that went away: it retries its connection for
`connect_timeout` (10 s by default) before a call fails, which is right while
work goes on and wrong once a program is told to stop. A stopping worker asks
`broker_answers` first; if the broker is gone it closes its clients, which
ends every call waiting to reconnect at once, and stops without waiting for
it (`kittiwake.worker.stopping`, `kittiwake.kombu.shutdown`).

Gone means no connection within `connect_secs`, or one dropped before the
reply. A broker that connects but answers slowly is there (a busy disk, a
long fsync): only a dead or unreachable one is given up on. Over UDP
(``kwu://``) nothing connects, so there gone means no answer within
`connect_secs`.
"""

from __future__ import annotations

from kittiwake import errors
from kittiwake.client.sync_client import Client
from kittiwake.client.url import BrokerAddress

PROBE_CONNECT_SECS = 1.0  # a local broker refuses at once; a remote one has a second to accept
PROBE_REPLY_SECS = 5.0  # a connected broker that takes longer than this to answer a ping is still there


def broker_answers(
    address: BrokerAddress | str, *, connect_secs: float = PROBE_CONNECT_SECS, reply_secs: float = PROBE_REPLY_SECS
) -> bool:
    """False when the broker at `address` cannot be reached now (see the module docstring)."""
    with Client(address, connect_timeout=connect_secs) as probe:
        udp = probe.address.udp
        try:
            probe.ping(timeout=connect_secs if udp else reply_secs)
        except (errors.BrokerUnreachable, errors.ConnectionLost):
            return False
        except errors.RequestTimeout:
            return not udp
        except errors.KittiwakeError:
            return True  # it answered, if only to refuse
    return True

"""Which channel serves which URL: the scheme of a parsed broker address picks it.

    kw://, kws://   the TCP pool (`pool.ConnectionPool`; asyncio: `async_pool.AsyncPool`)
    kwu://          the UDP channel (`udp_channel.UdpChannel`), blocking `Client` only
    kw://a,b,c      a cluster (several nodes in the URL, or a cluster map in the settings):
    kws://a,b,c     `cluster_channel.ClusterChannel`; asyncio: `async_cluster_channel.AsyncClusterChannel`

`Client` and `AsyncClient` open their channel here and talk to nothing else,
so a new way out (a cluster router, say) is one more entry in `CHANNELS` and
`ASYNC_CHANNELS` and one more scheme in `url.SCHEMES`. A scheme with no
asyncio channel is refused by `AsyncClient` with `BadRequest`, before any
connection is attempted.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kittiwake import errors
from kittiwake.client.async_pool import AsyncPool
from kittiwake.client.backoff import DEFAULT_CONNECT_TIMEOUT_SECS
from kittiwake.client.async_cluster_channel import AsyncClusterChannel
from kittiwake.client.channel import AsyncChannel, Channel
from kittiwake.client.cluster_channel import ClusterChannel
from kittiwake.cluster.cluster_map import ClusterMap
from kittiwake.client.pool import DEFAULT_MAX_IDLE_CONNECTIONS, ConnectionPool
from kittiwake.client.udp_channel import UdpChannel
from kittiwake.client.url import SCHEME, TLS_SCHEME, UDP_SCHEME, BrokerAddress
from kittiwake.client.wire import DEFAULT_MAX_REPLY_BYTES


@dataclass(frozen=True, slots=True)
class ChannelSettings:
    """The client's options a channel may use (each channel takes those that apply to it)."""

    connect_timeout_secs: float = DEFAULT_CONNECT_TIMEOUT_SECS
    max_idle_connections: int = DEFAULT_MAX_IDLE_CONNECTIONS  # the blocking TCP pool's
    max_reply_bytes: int = DEFAULT_MAX_REPLY_BYTES  # TCP: a larger reply frame breaks the connection
    cluster_map: ClusterMap | None = None  # a cluster's map, given: no need to fetch it (plain brokers too)
    near: str | None = None  # a cluster's node that leases ask first (default: one on this host)


ChannelOpener = Callable[[BrokerAddress, ChannelSettings], Channel]
AsyncChannelOpener = Callable[[BrokerAddress, ChannelSettings], AsyncChannel]


def _is_cluster(address: BrokerAddress, settings: ChannelSettings) -> bool:
    return address.cluster or settings.cluster_map is not None


def _tcp(address: BrokerAddress, settings: ChannelSettings) -> Channel:
    if _is_cluster(address, settings):
        return ClusterChannel(
            address,
            connect_timeout_secs=settings.connect_timeout_secs,
            max_idle=settings.max_idle_connections,
            max_reply_bytes=settings.max_reply_bytes,
            cluster_map=settings.cluster_map,
            near=settings.near,
        )
    return ConnectionPool(
        address,
        connect_timeout_secs=settings.connect_timeout_secs,
        max_idle=settings.max_idle_connections,
        max_reply_bytes=settings.max_reply_bytes,
    )


def _udp(address: BrokerAddress, settings: ChannelSettings) -> Channel:
    if settings.cluster_map is not None:
        raise errors.BadRequest(f"a cluster is reached over {SCHEME}:// or {TLS_SCHEME}://, not {UDP_SCHEME}://")
    return UdpChannel(address)


def _async_tcp(address: BrokerAddress, settings: ChannelSettings) -> AsyncChannel:
    if _is_cluster(address, settings):
        return AsyncClusterChannel(
            address,
            connect_timeout_secs=settings.connect_timeout_secs,
            max_reply_bytes=settings.max_reply_bytes,
            cluster_map=settings.cluster_map,
            near=settings.near,
        )
    return AsyncPool(
        address, connect_timeout_secs=settings.connect_timeout_secs, max_reply_bytes=settings.max_reply_bytes
    )


CHANNELS: dict[str, ChannelOpener] = {SCHEME: _tcp, TLS_SCHEME: _tcp, UDP_SCHEME: _udp}
ASYNC_CHANNELS: dict[str, AsyncChannelOpener] = {SCHEME: _async_tcp, TLS_SCHEME: _async_tcp}
# why a scheme has no asyncio channel, said to whoever asks for one
_NOT_ASYNC = {UDP_SCHEME: "kwu:// (UDP) is served by the blocking Client only; use kw:// here"}


def open_channel(address: BrokerAddress, settings: ChannelSettings) -> Channel:
    """The blocking channel for `address` (nothing is sent yet, except that UDP binds its socket)."""
    return CHANNELS[address.scheme](address, settings)


def open_async_channel(address: BrokerAddress, settings: ChannelSettings) -> AsyncChannel:
    """The asyncio channel for `address`; BadRequest for a scheme that has none."""
    opener = ASYNC_CHANNELS.get(address.scheme)
    if opener is None:
        raise errors.BadRequest(
            _NOT_ASYNC.get(address.scheme, f"{address.scheme}:// is served by the blocking Client only")
        )
    return opener(address, settings)

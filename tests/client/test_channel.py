"""Which channel serves which URL (`client/schemes.py`), and the clients talking only to it."""

from __future__ import annotations

import asyncio

import pytest

from kittiwake import AsyncClient, Client, errors
from kittiwake.client.async_pool import AsyncPool
from kittiwake.client.pool import ConnectionPool
from kittiwake.client.schemes import (
    ASYNC_CHANNELS,
    CHANNELS,
    ChannelSettings,
    open_async_channel,
    open_channel,
)
from kittiwake.client.udp_channel import UdpChannel
from kittiwake.client.url import SCHEMES, parse_url
from support.broker_process import BrokerProcess


def test_every_scheme_the_parser_accepts_has_a_channel() -> None:
    assert set(CHANNELS) == set(SCHEMES)
    assert set(ASYNC_CHANNELS) <= set(SCHEMES)


@pytest.mark.parametrize(
    ("url", "kind"),
    [
        ("kw://127.0.0.1:7400", ConnectionPool),
        ("kws://u:t@broker.example:7401", ConnectionPool),
        ("kwu://127.0.0.1:7402", UdpChannel),
    ],
)
def test_the_scheme_picks_the_blocking_channel(url: str, kind: type) -> None:
    address = parse_url(url)
    channel = open_channel(address, ChannelSettings())
    try:
        assert isinstance(channel, kind)
        assert channel.address == address and not channel.closed
    finally:
        channel.close()
    assert channel.closed


def test_the_settings_reach_the_tcp_pool() -> None:
    settings = ChannelSettings(connect_timeout_secs=1.5, max_idle_connections=2, max_reply_bytes=4096)
    channel = open_channel(parse_url("kw://127.0.0.1:7400"), settings)
    assert isinstance(channel, ConnectionPool)
    assert (channel.connect_timeout_secs, channel.max_idle, channel.max_reply_bytes) == (1.5, 2, 4096)
    channel.close()


@pytest.mark.parametrize("url", ["kw://127.0.0.1:7400", "kws://127.0.0.1:7401"])
def test_tcp_schemes_have_the_async_pool(url: str) -> None:
    settings = ChannelSettings(connect_timeout_secs=1.5, max_reply_bytes=4096)
    channel = open_async_channel(parse_url(url), settings)
    assert isinstance(channel, AsyncPool)
    assert (channel.connect_timeout_secs, channel.max_reply_bytes) == (1.5, 4096)


def test_udp_has_no_async_channel_and_async_client_refuses_it() -> None:
    with pytest.raises(errors.BadRequest, match="blocking Client only"):
        open_async_channel(parse_url("kwu://127.0.0.1:7402"), ChannelSettings())
    with pytest.raises(errors.BadRequest, match="kwu://"):
        AsyncClient("kwu://127.0.0.1:7402")


def test_the_clients_talk_to_the_channel_their_url_picks() -> None:
    with Client("kwu://127.0.0.1:7402") as udp, Client("kw://127.0.0.1:7400") as tcp:
        assert isinstance(udp._channel, UdpChannel)
        assert isinstance(tcp._channel, ConnectionPool)
    assert udp._channel.closed and tcp._channel.closed
    client = AsyncClient("kw://127.0.0.1:7400")
    assert isinstance(client._channel, AsyncPool)
    asyncio.run(client.close())
    assert client._channel.closed


def test_the_batching_producer_over_udp_is_refused_clearly() -> None:
    # it pipelines batches on a TCP connection of its own; over kwu:// its thread used to die
    # on the missing connection, leaving every sent() to wait out its timeout
    with Client("kwu://127.0.0.1:7402") as client:
        with pytest.raises(errors.BadRequest, match="kw:// or kws://"):
            client.producer()


def test_both_clients_answer_through_their_channels(broker: BrokerProcess) -> None:
    with Client(broker.url) as client:
        assert client.enqueue("channel", b"sync").queue == "channel"

    async def scenario() -> list[bytes]:
        async with AsyncClient(broker.url) as client:
            await client.enqueue("channel", b"async")
            return [task.data for task in await client.peek("channel")]

    assert asyncio.run(scenario()) == [b"sync", b"async"]

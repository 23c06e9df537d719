"""Clients of the binary protocol: `Client` (blocking, thread-safe) and `AsyncClient` (asyncio, pipelined).

Both take a broker URL `kw://host:port` and offer the same operations with
the same keywords and typed results (the reply records of
`kittiwake.protocol.replies`); see `sync_client.py` for the behaviour they
share (single item vs batch, errors, timeouts, reconnects). Each sends its
calls (`calls.py`) through a channel (`channel.py`: the TCP pools `pool.py`
and `async_pool.py`, the UDP channel `udp_channel.py`) that the URL's scheme
picks (`schemes.py`).
"""

from kittiwake.client.async_client import AsyncClient
from kittiwake.client.async_producer import AsyncProducer, AsyncSending
from kittiwake.client.producer import Producer, ProducerStats, Sending
from kittiwake.client.producer_settings import ProducerSettings
from kittiwake.client.sync_client import Client
from kittiwake.client.url import DEFAULT_URL, URL_ENV, BrokerAddress, parse_url
from kittiwake.model import LeaseRef
from kittiwake.protocol.replies import (
    DeadLetterPage,
    EnqueueOutcome,
    ItemOutcome,
    LeasedTask,
    LeaseSample,
    QueueInfo,
    QueueStats,
    TaskView,
    UpdateResult,
)

__all__ = [
    "AsyncClient",
    "AsyncProducer",
    "AsyncSending",
    "BrokerAddress",
    "Client",
    "DEFAULT_URL",
    "DeadLetterPage",
    "EnqueueOutcome",
    "ItemOutcome",
    "LeaseRef",
    "LeaseSample",
    "LeasedTask",
    "Producer",
    "ProducerSettings",
    "ProducerStats",
    "QueueInfo",
    "QueueStats",
    "Sending",
    "TaskView",
    "URL_ENV",
    "UpdateResult",
    "parse_url",
]

"""Clients of the binary protocol: `Client` (blocking, thread-safe) and `AsyncClient` (asyncio, pipelined).

Both take a broker URL `kw://host:port` and offer the same operations with
the same keywords and typed results; see `sync_client.py` for the behaviour
they share (single item vs batch, errors, timeouts, reconnects).
"""

from kittiwake.client.async_client import AsyncClient
from kittiwake.client.results import (
    EnqueueOutcome,
    ItemOutcome,
    LeasedTask,
    LeaseRef,
    LeaseSample,
    QueueInfo,
    QueueStats,
    TaskView,
    UpdateResult,
)
from kittiwake.client.sync_client import Client
from kittiwake.client.url import DEFAULT_URL, URL_ENV, BrokerAddress, parse_url

__all__ = [
    "AsyncClient",
    "BrokerAddress",
    "Client",
    "DEFAULT_URL",
    "EnqueueOutcome",
    "ItemOutcome",
    "LeaseRef",
    "LeaseSample",
    "LeasedTask",
    "QueueInfo",
    "QueueStats",
    "TaskView",
    "URL_ENV",
    "UpdateResult",
    "parse_url",
]

"""Fixtures for client tests: each scenario runs through `Client` and through `AsyncClient`.

`AsyncClient` is driven from the same synchronous test code by `AsyncDriver`,
which runs each call to completion on a private event loop, so one scenario
checks both clients; pipelining and long-poll tests use `AsyncClient` directly.
"""

from __future__ import annotations

import asyncio
import inspect
from typing import Any, Iterator

import pytest

from kittiwake import AsyncClient, Client
from support.broker_process import BrokerProcess


class AsyncDriver:
    """An AsyncClient whose coroutine methods run to completion when called."""

    def __init__(self, url: str, **options: Any) -> None:
        self.loop = asyncio.new_event_loop()
        self.client = AsyncClient(url, **options)

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self.client, name)
        if not inspect.iscoroutinefunction(attribute):
            return attribute

        def run(*args: Any, **kwargs: Any) -> Any:
            return self.loop.run_until_complete(attribute(*args, **kwargs))

        return run

    def close(self) -> None:
        self.loop.run_until_complete(self.client.close())
        self.loop.close()


@pytest.fixture(params=["Client", "AsyncClient"])
def client(request: pytest.FixtureRequest, broker: BrokerProcess) -> Iterator[Any]:
    """A client of the test's broker: a `Client`, or an `AsyncClient` behind `AsyncDriver`."""
    if request.param == "Client":
        made: Any = Client(broker.url, worker="test-worker")
    else:
        made = AsyncDriver(broker.url, worker="test-worker")
    try:
        yield made
    finally:
        made.close()

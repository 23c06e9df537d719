"""A `Broker` running in the test process, for tests that must reach its store or engine.

The broker's loop runs in a background thread, so the test's blocking
sockets and clients talk to it over real TCP as to a broker subprocess. Use
it where a test injects something a subprocess cannot take: a failing store
(`support.faulty_store`), a bug patched into the engine.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any, Sequence

from kittiwake.broker import Broker, BrokerConfig
from kittiwake.broker.faces import Face
from support.broker_process import RawConnection


class InProcessBroker:
    """A `Broker` on a loop in a background thread, so blocking sockets can talk to it."""

    def __init__(self, config: BrokerConfig, store: Any, faces: Sequence[Face] = ()) -> None:
        self.loop = asyncio.new_event_loop()
        self.broker = Broker(config, store=store, faces=faces)
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        try:
            self.run(self.broker.start())
        except BaseException:
            self._stop_loop()
            raise

    @property
    def url(self) -> str:
        return f"kw://127.0.0.1:{self.broker.port}"

    def run(self, coroutine: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout=30)

    def call_in_loop(self, function: Any) -> Any:
        async def call() -> Any:
            return function()

        return self.run(call())

    def connect(self) -> RawConnection:
        return RawConnection("127.0.0.1", self.broker.port)

    def close(self) -> None:
        try:
            self.run(self.broker.stop())
        finally:
            self._stop_loop()

    def _stop_loop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
        self.loop.close()

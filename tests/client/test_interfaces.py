"""The declared read seam: the client and the dashboard's engine reader both satisfy `QueueReads`."""

from __future__ import annotations

from kittiwake import Client
from kittiwake.client.interfaces import QueueReads
from kittiwake.engine.state import EngineState
from kittiwake.model import Limits
from kittiwake.observe.flow_views import EngineReader
from kittiwake.observe.slices import Budget
from kittiwake.store.memory import MemoryStore


def test_the_client_and_the_engine_reader_are_queue_reads() -> None:
    client = Client("kw://127.0.0.1:1")  # connects lazily: nothing is dialled here
    try:
        assert isinstance(client, QueueReads)
    finally:
        client.close()
    state = EngineState(MemoryStore(), Limits(), head_tasks=10, cache_bytes=1 << 20)
    reader = EngineReader(lambda: state, 0.0, None, Budget(10, 10))
    assert isinstance(reader, QueueReads)
    assert not hasattr(reader, "enqueue")  # a reader offers reads only: no stand-in answers other calls

"""Fixtures of the engine tests: a hand-moved clock, and an engine over each store.

`store` runs a test over the in-memory twin and over SQLite in a temporary directory.
`restart(engine)` commits, reopens the store (SQLite: closes and opens the directory again) and
returns a new engine recovered from it, as a broker restart would.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterator

import pytest

from kittiwake.engine import Engine
from kittiwake.store.memory import MemoryStore
from kittiwake.store.sqlite import SqliteStore

from .harness import Clock


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MemoryStore | SqliteStore]:
    opened: list = []
    if request.param == "memory":
        store = MemoryStore()
    else:
        store = SqliteStore(tmp_path / "data", durability="os")
    opened.append(store)
    request.node.opened_stores = opened
    yield store
    for each in opened:
        each.close()


@pytest.fixture
def engine(store) -> Engine:
    return Engine(store)


@pytest.fixture
def restart(request: pytest.FixtureRequest, store, clock: Clock) -> Callable[..., Engine]:
    def restart(engine: Engine, **settings) -> Engine:
        engine.store.commit()
        new_store = engine.store
        if isinstance(new_store, SqliteStore):
            new_store.close()
            new_store = SqliteStore(new_store.directory, durability=new_store.durability)
            request.node.opened_stores[:] = [new_store]
        new = Engine(
            new_store,
            limits=engine.limits,
            head_tasks=settings.get("head_tasks", engine.head_tasks),
            cache_bytes=settings.get("cache_bytes", engine.cache_bytes),
        )
        new.recover(clock.now)
        return new

    return restart

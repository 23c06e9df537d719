"""The declared seams: the client and the dashboard's engine reader both satisfy `QueueReads`, the
client satisfies `QueueClient` with its own parameters, and the reader answers as the client does."""

from __future__ import annotations

import inspect
import time
from pathlib import Path
from typing import Callable

import pytest

from kittiwake import Client, errors
from kittiwake.broker.access import Principal
from kittiwake.broker.users import parse_grants
from kittiwake.client.interfaces import QueueClient, QueueReads
from kittiwake.engine import Engine
from kittiwake.engine.state import EngineState
from kittiwake.model import Limits, QueueStats
from kittiwake.observe.engine_reader import EngineReader, Hidden
from kittiwake.observe.slices import Budget, BudgetSpent
from kittiwake.store.memory import MemoryStore
from kittiwake.store.sqlite import SqliteStore
from support.auth_users import ALICE, BOB, ROOT, write_auth_file
from support.broker_process import BrokerProcess

RIGHTS = {"root": (ROOT[1], {"*": ["all"]}), "alice": (ALICE[1], {"alice.*": ["all"]}),
          "bob": (BOB[1], {"bob.*": ["all"]})}


def empty_reader(principal: Principal | None = None, budget: Budget | None = None) -> EngineReader:
    state = EngineState(MemoryStore(), Limits(), head_tasks=10, cache_bytes=1 << 20)
    return EngineReader(lambda: state, 0.0, principal, budget or Budget(10, 10))


def members(protocol: type) -> list[str]:
    return sorted(name for name in vars(protocol) if not name.startswith("_"))


def parameters(function: Callable[..., object]) -> list[tuple[str, object, object]]:
    """Each parameter's name, kind and default (annotations are the seams' own words for the same types)."""
    return [(p.name, p.kind, p.default) for p in inspect.signature(function).parameters.values()]


def test_the_client_and_the_engine_reader_are_queue_reads() -> None:
    client = Client("kw://127.0.0.1:1")  # connects lazily: nothing is dialled here
    try:
        assert isinstance(client, QueueReads) and isinstance(client, QueueClient)
    finally:
        client.close()
    reader = empty_reader()
    assert isinstance(reader, QueueReads) and not isinstance(reader, QueueClient)
    assert not hasattr(reader, "enqueue")  # a reader offers reads only: no stand-in answers other calls
    assert not hasattr(reader, "__getattr__")


def test_the_seams_declare_the_clients_methods_with_its_parameters() -> None:
    assert members(QueueReads) == ["get", "list_queues", "peek", "stats"]
    assert set(members(QueueReads)) <= set(members(QueueClient))
    for name in members(QueueClient):
        declared = getattr(QueueClient, name)
        if isinstance(declared, property):
            assert hasattr(Client("kw://127.0.0.1:1"), name), name
            continue
        assert parameters(declared) == parameters(getattr(Client, name)), name
    for name in members(QueueReads):  # the reader takes what a reader is promised: no `timeout`
        assert parameters(getattr(EngineReader, name)) == parameters(getattr(QueueReads, name)), name


def test_the_engine_reader_hides_what_its_viewer_may_not_read() -> None:
    alice = Principal("alice", parse_grants({"alice.*": ["all"]}, "alice"))
    reader = empty_reader(alice)
    for read in (lambda: reader.peek("bob.q"), lambda: reader.get("bob.q", "a"), lambda: reader.stats(["bob.q"]),
                 lambda: reader.stats("bob.q")):
        with pytest.raises(Hidden):
            read()
    assert reader.stats(["alice.q"])[0].size == 0
    spent = empty_reader(budget=Budget(2, 10))
    with pytest.raises(BudgetSpent):
        for _ in range(3):
            spent.stats(["alice.q"])


def comparable(stats: list[QueueStats]) -> list[tuple[str, int, int, int, int, int]]:
    """What a restart keeps of a queue's statistics (its rates are the engine's memory)."""
    return [(row.queue, row.size, row.available, row.leased, row.dead, row.blocked) for row in stats]


def test_the_engine_reader_answers_as_the_client_does(tmp_path: Path) -> None:
    """alice's answers from a broker over TCP, then from its data directory read in this process."""
    users = write_auth_file(tmp_path / "users.json", RIGHTS)
    with BrokerProcess(tmp_path / "data", auth_file=users) as broker:
        with Client(broker.client_url(*ROOT)) as root:
            root.enqueue_many([{"queue": "alice.a", "data": f"a{n}", "pid": f"p{n}"} for n in range(5)])
            root.enqueue_many([{"queue": "alice.b", "data": b"b", "pid": "only", "headers": {"k": "v"}},
                               {"queue": "bob.x", "data": b"x", "pid": "x"}])
            root.release(root.lease("alice.a", max_tasks=1), "bad", bury=True)  # p0 → alice.a.dead
        with Client(broker.client_url(*ALICE)) as client:
            listed = client.list_queues()
            listed_a = client.list_queues("^alice\\.a", 0, 1)
            peeked = client.peek("alice.a", 2, "p2")
            got = client.get("alice.b", "only")
            dead = client.get("alice.a.dead", "p0")
            stats = client.stats(["alice.a", "alice.b"])
            stats_by_pattern = client.stats(pattern="alice")
            with pytest.raises(errors.Forbidden):
                client.peek("bob.x")
    assert [row.queue for row in listed] == ["alice.a", "alice.a.dead", "alice.b"]

    store = SqliteStore(tmp_path / "data")
    try:
        engine = Engine(store)
        now = time.time()
        engine.recover(now)
        alice = Principal("alice", parse_grants({"alice.*": ["all"]}, "alice"))
        reader = EngineReader(lambda: engine.state, now, alice, Budget(100, 1000))
        assert reader.list_queues() == listed
        assert reader.list_queues("^alice\\.a", 0, 1) == listed_a
        assert reader.peek("alice.a", 2, "p2") == peeked
        assert (reader.get("alice.b", "only"), reader.get("alice.a.dead", "p0")) == (got, dead)
        assert comparable(reader.stats(["alice.a", "alice.b"])) == comparable(stats)
        assert comparable(reader.stats(pattern="alice")) == comparable(stats_by_pattern)
        with pytest.raises(Hidden):
            reader.peek("bob.x")
    finally:
        store.close()

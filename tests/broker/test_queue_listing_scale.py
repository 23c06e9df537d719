"""Paging through 100K queues by name on a real broker with an auth file, through every way in:
`Client` and `AsyncClient` (`list_queues(start_after=…)`), the CLI (`kittiwake queues --start-after`)
and the dashboard's JSON API (`/api/queues?after=…`).

One broker subprocess (`--durability os`: the fill is what takes time, as in
`tests/observe/test_queue_list_scale.py`) with 100,000 queues of one task each,
`q.000000.bob` … `q.099999.bob`, every tenth one `q.…3.alice` instead. Alice
administers `q.*.alice`, so her queues are spread through the names and each
of her pages walks past nine of bob's for each of hers; the producer may only
enqueue, so it sees no queue at all. Every listing must give each queue it may
show once, in name order. No timing is asserted.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from typing import Any, Iterator

import pytest

from kittiwake import AsyncClient, Client
from support.auth_users import ALICE, PRODUCER, ROOT, write_auth_file
from support.broker_process import BrokerProcess
from support.http_api import basic, get

pytestmark = pytest.mark.timeout(300)

QUEUES = 100_000
BATCH = 10_000
PAGE = 1000
DASHBOARD_PAGE = 500  # the API's largest page


def name(index: int) -> str:
    return f"q.{index:06d}." + ("alice" if index % 10 == 3 else "bob")


EVERY = [name(index) for index in range(QUEUES)]
ALICES = [queue for queue in EVERY if queue.endswith(".alice")]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    root = tmp_path_factory.mktemp("listing")
    users = write_auth_file(root / "users.json", {
        "root": (ROOT[1], {"*": ["all"]}),
        "alice": (ALICE[1], {"q.*.alice": ["all"]}),
        "producer": (PRODUCER[1], {"q.*": ["produce"]}),
    })
    with BrokerProcess(root / "data", auth_file=users, extra_args=["--http-port", "0", "--durability", "os"]) as process:
        with Client(process.client_url(*ROOT), timeout=120) as client:
            for start in range(0, QUEUES, BATCH):
                client.enqueue_many([{"queue": queue, "data": "x"} for queue in EVERY[start : start + BATCH]])
        yield process


def page_through(client: Client, page: int = PAGE) -> list[str]:
    """Every queue `client` may list, page after page from the last name of the one before."""
    listed: list[str] = []
    after = None
    for _ in range(QUEUES // page + 2):  # bounded: a page more than there can be
        rows = client.list_queues(limit=page, start_after=after)
        assert all(row.size == 1 for row in rows)
        listed += [row.queue for row in rows]
        if len(rows) < page:
            return listed
        after = rows[-1].queue
    raise AssertionError("paging did not end")


async def page_through_async(url: str) -> list[str]:
    listed: list[str] = []
    after = None
    async with AsyncClient(url, timeout=60) as client:
        for _ in range(QUEUES // PAGE + 2):
            rows = await client.list_queues(limit=PAGE, start_after=after)
            listed += [row.queue for row in rows]
            if len(rows) < PAGE:
                return listed
            after = rows[-1].queue
    raise AssertionError("paging did not end")


def test_both_clients_page_through_every_queue_once_in_order(broker: BrokerProcess) -> None:
    with Client(broker.client_url(*ROOT), timeout=60) as root:
        assert page_through(root) == EVERY
        assert [row.queue for row in root.list_queues(limit=3, start_after=name(61_999))] == [
            name(62_000), name(62_001), name(62_002)]
        assert [row.queue for row in root.list_queues("alice$", limit=2, start_after="q.05")] == [
            "q.050003.alice", "q.050013.alice"]
    assert asyncio.run(page_through_async(broker.client_url(*ROOT))) == EVERY


def test_a_user_pages_through_only_the_queues_it_administers(broker: BrokerProcess) -> None:
    with Client(broker.client_url(*ALICE), timeout=60) as alice, \
            Client(broker.client_url(*PRODUCER), timeout=60) as producer:
        assert page_through(alice) == ALICES
        assert [row.queue for row in alice.list_queues(limit=2, start_after=name(99_980))] == [
            "q.099983.alice", "q.099993.alice"]
        assert page_through(producer) == []
    assert asyncio.run(page_through_async(broker.client_url(*ALICE))) == ALICES


def kittiwake_json(url: str, *args: str) -> Any:
    environment = {key: value for key, value in os.environ.items() if key != "KITTIWAKE_URL"}
    done = subprocess.run([sys.executable, "-m", "kittiwake", "--url", url, "--json", "queues", *args],
                          capture_output=True, timeout=60, env=environment)
    assert done.returncode == 0, done.stderr.decode()
    return json.loads(done.stdout)


def test_the_cli_pages_by_name(broker: BrokerProcess) -> None:
    root, alice = broker.client_url(*ROOT), broker.client_url(*ALICE)
    after = name(49_999)
    for start in (50_000, 51_000, 52_000):
        rows = kittiwake_json(root, "--limit", str(PAGE), "--start-after", after)
        assert [row["queue"] for row in rows] == EVERY[start : start + PAGE]
        after = rows[-1]["queue"]
    last = kittiwake_json(root, "--limit", str(PAGE), "--start-after", name(QUEUES - 11))
    assert [row["queue"] for row in last] == EVERY[-10:]
    mine = kittiwake_json(alice, "--limit", "3", "--start-after", "q.07")
    assert [row["queue"] for row in mine] == ["q.070003.alice", "q.070013.alice", "q.070023.alice"]


def dashboard_pages(broker: BrokerProcess, credentials: tuple[str, str], order: str = "asc") -> list[str]:
    listed: list[str] = []
    after = ""
    for _ in range(QUEUES // DASHBOARD_PAGE + 2):
        answer = get(broker, f"/api/queues?limit={DASHBOARD_PAGE}&order={order}&after={after}", basic(*credentials))
        listed += [row["queue"] for row in answer["queues"]]
        if answer["next_after"] is None:
            return listed
        after = answer["next_after"]
    raise AssertionError("paging did not end")


def test_the_dashboard_pages_by_name(broker: BrokerProcess) -> None:
    assert dashboard_pages(broker, ROOT) == EVERY
    assert dashboard_pages(broker, ALICE) == ALICES
    assert dashboard_pages(broker, ALICE, "desc") == ALICES[::-1]
    deep = get(broker, f"/api/queues?limit=2&after={name(77_776)}", basic(*ROOT))
    assert [row["queue"] for row in deep["queues"]] == [name(77_777), name(77_778)]
    assert deep["total"] == QUEUES and deep["next_after"] == name(77_778)
    assert get(broker, "/api/queues?after=q.05", basic(*PRODUCER))["queues"] == []

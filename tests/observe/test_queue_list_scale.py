"""`/api/queues` over 100K queues on a real broker: paging, sorting and filtering are exact, and a page is bounded.

One broker subprocess (`--durability os`: the fill is what takes time) with
100,000 queues `s.000000` … `s.099999` of one task each, then a few made to
stand out: more tasks, a lease, dead letters. No timing is asserted here
(`kittiwake bench dashboard` measures it).
"""

from __future__ import annotations

from typing import Any, Iterator

import pytest

from kittiwake import Client
from support.broker_process import BrokerProcess
from support.http_api import call, get

pytestmark = pytest.mark.timeout(300)

QUEUES = 100_000
BATCH = 10_000
BIG = {"s.012345": 9, "s.054321": 7, "s.099998": 5, "s.000007": 3}  # extra tasks


def name(index: int) -> str:
    return f"s.{index:06d}"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    data = tmp_path_factory.mktemp("scale") / "data"
    with BrokerProcess(data, extra_args=["--http-port", "0", "--durability", "os"]) as process:
        with Client(process.url, timeout=120) as client:
            for start in range(0, QUEUES, BATCH):
                client.enqueue_many([{"queue": name(index), "data": "x"} for index in range(start, start + BATCH)])
            client.enqueue_many([{"queue": queue, "data": "more"} for queue, extra in BIG.items() for _ in range(extra)])
            client.lease("s.050000", lease_secs=300)
            for queue in ("s.070000", "s.070001"):
                [task] = client.lease(queue)
                client.release(task, "boom", bury=True)
        yield process


def names(answer: dict[str, Any]) -> list[str]:
    return [row["queue"] for row in answer["queues"]]


def test_pages_by_name_cover_every_queue_once(broker: BrokerProcess) -> None:
    first = get(broker, "/api/queues")
    assert first["total"] == QUEUES and names(first) == [name(index) for index in range(50)]
    last = get(broker, f"/api/queues?offset={QUEUES - 10}&limit=500")
    assert names(last) == [name(index) for index in range(QUEUES - 10, QUEUES)]
    assert names(get(broker, "/api/queues?order=desc&limit=3")) == [name(QUEUES - 1), name(QUEUES - 2), name(QUEUES - 3)]
    middle = get(broker, "/api/queues?offset=61000&limit=500")
    assert names(middle) == [name(index) for index in range(61000, 61500)]


def test_a_page_is_bounded(broker: BrokerProcess) -> None:
    status, headers, answer = call(broker, "GET", "/api/queues?limit=500&sort=size")
    assert status == 200 and len(answer["queues"]) == 500
    assert int(headers["content-length"]) < 500 * 400  # 500 rows of ~200 bytes, not 100K
    assert call(broker, "GET", "/api/queues?limit=501")[0] == 400


def test_sorting_by_figures_finds_the_queues_that_stand_out(broker: BrokerProcess) -> None:
    by_size = get(broker, "/api/queues?sort=size&limit=5")
    assert names(by_size) == ["s.012345", "s.054321", "s.099998", "s.000007", "s.000000"]  # then ties, by name
    assert [row["size"] for row in by_size["queues"]] == [10, 8, 6, 4, 1]
    smallest = get(broker, "/api/queues?sort=size&order=asc&limit=2")
    assert names(smallest) == ["s.070000", "s.070001"]  # only their dead letters are left
    assert names(get(broker, "/api/queues?sort=leased&limit=1")) == ["s.050000"]
    assert names(get(broker, "/api/queues?sort=dead&limit=2")) == ["s.070000", "s.070001"]
    assert names(get(broker, "/api/queues?sort=available&order=asc&limit=3")) == ["s.050000", "s.070000", "s.070001"]
    assert names(get(broker, "/api/queues?sort=enqueue_rate&limit=1")) == ["s.012345"]
    oldest = get(broker, "/api/queues?sort=oldest_age&limit=3")
    assert names(oldest) == [name(0), name(1), name(2)]  # the first batch: one enqueue time, then by name
    pages = [names(get(broker, f"/api/queues?sort=size&offset={offset}&limit=100")) for offset in (0, 100, 200)]
    whole = names(get(broker, "/api/queues?sort=size&limit=300"))
    assert sum(pages, []) == whole


def test_filters_select_exactly(broker: BrokerProcess) -> None:
    substring = get(broker, "/api/queues?filter=s.0999&limit=500")
    assert substring["total"] == 100 and names(substring) == [name(index) for index in range(99900, QUEUES)]
    glob = get(broker, "/api/queues?filter=s.00001%3F")
    assert glob["total"] == 10 and names(glob) == [name(index) for index in range(10, 20)]
    assert get(broker, "/api/queues?filter=*45")["total"] == QUEUES // 100  # names ending in 45
    filtered_sorted = get(broker, "/api/queues?filter=s.0&sort=size&limit=2")
    assert filtered_sorted["total"] == QUEUES and names(filtered_sorted) == ["s.012345", "s.054321"]
    with_dead = get(broker, "/api/queues?filter=*.dead&dead=1")
    assert names(with_dead) == ["s.070000.dead", "s.070001.dead"]

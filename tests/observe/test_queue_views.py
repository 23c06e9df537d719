"""The queue views of the JSON API on a real broker: the overview, the table, one queue, its tasks, its dead letters.

One broker subprocess with `--http-port` for the module and one scene made
through a client, which the tests only read:

* `t.a`: three tasks, the first leased by worker `w1`;
* `t.b`: one task whose data is not UTF-8;
* `t.c`: one task buried at once, so only its dead letter is left;
* `t.d`: a parent and a child waiting on it (blocked).
"""

from __future__ import annotations

from typing import Any, Iterator

import pytest

from kittiwake import Client
from support.broker_process import BrokerProcess
from support.http_api import call, error_code, get

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def scene(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    data = tmp_path_factory.mktemp("views") / "data"
    with BrokerProcess(data, extra_args=["--http-port", "0"]) as broker, Client(broker.url) as client:
        for index in range(3):
            client.enqueue("t.a", f"a{index}")
        client.lease("t.a", worker="w1", lease_secs=300)
        client.enqueue("t.b", b"\xff\x00binary")
        client.enqueue("t.c", "doomed", pid="p1", headers={"origin": "test"})
        [doomed] = client.lease("t.c")
        client.release(doomed, "boom", bury=True)
        client.enqueue("t.d", "parent", pid="parent")
        client.enqueue("t.d", "child", pid="child", after=[("t.d", "parent")])
        yield broker


def names(answer: dict[str, Any]) -> list[str]:
    return [row["queue"] for row in answer["queues"]]


def test_the_overview_sums_every_queue_and_names_the_broker(scene: BrokerProcess) -> None:
    answer = get(scene, "/api/overview")
    assert answer["totals"] == {"queues": 4, "tasks": 6, "available": 4, "leased": 1, "blocked": 1, "dead": 1}
    broker = answer["broker"]
    assert broker["store"] == "sqlite" and broker["auth"] is False and broker["user"] is None
    assert broker["port"] == scene.port and broker["http_port"] == scene.http_port
    assert broker["uptime_secs"] >= 0 and broker["started_at"] > 0 and broker["version"]
    assert answer["workers"] == {"alive": 0, "slots": 0, "busy": 0}


def test_the_table_sorts_by_each_column(scene: BrokerProcess) -> None:
    assert names(get(scene, "/api/queues")) == ["t.a", "t.b", "t.c", "t.d"]
    assert names(get(scene, "/api/queues?order=desc")) == ["t.d", "t.c", "t.b", "t.a"]
    answer = get(scene, "/api/queues?sort=size")
    assert answer["order"] == "desc" and names(answer) == ["t.a", "t.d", "t.b", "t.c"]
    assert names(get(scene, "/api/queues?sort=size&order=asc")) == ["t.c", "t.b", "t.d", "t.a"]
    assert names(get(scene, "/api/queues?sort=leased"))[0] == "t.a"
    assert names(get(scene, "/api/queues?sort=blocked"))[0] == "t.d"
    assert names(get(scene, "/api/queues?sort=dead"))[0] == "t.c"
    assert names(get(scene, "/api/queues?sort=available")) == ["t.a", "t.b", "t.d", "t.c"]  # 2, 1, 1 by name, 0
    assert names(get(scene, "/api/queues?sort=enqueue_rate"))[0] == "t.a"
    by_age = names(get(scene, "/api/queues?sort=oldest_age"))
    assert by_age == ["t.a", "t.b", "t.d", "t.c"]  # enqueued in that order; t.c holds no task: last either way
    assert names(get(scene, "/api/queues?sort=oldest_age&order=asc")) == ["t.d", "t.b", "t.a", "t.c"]
    assert names(get(scene, "/api/queues?sort=dequeue_rate&order=asc")) == ["t.a", "t.b", "t.c", "t.d"]  # all 0: by name


def test_rows_carry_every_figure(scene: BrokerProcess) -> None:
    rows = {row["queue"]: row for row in get(scene, "/api/queues")["queues"]}
    a = rows["t.a"]
    assert (a["size"], a["available"], a["leased"], a["blocked"], a["dead"]) == (3, 2, 1, 0, 0)
    assert a["enqueue_rate"] == pytest.approx(3 / 60) and a["lease_rate"] == pytest.approx(1 / 60)
    assert a["dequeue_rate"] == 0 and a["oldest_age_secs"] >= 0
    c = rows["t.c"]
    assert (c["size"], c["dead"], c["oldest_age_secs"]) == (0, 1, None)
    d = rows["t.d"]
    assert (d["size"], d["available"], d["blocked"]) == (2, 1, 1)


def test_the_table_filters_and_pages(scene: BrokerProcess) -> None:
    assert names(get(scene, "/api/queues?filter=.b")) == ["t.b"]  # a substring
    assert names(get(scene, "/api/queues?filter=t.%3F")) == ["t.a", "t.b", "t.c", "t.d"]  # a glob: t.?
    assert names(get(scene, "/api/queues?filter=*.c")) == ["t.c"]
    assert get(scene, "/api/queues?filter=nothing-like-it")["total"] == 0
    with_dead = get(scene, "/api/queues?dead=1")
    assert names(with_dead) == ["t.a", "t.b", "t.c", "t.c.dead", "t.d"] and with_dead["total"] == 5
    page = get(scene, "/api/queues?offset=1&limit=2")
    assert names(page) == ["t.b", "t.c"] and (page["total"], page["offset"], page["limit"]) == (4, 1, 2)
    assert names(get(scene, "/api/queues?offset=1&limit=2&order=desc")) == ["t.c", "t.b"]
    assert names(get(scene, "/api/queues?sort=size&offset=3&limit=5")) == ["t.c"]
    beyond = get(scene, "/api/queues?offset=10")
    assert beyond["queues"] == [] and beyond["total"] == 4


def test_the_table_pages_past_a_name(scene: BrokerProcess) -> None:
    page = get(scene, "/api/queues?after=t.a&limit=2")
    assert names(page) == ["t.b", "t.c"] and (page["after"], page["next_after"], page["total"]) == ("t.a", "t.c", 4)
    last = get(scene, "/api/queues?after=t.c&limit=2")
    assert names(last) == ["t.d"] and last["next_after"] is None
    assert names(get(scene, "/api/queues?after=t.b0")) == ["t.c", "t.d"]  # any name, not only a queue's
    assert names(get(scene, "/api/queues?after=t.a&offset=1&limit=1")) == ["t.c"]  # offset counts from the name
    assert names(get(scene, "/api/queues?after=t.d")) == [] and get(scene, "/api/queues?after=t.d")["next_after"] is None
    down = get(scene, "/api/queues?after=t.c&order=desc&limit=1")
    assert names(down) == ["t.b"] and down["next_after"] == "t.b"
    assert names(get(scene, "/api/queues?after=t.b&order=desc")) == ["t.a"]
    assert names(get(scene, "/api/queues?after=t.c&dead=1")) == ["t.c.dead", "t.d"]
    assert names(get(scene, "/api/queues?after=t.a&filter=*.%3F")) == ["t.b", "t.c", "t.d"]
    first = get(scene, "/api/queues?limit=3")
    assert first["after"] is None and first["next_after"] == "t.c"
    assert get(scene, "/api/queues?sort=size&limit=1")["next_after"] is None  # a cursor by name only


def test_bad_parameters_are_refused_with_a_code(scene: BrokerProcess) -> None:
    for path in (
        "/api/queues?sort=bogus", "/api/queues?order=up", "/api/queues?offset=-1", "/api/queues?limit=0",
        "/api/queues?limit=501", "/api/queues?limit=ten", "/api/queues?dead=maybe", "/api/queues?filter=t.[ab]",
        "/api/queues?filter=" + "x" * 600, "/api/queues?filter=a*%25", "/api/queue", "/api/queue?name=bad%20name",
        "/api/queue/tasks?name=t.a&limit=201", "/api/queue/tasks", "/api/queue/dead?name=t.c&limit=0",
        "/api/queues?after=bad%20name", "/api/queues?after=" + "x" * 300, "/api/queues?after=a%23b%23c",
        "/api/queues?after=t.a&sort=size", "/api/stream?view=queues&after=bad%20name",
        "/api/stream?view=queues&after=t.a&sort=dead",
    ):
        status, _, answer = call(scene, "GET", path)
        assert (status, error_code(answer)) == (400, "BAD_REQUEST"), path
    for path in ("/api/queue?name=nowhere", "/api/queue/tasks?name=nowhere", "/api/queue/dead?name=nowhere"):
        status, _, answer = call(scene, "GET", path)
        assert (status, error_code(answer)) == (404, "QUEUE_NOT_FOUND"), path
    assert call(scene, "POST", "/api/queues", {})[0] == 405


def test_one_queue_shows_its_rates_and_leases(scene: BrokerProcess) -> None:
    answer = get(scene, "/api/queue?name=t.a")
    stats = answer["stats"]
    assert stats["queue"] == "t.a" and stats["size"] == 3 and stats["leased"] == 1
    assert stats["enqueue_rate_5m"] == pytest.approx(3 / 300) and stats["avg_lease_secs"] is None
    [lease] = answer["leased"]
    assert lease["worker"] == "w1" and lease["expires_at"] > lease["leased_at"] and lease["peer"]
    first = get(scene, "/api/queue/tasks?name=t.a&limit=1")["tasks"][0]
    assert lease["pid"] == first["pid"] and first["state"] == "leased"
    only_dead = get(scene, "/api/queue?name=t.c")  # holds only a dead letter: still a queue to show
    assert only_dead["stats"]["dead"] == 1 and only_dead["leased"] == []


def test_tasks_page_through_a_queue(scene: BrokerProcess) -> None:
    page = get(scene, "/api/queue/tasks?name=t.a&limit=2")
    assert [task["data"] for task in page["tasks"]] == ["a0", "a1"] and page["next"]
    rest = get(scene, f"/api/queue/tasks?name=t.a&limit=2&from={page['next']}")
    assert [task["data"] for task in rest["tasks"]] == ["a2"] and rest["next"] is None
    [binary] = get(scene, "/api/queue/tasks?name=t.b")["tasks"]
    assert binary["data_encoding"] == "base64" and binary["state"] == "available"
    blocked = get(scene, "/api/queue/tasks?name=t.d")["tasks"]
    assert {task["pid"]: task["state"] for task in blocked} == {"child": "blocked", "parent": "available"}
    assert get(scene, "/api/queue/tasks?name=t.c") == {"tasks": [], "next": None}  # only dead letters


def test_dead_letters_show_why_they_died(scene: BrokerProcess) -> None:
    answer = get(scene, "/api/queue/dead?name=t.c")
    [letter] = answer["dead"]
    assert letter["task_pid"] == "p1" and letter["pid"].startswith("p1~") and letter["reason"] == "boom"
    assert letter["attempts"] == 1 and letter["data"] == "doomed" and letter["died_at"] > 0
    assert letter["headers"] == {"origin": "test"} and answer["next"] is None
    assert get(scene, "/api/queue/dead?name=t.c.dead") == answer
    assert get(scene, "/api/queue/dead?name=t.a") == {"dead": [], "next": None}


def test_the_api_index_lists_the_views(scene: BrokerProcess) -> None:
    paths = get(scene, "/api/")["paths"]
    for path in ("/api/overview", "/api/queues", "/api/queue", "/api/queue/tasks", "/api/queue/dead", "/api/workers"):
        assert path in paths

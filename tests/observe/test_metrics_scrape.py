"""`GET /metrics` on broker subprocesses: with an auth file (credentials needed, a user sees the queues
it administers and the rest added up in `other`), and with 100K queues (a bounded scrape whose
`other` holds the rest exactly)."""

from __future__ import annotations

import base64
import http.client
from typing import Any, Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from kittiwake.client import Client
from support.auth_users import ALICE, BOB, ROOT, standard_auth_file
from support.broker_process import BrokerProcess

QUEUES = 100_000
SERIES = 50  # --metrics-queue-series of the scale broker
BIG = {f"big{index}": 2 + index for index in range(5)}  # the largest queues, whatever order they came in
BATCH = 10_000  # a request's most tasks (Limits.max_batch)


def get(broker: BrokerProcess, path: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    connection = http.client.HTTPConnection(broker.host, broker.http_port, timeout=60)
    try:
        connection.request("GET", path, headers=headers or {})
        response = connection.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        connection.close()


def basic(user: str, token: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{token}".encode()).decode()}


def parse(body: bytes) -> dict[str, Any]:
    return {family.name: family for family in text_string_to_metric_families(body.decode())}


def by_queue(family: Any, name: str, **labels: str) -> dict[str, float]:
    return {
        sample.labels["queue"]: sample.value
        for sample in family.samples
        if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items())
    }


# ------------------------------------------------------------------ auth


@pytest.fixture(scope="module")
def auth_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    directory = tmp_path_factory.mktemp("auth")
    users = standard_auth_file(directory / "users.json")
    with BrokerProcess(directory / "data", extra_args=["--http-port", "0"], auth_file=users) as broker:
        for (user, token), queue, count in ((ALICE, "alice.q", 2), (BOB, "bob.q", 3), (ROOT, "shared", 1)):
            with Client(broker.client_url(user, token)) as client:
                client.enqueue_many([{"queue": queue, "data": b"x"} for _ in range(count)])
        yield broker


def test_a_scrape_needs_credentials(auth_broker: BrokerProcess) -> None:
    status, headers, _ = get(auth_broker, "/metrics")
    assert status == 401 and headers["www-authenticate"].startswith("Basic ")
    assert get(auth_broker, "/metrics", basic(ALICE[0], "not-the-token"))[0] == 401
    assert get(auth_broker, "/metrics", {"Authorization": "Bearer " + ":".join(ROOT)})[0] == 200


def test_a_user_sees_its_queues_and_the_rest_in_other(auth_broker: BrokerProcess) -> None:
    status, _, body = get(auth_broker, "/metrics", basic(*ALICE))
    assert status == 200
    families = parse(body)
    sizes = by_queue(families["kittiwake_queue_tasks"], "kittiwake_queue_tasks", state="available")
    assert sizes == {"alice.q": 2, "other": 4}
    assert by_queue(families["kittiwake_tasks_enqueued"], "kittiwake_tasks_enqueued_total") == {"alice.q": 2, "other": 4}
    assert families["kittiwake_queues"].samples[0].value == 3  # queues holding tasks, whoever sees them
    assert "kittiwake_workers" not in families  # alice has no admin on _workers


def test_an_unrestricted_user_sees_every_queue(auth_broker: BrokerProcess) -> None:
    families = parse(get(auth_broker, "/metrics", basic(*ROOT))[2])
    sizes = by_queue(families["kittiwake_queue_tasks"], "kittiwake_queue_tasks", state="available")
    assert sizes == {"alice.q": 2, "bob.q": 3, "shared": 1, "other": 0}
    assert "kittiwake_workers" in families


# ------------------------------------------------------------------ 100K queues


@pytest.fixture(scope="module")
def crowded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    directory = tmp_path_factory.mktemp("crowded")
    args = ["--http-port", "0", "--metrics-queue-series", str(SERIES), "--durability", "os"]
    with BrokerProcess(directory / "data", extra_args=args) as broker:
        with Client(broker.url) as client:
            for start in range(0, QUEUES, BATCH):
                client.enqueue_many([{"queue": f"q{index:06}", "data": b""} for index in range(start, start + BATCH)],
                                    timeout=120)
            client.enqueue_many([{"queue": queue, "data": b""} for queue, count in BIG.items() for _ in range(count)])
            leased = client.lease(["big4", "q000000"], max_tasks=3)
            assert len(leased) == 3
        yield broker


def test_a_scrape_of_100k_queues_is_bounded_and_other_holds_the_rest(crowded: BrokerProcess) -> None:
    status, _, body = get(crowded, "/metrics")
    assert status == 200
    families = parse(body)
    total = QUEUES + sum(BIG.values())
    tasks = families["kittiwake_queue_tasks"]
    queues = {sample.labels["queue"] for sample in tasks.samples}
    assert len(queues) == SERIES + 1 and "other" in queues and set(BIG) <= queues  # the largest have rows
    assert len(tasks.samples) == (SERIES + 1) * 4
    available = by_queue(tasks, "kittiwake_queue_tasks", state="available")
    leased = by_queue(tasks, "kittiwake_queue_tasks", state="leased")
    assert sum(available.values()) + sum(leased.values()) == total
    assert sum(leased.values()) == 3 and leased["big4"] == 2
    assert available["other"] == total - 3 - sum(count for queue, count in available.items() if queue != "other")
    assert families["kittiwake_queues"].samples[0].value == QUEUES + len(BIG)

    enqueued = by_queue(families["kittiwake_tasks_enqueued"], "kittiwake_tasks_enqueued_total")
    assert len(enqueued) == SERIES + 1 and sum(enqueued.values()) == total
    first = {f"q{index:06}" for index in range(SERIES)}  # the first queues to act have series
    assert set(enqueued) == first | {"other"} and enqueued["other"] == total - SERIES
    waits = by_queue(families["kittiwake_task_wait_seconds"], "kittiwake_task_wait_seconds_count")
    assert waits == {"q000000": 1, "other": 2}  # a queue's histograms appear with its first observation
    assert len(body) < 200_000  # bounded: a few hundred series, not 100K

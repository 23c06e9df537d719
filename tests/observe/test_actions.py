"""The JSON API's actions on a real broker: requeue and purge dead letters, cancel tasks; and who may.

Two broker subprocesses with `--http-port` for the module: one without an
auth file, one with root (everything), alice and bob (everything on their
own prefix). Each test makes its own queues.
"""

from __future__ import annotations

from typing import Iterator

import pytest

from kittiwake import Client
from kittiwake.errors import TaskNotFound
from support.auth_users import ALICE, BOB, ROOT, standard_auth_file
from support.broker_process import BrokerProcess
from support.http_api import basic, call, error_code, get, post

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def open_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with BrokerProcess(tmp_path_factory.mktemp("actions") / "data", extra_args=["--http-port", "0"]) as broker:
        yield broker


@pytest.fixture(scope="module")
def auth_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    directory = tmp_path_factory.mktemp("actions-auth")
    users = standard_auth_file(directory / "users.json")
    with BrokerProcess(directory / "data", extra_args=["--http-port", "0"], auth_file=users) as broker:
        yield broker


def bury(client: Client, queue: str, pid: str, reason: str = "boom") -> None:
    client.enqueue(queue, f"data of {pid}", pid=pid)
    [task] = client.lease(queue, max_pid=pid)  # the tests' pids sort after every pid already buried
    client.release(task, reason, bury=True)


def test_dead_letters_are_requeued_and_purged(open_broker: BrokerProcess) -> None:
    with Client(open_broker.url) as client:
        for pid in ("r1", "r2", "r3"):
            bury(client, "act.r", pid)
        status, answer = post(open_broker, "/api/queue/requeue-dead", {"queue": "act.r", "pids": ["r1", "nope"]})
        assert status == 200 and answer["requeued"] == 1
        assert [(item["pid"], item["code"]) for item in answer["failed"]] == [("nope", "TASK_NOT_FOUND")]
        assert client.get("act.r", "r1").data == b"data of r1"
        dead_pid = get(open_broker, "/api/queue/dead?name=act.r")["dead"][0]["pid"]  # r2's own dead-letter pid
        status, answer = post(open_broker, "/api/queue/purge-dead", {"queue": "act.r.dead", "pids": [dead_pid]})
        assert (status, answer) == (200, {"purged": 1, "failed": []})
        assert [letter["task_pid"] for letter in get(open_broker, "/api/queue/dead?name=act.r")["dead"]] == ["r3"]


def test_a_cancel_takes_the_task_and_its_descendants(open_broker: BrokerProcess) -> None:
    with Client(open_broker.url) as client:
        client.enqueue("act.c", "parent", pid="parent")
        client.enqueue("act.c", "child", pid="child", after=[("act.c", "parent")])
        client.enqueue("act.c", "other", pid="other")
        status, answer = post(open_broker, "/api/queue/cancel", {"queue": "act.c", "pids": ["parent"]})
        assert (status, answer) == (200, {"cancelled": 1, "failed": []})
        with pytest.raises(TaskNotFound):
            client.get("act.c", "child")
        reasons = {letter["task_pid"]: letter["reason"] for letter in get(open_broker, "/api/queue/dead?name=act.c")["dead"]}
        assert reasons == {"parent": "CANCELLED", "child": "PARENT_FAILED act.c/parent"}
        status, answer = post(open_broker, "/api/queue/cancel", {"queue": "act.c", "pids": ["other"], "reason": "not needed"})
        assert answer["cancelled"] == 1
        assert client.get("act.c.dead", "other").headers["kittiwake-dead-reason"] == "not needed"


def test_actions_refuse_bad_bodies(open_broker: BrokerProcess) -> None:
    with Client(open_broker.url) as client:
        client.enqueue("act.bad", "x", pid="x")
    for body in ({}, {"queue": "act.bad"}, {"queue": "act.bad", "pids": []}, {"queue": "act.bad", "pids": "x"},
                 {"queue": "act.bad", "pids": [1]}, {"queue": "bad name", "pids": ["x"]},
                 {"queue": "act.bad", "pids": ["x"], "reason": 5}):
        status, answer = post(open_broker, "/api/queue/cancel", body)
        assert (status, error_code(answer)) == (400, "BAD_REQUEST"), body
    status, answer = post(open_broker, "/api/queue/requeue-dead", {"queue": "act.nowhere", "pids": ["x"]})
    assert (status, error_code(answer)) == (404, "QUEUE_NOT_FOUND")
    assert call(open_broker, "GET", "/api/queue/cancel")[0] == 405


def test_actions_need_admin_on_the_queue(auth_broker: BrokerProcess) -> None:
    with Client(auth_broker.client_url(*ROOT)) as client:
        bury(client, "bob.jobs", "b1")
        client.enqueue("bob.jobs", "keep", pid="keep")
        bury(client, "alice.jobs", "a1")
    alice = basic(*ALICE)
    for path, body in (("/api/queue/requeue-dead", {"queue": "bob.jobs", "pids": ["b1"]}),
                       ("/api/queue/purge-dead", {"queue": "bob.jobs", "pids": ["b1"]}),
                       ("/api/queue/cancel", {"queue": "bob.jobs", "pids": ["keep"]}),
                       ("/api/queue/cancel", {"queue": "bob.nowhere", "pids": ["keep"]})):  # 403 says nothing of it
        status, answer = post(auth_broker, path, body, alice)
        assert (status, error_code(answer)) == (403, "FORBIDDEN"), path
    status, answer = post(auth_broker, "/api/queue/requeue-dead", {"queue": "alice.jobs", "pids": ["a1"]}, alice)
    assert (status, answer["requeued"]) == (200, 1)
    status, answer = post(auth_broker, "/api/queue/cancel", {"queue": "bob.jobs", "pids": ["keep"]}, basic(*BOB))
    assert answer["cancelled"] == 1
    [letter] = [d for d in get(auth_broker, "/api/queue/dead?name=bob.jobs", basic(*BOB))["dead"] if d["task_pid"] == "keep"]
    assert letter["reason"] == "CANCELLED by bob"
    assert call(auth_broker, "POST", "/api/queue/cancel", {"queue": "bob.jobs", "pids": ["b1"]})[0] == 401


def test_a_session_cookie_carries_the_users_rights(auth_broker: BrokerProcess) -> None:
    _, headers, _ = call(auth_broker, "POST", "/api/session", {"user": ALICE[0], "token": ALICE[1]})
    session = {"Cookie": headers["set-cookie"].split(";")[0]}
    with Client(auth_broker.client_url(*ROOT)) as client:
        client.enqueue("alice.cookie", "x", pid="x")
    status, answer = post(auth_broker, "/api/queue/cancel", {"queue": "alice.cookie", "pids": ["x"]}, session)
    assert (status, answer["cancelled"]) == (200, 1)


def test_views_show_only_what_the_user_administers(auth_broker: BrokerProcess) -> None:
    with Client(auth_broker.client_url(*ROOT)) as client:
        client.enqueue("alice.seen", "x")
        client.enqueue("bob.unseen", "x")
    alice = basic(*ALICE)
    rows = [row["queue"] for row in get(auth_broker, "/api/queues?limit=500", alice)["queues"]]
    assert "alice.seen" in rows and all(name.startswith("alice.") for name in rows)
    everything = [row["queue"] for row in get(auth_broker, "/api/queues?limit=500", basic(*ROOT))["queues"]]
    assert "bob.unseen" in everything and "alice.seen" in everything
    overview = get(auth_broker, "/api/overview", alice)
    assert overview["broker"]["auth"] is True and overview["broker"]["user"] == "alice"
    assert overview["totals"]["queues"] == len(rows)
    assert overview["workers"] == {"alive": 0, "slots": 0, "busy": 0}  # no admin on _workers
    for path in ("/api/queue?name=bob.unseen", "/api/queue/tasks?name=bob.unseen", "/api/queue/dead?name=bob.unseen",
                 "/api/workers"):
        status, _, answer = call(auth_broker, "GET", path, headers=alice)
        assert (status, error_code(answer)) == (403, "FORBIDDEN"), path
    assert get(auth_broker, "/api/queue?name=alice.seen", alice)["stats"]["size"] == 1

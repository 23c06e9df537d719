"""A worker writes where a task tells it to, with the worker's rights: every such indirection, tried by an attacker.

The attacker is `PRODUCER`, a broker user who may only enqueue into the app's
task queues (`tests`, `ticks`). The worker runs as root, so it may write into
any queue: another submitter's reply queue, bob's queues, the worker registry.
Each test names a queue through one indirection a task carries — the
``kittiwake-reply-to`` header, a gang join's mailbox, a periodic tick's pid —
and checks that the worker wrote nothing there, and that it kept running.
The rules themselves (`envelope.is_reply_queue_for`, `gang.join_refusal`,
`envelope.tick_epoch_secs`) are checked on their own at the end.
"""

from __future__ import annotations

import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterator

import pytest

from kittiwake import Client, errors
from kittiwake.app.envelope import (
    is_reply_queue_for,
    reply_queue_for,
    tick_epoch_secs,
    tick_iso,
    tick_marker_pid,
    tick_pid,
)
from kittiwake.constants import (
    DEAD_PID_HEADER,
    DEAD_REASON_HEADER,
    REPLY_TO_HEADER,
    SUBMISSION_HEADER,
    TASK_ID_HEADER,
    WORKERS_QUEUE,
)
from kittiwake.worker.beat import Beat
from kittiwake.worker.gang import GANG_JOIN, join_refusal
from support.auth_users import BOB, PRODUCER, ROOT, STANDARD_RIGHTS, write_auth_file
from support.broker_process import BrokerProcess
from worker import apps
from worker.harness import connected_app, wait_for, workers

PRODUCER_RIGHTS = {"tests": ["produce"], "ticks": ["produce"]}


@pytest.fixture
def secured(tmp_path: Path) -> Iterator[BrokerProcess]:
    users = {name: (token, STANDARD_RIGHTS[name]) for name, token in (ROOT, BOB)}
    users[PRODUCER[0]] = (PRODUCER[1], PRODUCER_RIGHTS)
    process = BrokerProcess(tmp_path / "data", auth_file=write_auth_file(tmp_path / "users.json", users))
    try:
        yield process
    finally:
        process.kill()


@pytest.fixture
def root_app(secured: BrokerProcess) -> Iterator[object]:
    """The test app (`worker.apps.app`) submitting as root, the user its worker runs as."""
    yield from connected_app(secured.client_url(*ROOT))


def gone(client: Client, queue: str, pid: str) -> bool:
    try:
        client.get(queue, pid)
        return False
    except errors.TaskNotFound:
        return True


def test_a_producer_cannot_have_a_worker_post_a_result_where_it_may_not_write(
    secured: BrokerProcess, root_app, tmp_path: Path
) -> None:
    """A producer may look up a task it can name, so it reads another submitter's reply queue and
    pending submission id off a keyed task, and asks for its own task's result to be posted there
    (a forged result), into bob's queue, and into the worker registry."""
    root_url = secured.client_url(*ROOT)
    with Client(root_url) as root, Client(secured.client_url(*PRODUCER)) as producer:
        root.enqueue("tests.hold", b"", pid="gate")  # the victim's task waits for it, so the attack runs first
        victim = apps.echo.submit("genuine", key="order-42", after=[("tests.hold", "gate")])
        seen = producer.get("tests", "order-42").headers or {}
        targets = {seen[REPLY_TO_HEADER]: seen[SUBMISSION_HEADER], "bob.inbox": "planted", WORKERS_QUEUE: "planted"}
        call = root_app.serializer.dump_call(apps.echo.name, ["forged"], {})
        refused = []
        for n, (target, pid) in enumerate(targets.items()):
            headers = {TASK_ID_HEADER: "order-42", REPLY_TO_HEADER: target, SUBMISSION_HEADER: pid}
            try:
                producer.enqueue("tests", call, pid=f"attack-{n}", headers=headers)
            except errors.Forbidden as error:
                assert f"may not produce into queue {target!r}" in str(error)
                refused.append(target)
        with workers(root_url, tmp_path, "--queues", "tests") as worker:
            wait_for(lambda: all(gone(root, "tests", f"attack-{n}") for n in range(len(targets))),
                     message="the attacker's tasks to be run")
            [gate] = root.lease("tests.hold")
            root.dequeue(gate)
            assert victim.result(timeout=30) == "genuine"
            assert worker.alive()
        for target in ("bob.inbox", WORKERS_QUEUE):
            assert gone(root, target, "planted"), target
        assert refused == list(targets)


def test_a_worker_posts_results_only_into_reply_queues_of_its_app_in_the_tasks_group(
    secured: BrokerProcess, root_app, tmp_path: Path
) -> None:
    """A task that reached the queue with a reply-to outside the app's reply queues (its submitter
    may write there, or the broker had no auth file) is dead-lettered unrun, its result nowhere;
    the worker goes on."""
    root_url = secured.client_url(*ROOT)
    targets = {"bob.inbox": "s-1", WORKERS_QUEUE: "s-2", "alice.replies.a1": "s-3", "tests.ticks-done": "s-4"}
    with Client(root_url) as root:
        call = root_app.serializer.dump_call(apps.echo.name, ["stray"], {})
        for n, (target, submission) in enumerate(targets.items()):
            headers = {REPLY_TO_HEADER: target, SUBMISSION_HEADER: submission}
            root.enqueue("tests", call, pid=f"stray-{n}", headers=headers)
        with workers(root_url, tmp_path, "--queues", "tests") as worker:
            wait_for(lambda: all(gone(root, "tests", f"stray-{n}") for n in range(len(targets))),
                     message="the stray tasks to be taken")
            assert apps.echo.submit("fine").result(timeout=30) == "fine"  # a reply queue of the app: posted
            log = worker.log()
        for target, submission in targets.items():
            assert gone(root, target, submission), target
        dead = root.peek("tests.dead", 10)
        assert sorted(view.headers[DEAD_PID_HEADER] for view in dead) == [f"stray-{n}" for n in range(len(targets))]
        assert {view.headers[DEAD_REASON_HEADER] for view in dead} == {"REPLY_TO_REFUSED"}
        assert "not a reply queue of this app" in log and "'bob.inbox'" in log


def test_a_gang_join_runs_only_from_a_gang_queue_and_posts_only_into_its_mailbox(
    secured: BrokerProcess, root_app, tmp_path: Path
) -> None:
    """A join names its gang's mailbox, where the member posts its address and from which it
    withdraws the messages directed to the leader it names: a join the attacker wrote names bob's
    queue and bob's service as the leader."""
    root_url = secured.client_url(*ROOT)
    with Client(root_url) as root, Client(secured.client_url(*BOB)) as bob, \
            Client(secured.client_url(*PRODUCER)) as producer:
        bob.enqueue("bob.inbox", b"for bob's service", pid="m1", receiver="bob-service")
        join = root_app.serializer.dump_call(
            GANG_JOIN, ["g1", "bob-service", "bob.inbox", 1.0, b"", time.time() + 2.0], {})
        producer.enqueue("tests", join, pid="attack")
        with workers(root_url, tmp_path, "--queues", "tests") as worker:
            wait_for(lambda: gone(root, "tests", "attack"), timeout=60, message="the join to be taken")
            assert apps.echo.submit("fine").result(timeout=30) == "fine"
            assert worker.alive()
        assert [view.pid for view in bob.peek("bob.inbox")] == ["m1"]
        [dead] = root.peek("tests.dead")
        assert dead.headers[DEAD_REASON_HEADER] == "UNKNOWN_TASK"


def test_a_tick_marker_is_written_for_a_due_tick_only(secured: BrokerProcess, root_app, tmp_path: Path) -> None:
    """A marker makes a scheduler skip its tick: the attacker runs the periodic task under the pid
    of a tick in 2099, whose marker would stop that tick from ever running."""
    root_url = secured.client_url(*ROOT)
    name = apps.tick.name
    future = tick_pid(name, datetime(2099, 1, 1, tzinfo=timezone.utc))
    with Client(root_url) as root, Client(secured.client_url(*PRODUCER)) as producer:
        producer.enqueue("ticks", root_app.serializer.dump_call(name, [], {}), pid=future)
        with workers(root_url, tmp_path, "--queues", "ticks"):
            wait_for(lambda: gone(root, "ticks", future), message="the early tick to run")
            assert root.peek("ticks.ticks-done") == []
            beat = Beat(root_app, root)  # a scheduler's own tick still leaves its marker
            beat.fire_due(time.time())
            [fired] = beat.fired.values()
            wait_for(lambda: root.peek("ticks.ticks-done"), message="the due tick's marker")
        assert [view.pid for view in root.peek("ticks.ticks-done")] == [tick_marker_pid(name, fired)]


# ---------------------------------------------------------------- pure parts


def test_a_reply_queue_is_the_apps_prefix_and_an_app_id_in_the_tasks_group() -> None:
    assert is_reply_queue_for(reply_queue_for("emails", "a1"), "emails")
    assert is_reply_queue_for(reply_queue_for("shop#emails.delayed", "a1"), "shop#emails.delayed")
    assert is_reply_queue_for("_replies.alice.a1", "emails")  # a submitter may extend the prefix
    assert is_reply_queue_for("alice.replies.a1", "alice.shop", "alice.replies.")
    for reply_to, queue in [
        ("_replies.", "emails"),  # no app id
        ("_workers", "emails"),
        ("emails", "emails"),
        ("alice.replies.a1", "emails"),  # another prefix
        ("shop#_replies.a1", "emails"),  # another group
        ("_replies.a1", "shop#emails"),
        ("shop#_replies.a1#x", "shop#emails"),
        ("other#shop#_replies.a1", "shop#emails"),
    ]:
        assert not is_reply_queue_for(reply_to, queue), (reply_to, queue)


def test_a_tick_time_reads_back_only_as_tick_iso_writes_it() -> None:
    tick = datetime(2030, 5, 6, 7, 8, 9, tzinfo=timezone.utc)
    assert tick_epoch_secs(tick_iso(tick)) == tick.timestamp()
    for text in ("2030-5-6T7:8:9Z", "2030-05-06T07:08:09", "example.com", ""):
        assert tick_epoch_secs(text) is None, text


def test_a_gang_join_may_name_only_a_mailbox_of_the_gang_queue_it_came_from() -> None:
    assert join_refusal("gang.gang", ["g1", "leader", "gang.gang.g1", 1.0]) is None
    assert join_refusal("shop#gang@n1.gang", ["g1", "leader", "shop#gang@n1.gang.g1", 1.0]) is None
    for queue, args in [
        ("gang", ["g1", "leader", "gang.gang.g1", 1.0]),  # not a gang queue
        ("tests", ["g1", "leader", "bob.inbox", 1.0]),
        ("gang.gang", ["g1", "leader", "bob.inbox", 1.0]),
        ("gang.gang", ["g1", "leader", "gang.gang.g2", 1.0]),
        ("gang.gang", ["", "leader", "gang.gang.", 1.0]),
        ("gang.gang", ["g#1", "leader", "gang.gang.g#1", 1.0]),
        ("gang.gang", ["g1", "leader"]),
        ("gang.gang", [1, "leader", "gang.gang.1", 1.0]),
    ]:
        assert join_refusal(queue, args) is not None, (queue, args)

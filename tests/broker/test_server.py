"""The broker over real TCP: round trips, pipelining, long-polls, restarts and failing commits.

Most tests run a broker subprocess (`support.broker_process`) and speak raw
frames to it; the last ones run `Broker` in-process to inject a bug or a
failing commit where the store can be reached.
"""

from __future__ import annotations

import os
import resource
import socket
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

from kittiwake.broker import BrokerConfig
from kittiwake.engine import Engine
from kittiwake.engine import update as engine_update
from kittiwake.protocol import encode_frame, encode_request
from kittiwake.store.memory import MemoryStore
from support.broker_process import BrokerProcess
from support.in_process_broker import InProcessBroker


def ref(task: dict[str, Any]) -> dict[str, Any]:
    return {"queue": task["queue"], "pid": task["pid"], "lease_id": task["lease_id"]}


# ------------------------------------------------------------------ basics


def test_ping(broker: BrokerProcess) -> None:
    with broker.connect() as conn:
        before = time.time()
        result = conn.call("ping")
        assert before - 1 <= result["now"] <= time.time() + 1


def test_enqueue_lease_dequeue_round_trip(broker: BrokerProcess) -> None:
    with broker.connect() as conn:
        enqueued = conn.enqueue("mail#outbox", b"to: ada", pid="0001", sender="app-1")
        assert enqueued == {"queue": "mail#outbox", "pid": "0001", "collapsed": False}
        assert conn.enqueue("mail#outbox", b"again", pid="0001")["collapsed"] is True

        [task] = conn.lease("mail#outbox", lease_secs=30, worker="worker-1")
        assert (task["queue"], task["pid"], task["data"]) == ("mail#outbox", "0001", b"to: ada")
        assert task["lease_owner"] == "worker-1"
        assert task["lease_peer"].startswith("127.0.0.1:")
        assert task["lease_expires_at"] == pytest.approx(time.time() + 30, abs=5)
        assert conn.lease("mail#outbox") == []

        [outcome] = conn.call("dequeue", leases=[ref(task)])
        assert outcome["ok"] is True
        reply = conn.request("get", queue="mail#outbox", pid="0001")
        assert not reply.ok and reply.error["code"] == "TASK_NOT_FOUND"
        assert conn.call("list_queues") == []


def test_pipelined_requests_are_answered_by_id(broker: BrokerProcess) -> None:
    with broker.connect() as conn:
        frames = []
        ops: dict[int, str] = {}
        for request_id in range(1, 1001):
            if request_id % 10 == 0:
                frames.append(conn.frame("ping", request_id))
                ops[request_id] = "ping"
            else:
                task = {"queue": "pipe", "data": str(request_id).encode(), "pid": f"{request_id:05d}"}
                frames.append(conn.frame("enqueue", request_id, tasks=[task]))
                ops[request_id] = "enqueue"
        conn.send_raw(b"".join(frames))
        replies = conn.read_replies(1000)
        assert sorted(reply.id for reply in replies) == list(range(1, 1001))
        for reply in replies:
            assert reply.ok, reply.error
            if ops[reply.id] == "enqueue":
                assert reply.result[0]["pid"] == f"{reply.id:05d}"
        assert conn.call("list_queues") == [{"queue": "pipe", "size": 900, "leased": 0}]


def test_half_closed_connection_still_gets_its_replies(broker: BrokerProcess) -> None:
    with broker.connect() as conn:
        conn.send_raw(b"".join(conn.frame("ping", n) for n in range(1, 51)))
        conn.sock.shutdown(socket.SHUT_WR)
        replies = conn.read_until_closed()
        assert [reply.id for reply in replies] == list(range(1, 51))


def test_connections_over_the_limit_are_refused(tmp_path: Path) -> None:
    with BrokerProcess(tmp_path / "data", extra_args=["--max-connections", "2"]) as broker:
        first, second = broker.connect(), broker.connect()
        assert first.call("ping") and second.call("ping")
        with broker.connect() as third:
            [refusal] = third.read_until_closed()
            assert (refusal.id, refusal.error["code"]) == (0, "TOO_MANY_CONNECTIONS")
        first.close()
        deadline = time.monotonic() + 5
        while True:  # the broker learns of the close asynchronously
            with broker.connect() as again:
                again.send("ping")
                try:
                    if again.read_reply().ok:
                        break
                except ConnectionError:
                    pass
            assert time.monotonic() < deadline, "a freed slot was never reused"
            time.sleep(0.05)
        second.close()


# -------------------------------------------------------------- long polls


def test_long_poll_is_woken_by_an_enqueue_on_another_connection(broker: BrokerProcess) -> None:
    with broker.connect() as worker, broker.connect() as producer:
        request_id = worker.send("lease", queues=["jobs"], wait_secs=20, lease_secs=60)
        time.sleep(0.3)  # let the lease park
        sent_at = time.monotonic()
        producer.enqueue("jobs", b"wake up")
        reply = worker.read_reply()
        waited = time.monotonic() - sent_at
        assert reply.id == request_id and reply.ok
        assert [task["data"] for task in reply.result] == [b"wake up"]
        assert waited < 2.0, f"the long-poll took {waited:.2f} s to wake"


def test_long_polls_are_served_oldest_first(broker: BrokerProcess) -> None:
    with broker.connect() as first, broker.connect() as second, broker.connect() as producer:
        first.send("lease", queues=["fair"], wait_secs=20)
        time.sleep(0.2)
        second.send("lease", queues=["fair"], wait_secs=20)
        time.sleep(0.2)
        producer.enqueue("fair", b"one")
        assert [task["data"] for task in first.read_reply().result] == [b"one"]
        producer.enqueue("fair", b"two")
        assert [task["data"] for task in second.read_reply().result] == [b"two"]


def test_long_poll_times_out_with_an_empty_list(broker: BrokerProcess) -> None:
    with broker.connect() as conn:
        started = time.monotonic()
        reply = conn.request("lease", queues=["nothing-here"], wait_secs=0.5)
        waited = time.monotonic() - started
        assert reply.ok and reply.result == []
        assert 0.4 <= waited < 2.0


def test_long_poll_wakes_when_a_lease_expires(broker: BrokerProcess) -> None:
    with broker.connect() as conn, broker.connect() as waiting:
        conn.enqueue("expiring", b"x")
        [task] = conn.lease("expiring", lease_secs=0.5)
        reply = waiting.request("lease", queues=["expiring"], wait_secs=10)
        assert [again["pid"] for again in reply.result] == [task["pid"]]
        assert reply.result[0]["attempts"] == 1


@pytest.mark.parametrize("wait_secs", [-1, 301, float("inf"), float("nan")])
def test_wait_secs_outside_the_limit_is_a_bad_request(broker: BrokerProcess, wait_secs: float) -> None:
    with broker.connect() as conn:
        reply = conn.request("lease", queues=["q"], wait_secs=wait_secs)
        assert not reply.ok and reply.error["code"] == "BAD_REQUEST"
        assert conn.call("ping")


# ------------------------------------------------------- stop and restart


def test_sigterm_exits_zero_and_acknowledged_tasks_survive(broker: BrokerProcess) -> None:
    with broker.connect() as conn, broker.connect() as waiting:
        for number in range(100):
            conn.enqueue("durable", f"task {number}".encode(), pid=f"{number:03d}")
        poll_id = waiting.send("lease", queues=["empty"], wait_secs=60)
        time.sleep(0.2)
        assert broker.terminate() == 0
        # the parked long-poll was answered, with nothing, before the broker left
        reply = waiting.read_reply()
        assert (reply.id, reply.ok, reply.result) == (poll_id, True, [])
    broker.restart()
    with broker.connect() as conn:
        tasks = conn.call("peek", queue="durable", n=1000)
        assert [task["pid"] for task in tasks] == [f"{number:03d}" for number in range(100)]
        assert tasks[42]["data"] == b"task 42"


def test_a_lease_survives_a_crash_with_its_expiry(broker: BrokerProcess) -> None:
    with broker.connect() as conn:
        conn.enqueue("held", b"payload")
        [task] = conn.lease("held", lease_secs=3)  # a restart takes well under a second; 3 s outlast it
    leased_until = task["lease_expires_at"]
    broker.kill()
    broker.restart()
    with broker.connect() as conn:
        assert conn.lease("held") == [], "a leased task was handed out again after a restart"
        remaining = leased_until - time.time()
        assert remaining > 0.5, "the restart took too long for this test to mean anything"
        time.sleep(remaining + 0.2)
        [again] = conn.lease("held")
        assert again["pid"] == task["pid"] and again["lease_id"] > task["lease_id"]
        assert (again["attempts"], again["deliveries"]) == (1, 2)


def test_a_worker_finishes_its_lease_across_a_crash(broker: BrokerProcess) -> None:
    with broker.connect() as conn:
        conn.enqueue("held", b"payload")
        [task] = conn.lease("held", lease_secs=60)
    broker.kill()
    broker.restart()
    with broker.connect() as conn:
        [outcome] = conn.call("dequeue", leases=[ref(task)])
        assert outcome["ok"], outcome
        assert conn.call("list_queues") == []


# ----------------------------------------------------------- failing commits



@pytest.mark.skipif(not hasattr(resource, "prlimit"), reason="needs prlimit (Linux)")
def test_a_commit_that_cannot_be_written_answers_unavailable_and_service_resumes(tmp_path: Path) -> None:
    """A file-size limit on the broker makes SQLite's WAL writes fail (EFBIG, like a full disk)."""
    broker = BrokerProcess(tmp_path / "data")
    try:
        data_dir = broker.data_dir
        largest = max(path.stat().st_size for path in data_dir.iterdir())
        # the writes stop about 2 MiB from now; Python ignores SIGXFSZ, so they fail with EFBIG
        resource.prlimit(broker.pid, resource.RLIMIT_FSIZE, (largest + 2 * 1024 * 1024, resource.RLIM_INFINITY))
        acknowledged: list[str] = []
        refused: list[str] = []
        payload = os.urandom(256 * 1024)
        with broker.connect() as conn:
            for number in range(40):
                pid = f"{number:03d}"
                reply = conn.request("enqueue", tasks=[{"queue": "full", "pid": pid, "data": payload}])
                if reply.ok:
                    acknowledged.append(pid)
                else:
                    assert reply.error["code"] == "UNAVAILABLE", reply.error
                    refused.append(pid)
            assert refused, "the file-size limit never made a commit fail"
            assert conn.call("ping"), "the broker stopped serving after a failed commit"
            # nothing refused is visible, everything acknowledged is
            visible = [task["pid"] for task in conn.call("peek", queue="full", n=100)]
            assert visible == acknowledged

            resource.prlimit(broker.pid, resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
            # during an outage the broker tries writing about once a second
            deadline = time.monotonic() + 5.0
            while True:
                reply = conn.request("enqueue", tasks=[{"queue": "full", "pid": "after", "data": b"ok"}])
                if reply.ok or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            assert reply.ok, f"service did not resume once the fault cleared: {reply.error}"
            acknowledged.append("after")
        broker.kill()
        broker.restart()
        with broker.connect() as conn:
            visible = [task["pid"] for task in conn.call("peek", queue="full", n=100)]
            assert visible == acknowledged
    finally:
        broker.kill()


# ------------------------------------------------------------ in-process


@pytest.fixture
def in_process(tmp_path: Path) -> Any:
    store = MemoryStore()
    broker = InProcessBroker(BrokerConfig(data_dir=str(tmp_path / "unused"), port=0), store)
    try:
        yield broker, store
    finally:
        broker.close()


def test_in_process_broker_reports_its_port_and_stops(in_process: Any) -> None:
    runner, _ = in_process
    assert runner.broker.port > 0
    with runner.connect() as conn:
        assert conn.call("ping")


def test_a_bug_in_the_engine_answers_internal_and_leaves_other_requests_intact(
    in_process: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    runner, store = in_process
    with runner.connect() as conn:
        conn.enqueue("safe", b"before", pid="1")

        def broken_peek(*args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("a bug")

        monkeypatch.setattr(Engine, "peek", broken_peek)
        # one write: the enqueue before and after the bug ride the same pass
        conn.send_raw(
            encode_frame(encode_request("enqueue", 1, {"tasks": [{"queue": "safe", "pid": "2", "data": b"a"}]}))
            + encode_frame(encode_request("peek", 2, {"queue": "safe"}))
            + encode_frame(encode_request("enqueue", 3, {"tasks": [{"queue": "safe", "pid": "3", "data": b"b"}]}))
        )
        replies = {reply.id: reply for reply in conn.read_replies(3)}
        assert replies[1].ok and replies[3].ok
        assert replies[2].error["code"] == "INTERNAL"
        monkeypatch.undo()
        assert [task["pid"] for task in conn.call("peek", queue="safe")] == ["1", "2", "3"]
        assert conn.call("list_queues") == [{"queue": "safe", "size": 3, "leased": 0}]


def test_a_failing_commit_answers_unavailable_to_the_whole_pass_then_recovers(in_process: Any) -> None:
    runner, store = in_process
    real_commit = store.commit
    failures = {"left": 1}

    def flaky_commit() -> None:
        if failures["left"]:
            failures["left"] -= 1
            raise sqlite3.OperationalError("disk I/O error")
        real_commit()

    with runner.connect() as conn:
        conn.enqueue("flaky", b"kept", pid="1")
        runner.call_in_loop(lambda: setattr(store, "commit", flaky_commit))
        conn.send_raw(
            encode_frame(encode_request("enqueue", 1, {"tasks": [{"queue": "flaky", "pid": "2", "data": b"x"}]}))
            + encode_frame(encode_request("ping", 2, {}))
        )
        replies = {reply.id: reply for reply in conn.read_replies(2)}
        assert replies[1].error["code"] == "UNAVAILABLE"
        assert replies[2].error["code"] == "UNAVAILABLE"
        # the rolled-back enqueue is gone from the rebuilt engine too
        assert [task["pid"] for task in conn.call("peek", queue="flaky")] == ["1"]
        conn.enqueue("flaky", b"y", pid="3")
        assert [task["pid"] for task in conn.call("peek", queue="flaky")] == ["1", "3"]


def test_a_bug_halfway_through_an_atomic_update_leaves_no_half_of_it(
    in_process: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    runner, _ = in_process
    real_enqueue_one = engine_update.enqueue_one

    def enqueue_one(state: Any, new: Any, *args: Any) -> Any:
        if new.queue == "boom":
            raise RuntimeError("a bug after the dequeue half was applied")
        return real_enqueue_one(state, new, *args)

    with runner.connect() as conn:
        conn.enqueue("stage-1", b"work", pid="1")
        [task] = conn.lease("stage-1", lease_secs=60)
        monkeypatch.setattr(engine_update, "enqueue_one", enqueue_one)
        reply = conn.request("update", dequeue=[ref(task)], enqueue=[{"queue": "boom", "data": b"next", "pid": "1"}])
        assert reply.error["code"] == "INTERNAL"
        monkeypatch.undo()
        # neither half happened: the task is still held by its lease, nothing was enqueued
        held = conn.call("get", queue="stage-1", pid="1")
        assert (held["state"], held["attempts"]) == ("leased", 0)
        assert conn.call("list_queues") == [{"queue": "stage-1", "size": 1, "leased": 1}]
        result = conn.call("update", dequeue=[ref(task)], enqueue=[{"queue": "stage-2", "data": b"next", "pid": "1"}])
        assert result["dequeued"][0]["ok"] and not result["enqueued"][0]["collapsed"]


def test_long_poll_of_a_client_that_closed_does_not_take_a_task(broker) -> None:
    """A parked long-poll whose client closed its socket must not be handed a task."""
    import time as _time

    raw = broker.connect()
    raw.send("lease", queues=["gone"], wait_secs=5)
    _time.sleep(0.2)  # parked
    raw.close()
    _time.sleep(0.2)
    other = broker.connect()
    other.call("enqueue", tasks=[{"queue": "gone", "data": b"x"}])
    leased = other.call("lease", queues=["gone"], max_tasks=1)
    assert len(leased) == 1, "the task went to the closed client's long-poll"
    other.close()


def test_cancel_wait_answers_the_parked_long_poll_with_nothing(broker) -> None:
    import time as _time

    raw = broker.connect()
    lease_id = raw.send("lease", queues=["withdrawn"], wait_secs=30)
    _time.sleep(0.2)
    # built by hand: the field is named like the helper's own request_id argument
    from kittiwake.protocol import encode_frame, encode_request

    cancel_id = 9_000_001
    raw.send_raw(encode_frame(encode_request("cancel_wait", cancel_id, {"request_id": lease_id})))
    replies = {reply.id: reply for reply in raw.read_replies(2)}
    assert replies[lease_id].ok and replies[lease_id].result == []
    assert replies[cancel_id].result == {"cancelled": True}
    raw.send_raw(encode_frame(encode_request("cancel_wait", cancel_id + 1, {"request_id": 12345})))
    assert raw.read_replies(1)[0].result == {"cancelled": False}
    raw.call("enqueue", tasks=[{"queue": "withdrawn", "data": b"x"}])
    assert len(raw.call("lease", queues=["withdrawn"])) == 1
    raw.close()

"""The views over records users write — `/api/jobs`, `/api/flows`, `/api/workers` — read them as untrusted.

A user writes what it likes into its own job registry, runs queue and worker
registry. Each test starts a broker subprocess with `--http-port` and an
auth file (root; alice and bob, each on its own prefix and its own flows;
a producer-only user), writes records over the binary port as that user,
and reads the views over real HTTP:

* records naming another user's queues show nothing of them to their
  writer, while root still sees the states;
* a record that does not decode is left out and counted (`skipped`), and
  the others still show;
* records that name tens of thousands of sinks, or runs of thousands of
  steps, do not hold the broker's event loop: a binary client sending small
  requests meanwhile measures its worst round trip (a bound against a stall
  of seconds, not a performance figure).
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

from kittiwake import Client
from kittiwake.app.job_records import MAX_SINKS, job_record, new_job_id, record_task
from kittiwake.constants import JOIN_HEADER
from kittiwake.flow import records
from kittiwake.flow.records import RunRecord, StepShape
from support.auth_users import ALICE, BOB, ROOT, write_auth_file
from support.broker_process import BrokerProcess
from support.http_api import basic, call, get

pytestmark = pytest.mark.timeout(120)

PRODUCER = ("pat", "pat-token-0123456789abcdef")
RIGHTS = {
    "root": (ROOT[1], {"*": ["all"]}),
    "alice": (ALICE[1], {"alice.*": ["all"], "flow.alice*": ["all"]}),
    "bob": (BOB[1], {"bob.*": ["all"], "flow.bob*": ["all"]}),
    "pat": (PRODUCER[1], {"alice.*": ["produce"]}),
}


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    users = write_auth_file(tmp_path / "users.json", RIGHTS)
    with BrokerProcess(tmp_path / "data", extra_args=["--http-port", "0"], auth_file=users) as process:
        yield process


def client_of(broker: BrokerProcess, user: tuple[str, str]) -> Client:
    return Client(broker.client_url(*user))


def view(broker: BrokerProcess, user: tuple[str, str], path: str) -> Any:
    return get(broker, path, basic(*user))


def job_record_task(registry: str, created_at: float, sinks: list[tuple[str, str]]) -> dict[str, Any]:
    record = job_record(new_job_id(created_at), "records", created_at, [queue for queue, _ in sinks], sinks)
    return record_task(registry, record)


def run_record(run: str, flow: str, group: str, steps: list[StepShape]) -> bytes:
    return records.encode(RunRecord(run=run, flow=flow, group=group, created_at=time.time(), data_dir="/nowhere",
                                    inputs={}, steps=steps, sinks=[]))


def step(name: str, job_queue: str, port_queue: str) -> StepShape:
    return StepShape(name=name, engine="python", join=f"{job_queue}#join", job_queue=job_queue,
                     ports={"in": [port_queue, "required"]}, outputs=[])


def bury(client: Client, queue: str, pid: str, reason: str) -> None:
    """Dead-letter task `pid` of `queue` with `reason`; the others leased on the way go back."""
    for task in client.lease(queue, max_tasks=10, lease_secs=300):
        if task.pid == pid:
            client.release(task, reason, bury=True)
        else:
            client.release(task)


def test_records_naming_another_users_queues_show_nothing_of_them(broker: BrokerProcess) -> None:
    with client_of(broker, BOB) as bob:  # bob's queues: a task waiting, a dead letter and its reason
        bob.enqueue("bob.q", "x", pid="queued")
        bob.enqueue("bob.q", "x", pid="dies")
        bury(bob, "bob.q", "dies", "bob's secret reason")
        join = {JOIN_HEADER: "flow.bob#steps.python.s#join"}  # the join of the step below
        bob.enqueue("flow.bob#steps.python.s", "job", pid="r1/00000000", headers=join)
        bob.enqueue("flow.bob#steps.python.s", "job", pid="r1/00000001", headers=join)
        bury(bob, "flow.bob#steps.python.s", "r1/00000001", "bob's secret reason")
    with client_of(broker, ALICE) as alice:  # alice's records name them
        alice.enqueue_many([job_record_task("alice.jobs", time.time(), [("bob.q", "queued"), ("bob.q", "dies"),
                                                                        ("bob.q", "gone")])])
        shape = step("s", "flow.bob#steps.python.s", "flow.bob#in.s.in")
        alice.enqueue("flow.alice#runs", run_record("r1", "alice", "flow.bob", [shape]), pid="r1")

    [job] = view(broker, ALICE, "/api/jobs?registry=alice.jobs")["jobs"]
    assert job["state"] == "hidden" and job["sinks"]["hidden"] == 3
    assert sum(job["sinks"].values()) == 3  # counted hidden, nothing else
    [run] = view(broker, ALICE, "/api/flows")["runs"]
    assert (run["run"], run["state"], run["dead"]) == ("r1", "hidden", [])
    assert run["steps"] == [{"step": "s", "engine": "python", "waiting": 0, "queued": 0, "running": 0, "done": 0,
                             "dead": 0, "reused": 0}]
    for path in ("/api/jobs?registry=alice.jobs", "/api/flows"):
        assert "secret" not in json.dumps(view(broker, ALICE, path))
    assert call(broker, "GET", "/api/jobs?registry=alice.jobs", headers=basic(*PRODUCER))[0] == 403

    [job] = view(broker, ROOT, "/api/jobs?registry=alice.jobs")["jobs"]  # root may read them all
    assert job["state"] == "failed"
    assert [job["sinks"][state] for state in ("queued", "failed", "done", "hidden")] == [1, 1, 1, 0]
    [run] = view(broker, ROOT, "/api/flows")["runs"]
    assert run["state"] == "failed" and (run["steps"][0]["queued"], run["steps"][0]["dead"]) == (1, 1)
    assert [dead["reason"] for dead in run["dead"]] == ["bob's secret reason"]


def test_a_malformed_record_is_skipped_and_counted(broker: BrokerProcess) -> None:
    now = time.time()
    garbage = [b"\xff\xfe not JSON", b"[" * 100_000, b'{"id": 5, "sinks": []}', b'{"id": "x"}']
    with client_of(broker, ALICE) as alice:
        good = job_record_task("alice.jobs", now - 10, [("alice.q", "t")])
        alice.enqueue_many([good, *({"queue": "alice.jobs", "pid": f"{int(now * 1000) - index:013d}-0000000{index}",
                                     "data": data} for index, data in enumerate(garbage))])
        alice.enqueue("flow.alice#runs", run_record("good", "alice", "flow.alice", [
            step("s", "flow.alice#steps.python.s", "flow.alice#in.s.in")]), pid="good")
        alice.enqueue("flow.alice#runs", b"\x93not a run record", pid="garbage")
        alice.enqueue("flow.alice#runs", run_record("badname", "alice", "flow.alice", [
            step("s", "flow.alice#steps.python." + "n" * 2000, "flow.alice#in.s.in")]), pid="badname")
        alice.enqueue("alice.workers", json.dumps({"host": "h", "concurrency": 2}), pid="w1")
        alice.enqueue("alice.workers", "[1, 2]", pid="w2")

    jobs = view(broker, ALICE, "/api/jobs?registry=alice.jobs")
    assert [job["id"] for job in jobs["jobs"]] == [good["pid"]] and jobs["skipped"] == len(garbage)
    runs = view(broker, ALICE, "/api/flows")
    assert [run["run"] for run in runs["runs"]] == ["good"] and runs["skipped"] == 2  # garbage; a name no queue has
    workers = view(broker, ALICE, "/api/workers?registry=alice.workers")
    assert [worker["id"] for worker in workers["workers"]] == ["w1"] and workers["skipped"] == 1


class WorstRoundTrip:
    """A binary client sending small requests (peek of one task) in a thread until stopped; the
    longest any took. Bounded: at most `max_secs` and `max_requests`."""

    def __init__(self, broker: BrokerProcess, max_secs: float = 60.0, max_requests: int = 200_000) -> None:
        self.connection = broker.connect(timeout=max_secs)
        assert self.connection.auth(*ROOT).ok
        self.max_secs = max_secs
        self.max_requests = max_requests
        self.worst_secs = 0.0
        self.requests = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        deadline = time.monotonic() + self.max_secs
        while not self._stop.is_set() and time.monotonic() < deadline and self.requests < self.max_requests:
            started = time.monotonic()
            self.connection.call("peek", queue="alice.q", n=1)
            self.worst_secs = max(self.worst_secs, time.monotonic() - started)
            self.requests += 1
            time.sleep(0.002)

    def __enter__(self) -> WorstRoundTrip:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join(timeout=self.max_secs)
        self.connection.close()


def test_records_that_name_too_much_do_not_stall_other_clients(broker: BrokerProcess) -> None:
    with client_of(broker, ALICE) as alice:
        # a task waiting on another: the engine does not hold alice.q whole, so each sink is a store read
        alice.enqueue("alice.q", "parent", pid="parent")
        alice.enqueue("alice.q", "child", pid="child", after=[("alice.q", "parent")])
        now = time.time()
        for index in range(10):  # 20,000 sinks each, written as they are, past what Job.submit writes
            record = {"id": new_job_id(now - index), "sinks": [["alice.q", f"s{sink:06d}"] for sink in range(20_000)]}
            alice.enqueue("alice.jobs", json.dumps(record), pid=record["id"])
        tokens = "flow.alice#in.s.in"
        for run in ("r1", "r2"):  # 150 steps whose ports each hold 300 tokens of the run
            alice.enqueue_many([{"queue": tokens, "pid": f"{run}/{index:08d}", "data": "t"} for index in range(300)])
            shapes = [step(f"s{index}", "flow.alice#steps.python.s", tokens) for index in range(150)]
            alice.enqueue("flow.alice#runs", run_record(run, "alice", "flow.alice", shapes), pid=run)
        shapes = [step(f"s{index}", f"flow.alice#steps.python.s{index}", "flow.alice#in.none") for index in range(3000)]
        alice.enqueue("flow.alice#runs", run_record("r3", "alice", "flow.alice", shapes), pid="r3")

    with WorstRoundTrip(broker) as probe:
        jobs = view(broker, ALICE, "/api/jobs?registry=alice.jobs")
        runs = view(broker, ALICE, "/api/flows")
    assert probe.requests > 0
    assert probe.worst_secs < 1.0, f"a small request waited {probe.worst_secs:.2f} s behind the views"

    assert len(jobs["jobs"]) == 10 and all(job["sinks_truncated"] for job in jobs["jobs"])
    assert {job["sinks"]["done"] for job in jobs["jobs"]} == {MAX_SINKS}  # the first MAX_SINKS looked up
    states = {run["run"]: run for run in runs["runs"]}
    assert states["r1"]["state"] == states["r2"]["state"] == "done"
    assert states["r1"]["steps"][0]["waiting"] == 300  # every token of the run, at each of its steps
    assert states["r3"]["state"] == "unknown" and runs["truncated"] is True

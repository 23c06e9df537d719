"""Job records (`kittiwake.app.job_records`): one small record per job in `_jobs`, written with its
first tasks, as the dashboard's /api/jobs reads them."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Iterator

import pytest

from kittiwake import Client, errors
from kittiwake.app import App
from kittiwake.app.job_records import (
    MAX_SINKS,
    job_record,
    job_state,
    new_job_id,
    read_record,
    record_task,
)
from kittiwake.constants import JOBS_QUEUE
from kittiwake.model import Limits
from support.auth_users import ALICE, standard_auth_file
from support.broker_process import BrokerProcess

JOB_ID = re.compile(r"^\d{13}-[0-9a-f]{8}$")

app = App()


@app.task(queue="records.a")
def first(value: Any) -> Any:
    return value


@app.task(queue="records.b")
def second(value: Any) -> Any:
    return value


@app.task(queue="alice.records")
def alices(value: Any) -> Any:
    return value


@pytest.fixture(scope="module")
def shared_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("records") / "data")
    try:
        yield process
    finally:
        process.kill()


@pytest.fixture
def client(shared_broker: BrokerProcess) -> Iterator[Client]:
    with Client(shared_broker.url) as connected:
        yield connected


@pytest.fixture
def connected(shared_broker: BrokerProcess) -> Iterator[App]:
    app.url = shared_broker.url
    try:
        yield app
    finally:
        app.close()


def record_of(client: Client, job_id: str, queue: str = JOBS_QUEUE) -> dict[str, Any]:
    return read_record(client.get(queue, job_id).data)


def size_of(client: Client, queue: str) -> int:
    return sum(info.size for info in client.list_queues() if info.queue == queue)


def test_a_job_s_record_names_its_nodes_queues_and_sinks(connected: App, client: Client) -> None:
    before = connected.clock()
    job = connected.job()
    roots = [job.add(first, n) for n in range(3)]
    middle = job.add(second, "m", after=roots)
    ends = [job.add(first, "end1", after=[middle]), job.add(second, "end2", after=[middle])]
    lonely = job.add(second, "lonely")
    handles = job.submit(chunk=2)  # the record rides with the first bundle; the rest in three more
    assert JOB_ID.match(job.id) and abs(int(job.id[:13]) / 1000 - job.created_at) < 0.002
    record = record_of(client, job.id)
    assert record == {
        "id": job.id,
        "name": first.name,  # no name given: its first task's
        "created_at": job.created_at,
        "nodes": 7,
        "queues": {"records.a": 4, "records.b": 3},
        "queues_truncated": False,
        "sinks": [[ends[0].queue, ends[0].pid], [ends[1].queue, ends[1].pid], [lonely.queue, lonely.pid]],
        "sinks_truncated": False,
    }
    assert before <= record["created_at"] <= connected.clock()
    assert [handles[node].pid for node in (*ends, lonely)] == [pid for _, pid in record["sinks"]]
    named = connected.job("nightly import")
    named.add(first, 1)
    named.submit()
    assert record_of(client, named.id)["name"] == "nightly import"
    assert named.id[:13] >= job.id[:13]  # records sort by creation (to the millisecond)


def test_submitting_a_job_again_duplicates_neither_its_tasks_nor_its_record(connected: App, client: Client) -> None:
    job = connected.job("twice")
    parent = job.add(first, "p", key="twice-parent")
    job.add(second, "c", key="twice-child", after=[parent])
    job.submit()
    records, tasks_a, tasks_b = size_of(client, JOBS_QUEUE), size_of(client, "records.a"), size_of(client, "records.b")
    job.submit()  # the same Job again (a retry after an error half-way, say): everything collapses
    assert (size_of(client, JOBS_QUEUE), size_of(client, "records.a"), size_of(client, "records.b")) == (
        records, tasks_a, tasks_b)
    # the same graph built anew is another job: its keyed tasks collapse into the live ones, and
    # its own record lists the same sinks, so it shows the same state
    again = connected.job("twice")
    parent = again.add(first, "p", key="twice-parent")
    again.add(second, "c", key="twice-child", after=[parent])
    again.submit()
    assert (size_of(client, "records.a"), size_of(client, "records.b")) == (tasks_a, tasks_b)
    assert size_of(client, JOBS_QUEUE) == records + 1
    assert record_of(client, again.id)["sinks"] == record_of(client, job.id)["sinks"] == [["records.b", "twice-child"]]


def test_a_large_job_keeps_a_small_record(connected: App, client: Client) -> None:
    job = connected.job("map-reduce")
    maps = [job.add(first, n) for n in range(3000)]
    for start in range(0, 3000, 2):  # 1500 reducers of two maps each: 1500 sinks
        job.add(second, start, after=maps[start : start + 2])
    job.submit()
    data = client.get(JOBS_QUEUE, job.id).data
    record = read_record(data)
    assert record["nodes"] == 4500 and record["queues"] == {"records.a": 3000, "records.b": 1500}
    assert len(record["sinks"]) == MAX_SINKS and record["sinks_truncated"] is True
    assert len(data) < 100_000


def test_job_registry_none_writes_no_record(connected: App, client: Client, shared_broker: BrokerProcess) -> None:
    quiet = App(shared_broker.url, job_registry=None)
    quiet.task(queue="records.quiet", name="records.quiet")(lambda value: value)
    try:
        job = quiet.job()
        job.add("records.quiet", 1)
        job.submit()
        with pytest.raises(errors.TaskNotFound):
            client.get(JOBS_QUEUE, job.id)
        assert size_of(client, "records.quiet") == 1
    finally:
        quiet.close()
    with pytest.raises(errors.BadRequest):
        App(job_registry="no spaces allowed")


def test_a_user_without_rights_on_jobs_names_its_own_registry(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data", auth_file=standard_auth_file(tmp_path / "users.json"))
    try:
        url = broker.client_url(*ALICE)
        denied = App(url, reply_prefix="alice.replies.")
        try:
            job = denied.job()
            job.add(alices, 1)
            with pytest.raises(errors.Forbidden, match="job_registry"):
                job.submit()
        finally:
            denied.close()
        with Client(url) as alice:
            assert size_of(alice, "alice.records") == 0  # refused whole: no task without its record
            jobs = []
            for registry in ("alice.jobs", None):
                own = App(url, reply_prefix="alice.replies.", job_registry=registry)
                try:
                    jobs.append(own.job())
                    jobs[-1].add(alices, 1)
                    jobs[-1].submit()
                finally:
                    own.close()
            assert size_of(alice, "alice.records") == 2
            assert size_of(alice, "alice.jobs") == 1
            recorded = record_of(alice, jobs[0].id, "alice.jobs")
            assert recorded["sinks"] == [["alice.records", jobs[0].nodes[0].pid]]
    finally:
        broker.kill()


# ---------------------------------------------------------------- pure parts


def test_job_ids_sort_by_creation_time() -> None:
    assert new_job_id(1700000000.1234, lambda n: b"\xab" * n) == "1700000000123-abababab"
    assert new_job_id(5.0, lambda n: b"\x00" * n) == "0000000005000-00000000"
    assert new_job_id(1700000000.0) < new_job_id(1700000000.002)


def test_a_record_never_outgrows_a_task() -> None:
    long_queue, long_pid = "q" * Limits().max_queue_name_bytes, "p" * Limits().max_pid_bytes
    record = job_record("0000000000001-00000000", "big", 1.0, [f"{long_queue[:-4]}{n:04d}" for n in range(2000)],
                        [(long_queue, f"{long_pid[:-4]}{n:04d}") for n in range(5000)])
    task = record_task(JOBS_QUEUE, record)
    assert len(task["data"]) <= Limits().max_data_bytes
    written = json.loads(task["data"])
    assert written["sinks_truncated"] and written["queues_truncated"] and written["nodes"] == 2000
    assert task["queue"] == JOBS_QUEUE and task["pid"] == record["id"]


@pytest.mark.parametrize(
    ("sinks", "state"),
    [
        ({"done": 3}, "done"),
        ({"done": 2, "failed": 1}, "failed"),
        ({"failed": 1, "running": 4}, "failed"),
        ({"done": 1, "waiting": 2}, "running"),
        ({"running": 1, "queued": 2}, "running"),
        ({"queued": 2, "waiting": 1}, "waiting"),
        ({}, "done"),
    ],
)
def test_a_job_s_state_follows_its_sinks(sinks: dict[str, int], state: str) -> None:
    assert job_state(sinks) == state

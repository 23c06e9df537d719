"""The views of what runs on a broker: `/api/workers` (the registry), `/api/jobs` (`_jobs` records), `/api/flows`.

One broker subprocess with `--http-port` for the module. Workers register
through the registry's own code (`WorkerRegistry`) as `kittiwake worker`
does; job records are written as `Job.submit` writes them
(`app.job_records`), with sinks left in each state, and one job is submitted
by an `App`; a flow run is started with no worker, so its first job waits
queued.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

from flow import pipelines
from kittiwake import Client
from kittiwake.app import App
from kittiwake.app.job_records import job_record, new_job_id, record_task
from kittiwake.constants import JOBS_QUEUE
from kittiwake.flow.runs import load_record, run_status
from kittiwake.worker.registry import WorkerRegistry
from support.broker_process import BrokerProcess
from support.http_api import call, error_code, get

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with BrokerProcess(tmp_path_factory.mktemp("work") / "data", extra_args=["--http-port", "0"]) as process:
        yield process


@pytest.fixture
def client(broker: BrokerProcess) -> Iterator[Client]:
    with Client(broker.url) as connected:
        yield connected


def test_workers_show_as_the_registry_records_them(broker: BrokerProcess, client: Client) -> None:
    registry = WorkerRegistry(client, "w-views", every_secs=0.5)
    status = {"running": ["q/1", "q/2"], "held": 3, "finished": 7, "utilisation": 0.5, "stopping": False}
    registry.start({"host": "h1", "pid": 4321, "queues": ["q"], "concurrency": 4, "started_at": 1.0}, lambda: status)
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # registered, then renewed with its status as the note
            workers = get(broker, "/api/workers")["workers"]
            if workers and workers[0]["held"]:
                break
            time.sleep(0.05)
        [worker] = get(broker, "/api/workers")["workers"]
        assert worker["id"] == "w-views" and worker["alive"] is True and worker["host"] == "h1"
        assert (worker["pid"], worker["queues"], worker["concurrency"]) == (4321, ["q"], 4)
        assert (worker["running"], worker["held"], worker["finished"], worker["utilisation"]) == (["q/1", "q/2"], 3, 7, 0.5)
        assert worker["expires_at"] - worker["last_beat_at"] == pytest.approx(1.5)
        assert worker["last_beat_at"] <= time.time() + 1
        assert get(broker, "/api/overview")["workers"] == {"alive": 1, "slots": 4, "busy": 2}
        assert get(broker, "/api/workers?registry=other.workers") == {"workers": [], "skipped": 0}
        status, _, answer = call(broker, "GET", "/api/workers?registry=bad%20name")
        assert (status, error_code(answer)) == (400, "BAD_REQUEST")
    finally:
        registry.stop()
    assert get(broker, "/api/workers")["workers"] == []  # a stopping worker removes its record


def write_record(client: Client, created_at: float, name: str, sinks: list[tuple[str, str]],
                 registry: str = JOBS_QUEUE) -> str:
    """A job's record as `Job.submit` writes it (`app.job_records`), with the sinks given."""
    job_id = new_job_id(created_at)
    record = job_record(job_id, name, created_at, ["j.q"] * (len(sinks) + 1), sinks)
    client.enqueue_many([record_task(registry, record)])
    return job_id


def test_jobs_newest_first_with_states_derived_from_their_sinks(broker: BrokerProcess, client: Client) -> None:
    client.enqueue("j.q", "parent", pid="parent")
    client.enqueue("j.q", "run", pid="run1")
    client.enqueue("j.q", "wait", pid="wait1", after=[("j.q", "parent")])
    client.enqueue("j.q", "queued", pid="queued1")
    client.enqueue("j.q", "dead", pid="dead1")
    for task in client.lease("j.q", max_tasks=10, lease_secs=300):
        if task.pid == "dead1":
            client.release(task, "boom", bury=True)
        elif task.pid != "run1":
            client.release(task, reject=True)
    now = time.time()
    ids = [
        write_record(client, now - 30 * 86400, "old and done", [("j.q", "gone1")]),  # a month ago: the window grows
        write_record(client, now - 3, "running", [("j.q", "run1"), ("j.q", "wait1"), ("j.q", "gone2")]),
        write_record(client, now - 2, "waiting", [("j.q", "queued1"), ("j.q", "wait1")]),
        write_record(client, now - 1, "failed", [("j.q", "dead1"), ("j.q", "queued1")]),
    ]
    client.enqueue(JOBS_QUEUE, "not a record", pid=f"{int(now * 1000) - 5000:013d}-garbage0")
    answer = get(broker, "/api/jobs")
    jobs = answer["jobs"]
    assert [job["id"] for job in jobs] == ids[::-1] and (answer["skipped"], answer["truncated"]) == (1, False)
    states = {job["name"]: (job["state"], job["sinks"]) for job in jobs}
    none = {"hidden": 0}  # no auth file: nothing is hidden
    assert states["failed"] == ("failed", {"done": 0, "failed": 1, "running": 0, "queued": 1, "waiting": 0, **none})
    assert states["waiting"] == ("waiting", {"done": 0, "failed": 0, "running": 0, "queued": 1, "waiting": 1, **none})
    assert states["running"] == ("running", {"done": 1, "failed": 0, "running": 1, "queued": 0, "waiting": 1, **none})
    assert states["old and done"] == ("done", {"done": 1, "failed": 0, "running": 0, "queued": 0, "waiting": 0, **none})
    newest = get(broker, "/api/jobs?limit=2")["jobs"]
    assert [job["id"] for job in newest] == ids[:1:-1] and newest[0]["nodes"] == 3 and newest[0]["queues"] == {"j.q": 3}
    for bad in ("limit=0", "limit=101", "limit=x", "registry=bad%20name"):
        status, _, answer = call(broker, "GET", f"/api/jobs?{bad}")
        assert (status, error_code(answer)) == (400, "BAD_REQUEST")
    own = write_record(client, now, "in a registry of its own", [("j.q", "queued1")], registry="team.jobs")
    assert [job["id"] for job in get(broker, "/api/jobs?registry=team.jobs")["jobs"]] == [own]


app = App()


@app.task(queue="j.app")
def step(value: Any) -> Any:
    return value


def test_a_job_an_app_submits_shows_with_its_state(broker: BrokerProcess) -> None:
    app.url = broker.url
    try:
        job = app.job("nightly")
        first = job.add(step, 1)
        job.add(step, 2, after=[first])
        job.submit()  # no worker: the first waits queued, the second on it
        [shown] = [row for row in get(broker, "/api/jobs")["jobs"] if row["id"] == job.id]
        assert shown["name"] == "nightly" and shown["nodes"] == 2 and shown["queues"] == {"j.app": 2}
        assert shown["state"] == "waiting" and shown["sinks"]["waiting"] == 1
    finally:
        app.close()


def test_flow_runs_read_as_a_client_reads_them(broker: BrokerProcess, client: Client, tmp_path: Path) -> None:
    assert get(broker, "/api/flows") == {"runs": [], "skipped": 0, "truncated": False}
    first = pipelines.tiny.run(client, {"numbers": [1, 2]}, data_dir=tmp_path)
    second = pipelines.tiny.run(client, {"numbers": [3]}, data_dir=tmp_path)  # no worker: each waits queued
    runs = get(broker, "/api/flows")["runs"]
    assert [run["run"] for run in runs] == [second.id, first.id]  # newest first
    expected = run_status(client, load_record(client, pipelines.tiny.names.group, first.id), finish=False).to_dict()
    assert runs[1] == json.loads(json.dumps(expected))
    assert runs[1]["state"] == "running" and runs[1]["flow"] == "tiny"
    # the newest by run id, which starts with the start time to the second
    assert [run["run"] for run in get(broker, "/api/flows?limit=1")["runs"]] == [max(first.id, second.id)]
    status, _, answer = call(broker, "GET", "/api/flows?limit=1000")
    assert (status, error_code(answer)) == (400, "BAD_REQUEST")


def test_the_literal_start_of_a_pattern() -> None:
    from kittiwake.engine.reads import literal_prefix

    cases: dict[str, Any] = {r"^flow\.[A-Za-z0-9_-]+#runs$": "flow.", "^abc": "abc", "^ab*": "a", r"^a\.?x": "a",
                             "abc": "", "^a|^b": "", r"^a\d": "a", "^(ab)": ""}
    for pattern, prefix in cases.items():
        assert literal_prefix(pattern) == prefix, pattern

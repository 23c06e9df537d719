"""`GET /metrics` and `GET /api/history` (observe/metrics.py, observe/history.py).

The pure parts first: the queue sizes a scrape shows (the largest queues, the rest in `other`,
dead-letter queues as their queue's `dead` state) and the workers' states from registry records.

Then a real broker in this process (`support.in_process_broker`: real TCP, real SQLite store; in
process so that the test can close a history step when it wants rather than wait for the timer),
one per module, and a fixed workload over TCP: enqueue, lease, dequeue, release, a lease left to
run out, burial at max_attempts, a dead letter requeued, a task blocked on a parent, and worker
processes' registry records. `/metrics` is fetched over HTTP and parsed with prometheus_client's
own parser: the sizes equal the broker's stats, the counters and histograms the workload's counts,
and every family is named by the conventions. The history's point of the workload's step has the
rates the counters say.
"""

from __future__ import annotations

import http.client
import json
import time
from pathlib import Path
from typing import Any, Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from kittiwake.broker import BrokerConfig
from kittiwake.client import Client
from kittiwake.constants import WORKERS_QUEUE
from kittiwake.engine.queue_state import QueueState
from kittiwake.model import Task
from kittiwake.observe.face import ObserveFace
from kittiwake.observe.metrics import STATES, queue_sizes, worker_states
from kittiwake.worker.registry import WorkerRegistry
from support.in_process_broker import InProcessBroker

NOW = 1_700_000_000.0


# ------------------------------------------------------------------ pure parts


def queue(name: str, size: int, leased: int = 0, blocked: int = 0) -> QueueState:
    state = QueueState(name, size=size)
    state.blocked = blocked
    for index in range(leased):
        state.leased[f"p{index}"] = Task(queue=name, pid=f"p{index}", data=b"", enqueued_at=NOW)
    return state


def queues(*states: QueueState) -> dict[str, QueueState]:
    return {state.name: state for state in states}


def test_the_largest_queues_get_rows_and_the_rest_is_added_up() -> None:
    held = queues(
        queue("a", 5, leased=2, blocked=1), queue("a.dead", 3), queue("b", 1), queue("c", 2),
        queue("orphan.dead", 4), queue("empty", 0), queue("x.dead.dead", 1), queue("x.dead", 2),
    )
    rows, rest, count = queue_sizes(held, top=2)
    assert rows == [("a", [2, 2, 1, 3]), ("orphan", [0, 0, 0, 4])]
    # c, b, and x (its dead letters: x.dead), and x.dead (whose own dead letters are x.dead.dead)
    assert rest == [3, 0, 0, 2 + 1] and count == 6
    everything, nothing, _ = queue_sizes(held, top=100)
    assert nothing == [0, 0, 0, 0] and sum(map(sum, (sizes for _, sizes in everything))) == 5 + 3 + 1 + 2 + 4 + 1 + 2


def test_equal_sizes_keep_the_queues_order_and_no_rows_is_all_rest() -> None:
    held = queues(*(queue(f"q{index}", 1) for index in range(10)), queue("z", 1, leased=1))
    rows, rest, count = queue_sizes(held, top=3)
    assert [name for name, _ in rows] == ["q0", "q1", "q2"] and rest == [7, 1, 0, 0] and count == 11
    rows, rest, count = queue_sizes(held, top=0)
    assert rows == [] and rest == [10, 1, 0, 0] and count == 11
    held["empty"] = queue("empty", 0)
    held["empty.dead"] = queue("empty.dead", 2)
    rows, _, _ = queue_sizes(held, top=1)
    assert rows == [("empty", [0, 0, 0, 2])]


def test_queues_a_viewer_may_not_see_and_a_queue_named_other_are_added_up() -> None:
    held = queues(queue("alice.q", 2), queue("bob.q", 7), queue("other", 1))
    rows, rest, count = queue_sizes(held, top=10, visible=lambda name: name.startswith("alice."))
    assert rows == [("alice.q", [2, 0, 0, 0])] and rest == [8, 0, 0, 0] and count == 3


def test_dead_letters_a_viewer_may_not_see_are_added_up_even_beside_a_queue_it_sees() -> None:
    # carol may administer `shared` only; bob keeps 7 dead letters in `shared.dead`: /metrics showed
    # them as shared's dead state, which the JSON API hides from her
    held = queues(queue("shared", 2), queue("shared.dead", 7), queue("orphan.dead", 3), queue("mine.dead", 1))
    visible = {"shared", "orphan", "mine", "mine.dead"}.__contains__
    rows, rest, _ = queue_sizes(held, top=10, visible=visible)
    assert rows == [("shared", [2, 0, 0, 0]), ("mine", [0, 0, 0, 1])] and rest == [0, 0, 0, 7 + 3]


def record(pid: str, note: dict[str, Any] | str | None, expires_at: float) -> Task:
    return Task(queue=WORKERS_QUEUE, pid=pid, data=b"{}", enqueued_at=NOW, lease_expires_at=expires_at,
                note=json.dumps(note) if isinstance(note, dict) else note)


def test_workers_by_state_from_their_records() -> None:
    registry = queue(WORKERS_QUEUE, 7)
    for task in (
        record("busy", {"running": ["q/1"], "held": 1}, NOW + 5),
        record("prefetched", {"running": [], "held": 2}, NOW + 5),
        record("idle", {"running": [], "held": 0}, NOW + 5),
        record("garbled", "{not json", NOW + 5),
        record("stopping", {"running": ["q/2"], "stopping": True}, NOW + 5),
        record("ran-out", {"running": []}, NOW - 1),  # not swept back yet
    ):
        registry.leased[task.pid] = task
    # and one record swept back to available: 7 in all
    assert worker_states(registry, NOW) == {"busy": 2, "idle": 2, "stopping": 1, "lost": 2}
    assert worker_states(None, NOW) == {"busy": 0, "idle": 0, "stopping": 0, "lost": 0}


# ------------------------------------------------------------------ on a broker


class Workload:
    """What the module's workload did, as the tests expect to see it."""

    def __init__(self) -> None:
        self.moves: dict[str, dict[str, int]] = {}
        self.waits: dict[str, int] = {}
        self.runs: dict[str, int] = {}

    def add(self, queue: str, move: str, count: int = 1) -> None:
        self.moves.setdefault(queue, {}).setdefault(move, 0)
        self.moves[queue][move] += count


class Served:
    def __init__(self, broker: InProcessBroker, workload: Workload, point: dict[str, Any]) -> None:
        self.broker = broker
        self.workload = workload
        self.point = point  # the history's point of the workload's step

    def get(self, path: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
        connection = http.client.HTTPConnection("127.0.0.1", self.broker.broker.face_port("http"), timeout=10)
        try:
            connection.request("GET", path, headers=headers or {})
            response = connection.getresponse()
            return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
        finally:
            connection.close()

    def scrape(self) -> dict[str, Any]:
        status, headers, body = self.get("/metrics")
        assert status == 200 and headers["content-type"].startswith("text/plain; version=0.0.4")
        return {family.name: family for family in text_string_to_metric_families(body.decode())}


def run_workload(client: Client, workload: Workload) -> None:
    work = [{"queue": "work", "data": b"w", "pid": f"w{index}"} for index in range(8)]
    client.enqueue_many(work)
    assert client.enqueue("work", b"again", pid="w0").collapsed  # a duplicate is no new task
    workload.add("work", "enqueued", 8)
    client.enqueue_many([{"queue": "fragile", "data": b"f", "pid": f"f{index}", "max_attempts": 1} for index in range(3)])
    workload.add("fragile", "enqueued", 3)
    client.enqueue("kids", b"k", pid="k0", after=[("work", "w4")])  # blocked while w4 is not done
    workload.add("kids", "enqueued")

    leased = client.lease("work", max_tasks=5, lease_secs=60)
    workload.add("work", "leased", 5)
    workload.waits["work"] = 5
    client.dequeue(leased[:2])
    workload.add("work", "dequeued", 2)
    workload.runs["work"] = 2
    client.release(leased[2], "try again")  # w2 goes back, one attempt counted
    workload.add("work", "released")
    again = client.lease("work", max_tasks=1, lease_secs=0.2)  # w2's second lease: no second wait
    assert [task.pid for task in again] == ["w2"]
    workload.add("work", "leased")
    time.sleep(0.4)
    client.stats("work")  # sweeps: w2's lease ran out
    workload.add("work", "expired")

    fragile = client.lease("fragile", max_tasks=3, lease_secs=60)
    workload.add("fragile", "leased", 3)
    workload.waits["fragile"] = 3
    outcomes = client.release(fragile[:2], "broken")  # max_attempts=1: both to the dead letters
    assert all(outcome.dead for outcome in outcomes)
    workload.add("fragile", "released", 2)
    workload.add("fragile", "dead_lettered", 2)
    client.dequeue(fragile[2])
    workload.add("fragile", "dequeued")
    workload.runs["fragile"] = 1
    page = client.requeue_dead("fragile", ["f0"])
    assert [outcome.ok for outcome in page.outcomes] == [True]
    workload.add("fragile", "enqueued")


STATUSES = {
    "w-busy": {"running": ["work/w3"], "held": 1, "finished": 4, "utilisation": 0.5, "stopping": False},
    "w-idle": {"running": [], "held": 0, "finished": 0, "utilisation": 0.0, "stopping": False},
    "w-stopping": {"running": [], "held": 0, "finished": 9, "utilisation": 0.0, "stopping": True},
}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    directory: Path = tmp_path_factory.mktemp("metrics")
    face = ObserveFace(0)
    broker = InProcessBroker(BrokerConfig(data_dir=str(directory / "data"), port=0), None, faces=[face])
    client = Client(broker.url)
    registries: list[WorkerRegistry] = []
    try:
        observer = face.observer
        assert observer is not None
        broker.call_in_loop(observer.sampler.stop)  # the test closes the history's steps itself
        broker.call_in_loop(observer.sampler.sample)
        workload = Workload()
        for worker_id, status in STATUSES.items():
            # one at a time: a registry starting prunes records that are not held yet
            registry = WorkerRegistry(Client(broker.url), worker_id, every_secs=60.0)
            registry.start({"host": "test", "pid": 1, "queues": ["work"], "concurrency": 1}, lambda s=status: s)
            registries.append(registry)
            deadline = time.monotonic() + 10
            while client.stats(WORKERS_QUEUE)[0].leased < len(registries):
                assert time.monotonic() < deadline, f"{worker_id}'s record was not leased"
                time.sleep(0.02)
        client.enqueue(WORKERS_QUEUE, b"{}", pid="w-gone", receiver="w-gone")  # a record nobody holds: lost
        run_workload(client, workload)
        point = broker.call_in_loop(observer.sampler.sample)
        yield Served(broker, workload, point)
    finally:
        for registry in registries:
            registry.stop()
            registry.client.close()
        client.close()
        broker.close()


def samples(family: Any, name: str | None = None) -> dict[tuple[tuple[str, str], ...], float]:
    return {
        tuple(sorted(sample.labels.items())): sample.value
        for sample in family.samples
        if name is None or sample.name == name
    }


def by_queue(family: Any, name: str) -> dict[str, float]:
    return {sample.labels["queue"]: sample.value for sample in family.samples if sample.name == name}


def test_sizes_equal_the_brokers_stats(served: Served) -> None:
    families = served.scrape()
    tasks = samples(families["kittiwake_queue_tasks"])
    with Client(served.broker.url) as client:
        for stats in client.stats(["work", "fragile", "kids"]):
            shown = {state: tasks[(("queue", stats.queue), ("state", state))] for state in STATES}
            assert shown == {"available": stats.available, "leased": stats.leased, "blocked": stats.blocked,
                             "dead": stats.dead}, stats.queue
    assert tasks[(("queue", "work"), ("state", "leased"))] == 2  # w3, w4
    assert tasks[(("queue", "fragile"), ("state", "dead"))] == 1  # f1; f0 was requeued
    assert tasks[(("queue", "kids"), ("state", "blocked"))] == 1
    assert not any(dict(key)["queue"].endswith(".dead") for key in tasks)  # dead letters are their queue's state
    assert families["kittiwake_queues"].samples[0].value == 4  # work, fragile, kids, _workers


def test_counters_and_histograms_equal_the_workload(served: Served) -> None:
    families = served.scrape()
    for queue, moves in served.workload.moves.items():
        for move in ("enqueued", "leased", "dequeued", "released", "dead_lettered", "expired"):
            counted = by_queue(families[f"kittiwake_tasks_{move}"], f"kittiwake_tasks_{move}_total")
            assert counted.get(queue, 0) == moves.get(move, 0), (queue, move)
    waits = by_queue(families["kittiwake_task_wait_seconds"], "kittiwake_task_wait_seconds_count")
    runs = by_queue(families["kittiwake_task_run_seconds"], "kittiwake_task_run_seconds_count")
    for queue in ("work", "fragile"):
        assert waits[queue] == served.workload.waits[queue] and runs[queue] == served.workload.runs[queue]
    buckets = [s for s in families["kittiwake_task_wait_seconds"].samples
               if s.name.endswith("_bucket") and s.labels["queue"] == "work"]
    assert buckets[-1].labels["le"] == "+Inf" and buckets[-1].value == 5
    assert [s.value for s in buckets] == sorted(s.value for s in buckets)  # cumulative
    commits = families["kittiwake_store_commit_seconds"]
    assert samples(commits, "kittiwake_store_commit_seconds_count")[()] >= 10  # each write of the workload
    assert by_queue(families["kittiwake_tasks_enqueued"], "kittiwake_tasks_enqueued_total")["other"] == 0


def test_workers_and_connections(served: Served) -> None:
    families = served.scrape()
    workers = {sample.labels["state"]: sample.value for sample in families["kittiwake_workers"].samples}
    assert workers == {"busy": 1, "idle": 1, "stopping": 1, "lost": 1}
    connections = {s.labels["transport"]: s.value for s in families["kittiwake_connections"].samples}
    assert connections["tcp"] >= 3 and connections["http"] >= 1  # the registries' clients; this scrape
    info = families["kittiwake_build_info"].samples[0]
    assert info.value == 1 and info.labels["store"] == "sqlite" and set(info.labels) == {"version", "python", "store"}


FAMILIES = {
    "kittiwake_queue_tasks", "kittiwake_queues", "kittiwake_workers", "kittiwake_tasks_enqueued",
    "kittiwake_tasks_leased", "kittiwake_tasks_dequeued", "kittiwake_tasks_released", "kittiwake_tasks_dead_lettered",
    "kittiwake_tasks_expired", "kittiwake_task_wait_seconds", "kittiwake_task_run_seconds",
    "kittiwake_store_commit_seconds", "kittiwake_connections", "kittiwake_build_info",
}
LABELS = {"queue", "state", "transport", "version", "python", "store", "le"}
PIDS = {*(f"w{index}" for index in range(8)), "f0", "f1", "f2", "k0", *STATUSES, "w-gone"}


def test_every_family_is_named_by_the_conventions(served: Served) -> None:
    families = served.scrape()
    assert set(families) == FAMILIES
    for name, family in families.items():
        assert name.startswith("kittiwake_"), name
        assert family.documentation, name
        if family.type == "counter":
            assert all(sample.name == name + "_total" for sample in family.samples), name
        else:
            assert not name.endswith("_total"), name
        if family.type == "histogram" or any(word in name for word in ("wait", "run", "commit", "secs", "time")):
            assert name.endswith("_seconds"), f"{name}: a time is in seconds, and says so"
        for sample in family.samples:
            assert set(sample.labels) <= LABELS, (name, sample.labels)
            assert not set(sample.labels.values()) & PIDS, (name, sample.labels)  # no task's nor worker's id


def test_a_scrape_that_is_not_a_get_is_refused(served: Served) -> None:
    connection = http.client.HTTPConnection("127.0.0.1", served.broker.broker.face_port("http"), timeout=10)
    try:
        connection.request("POST", "/metrics", body=b"")
        response = connection.getresponse()
        response.read()
        assert response.status == 405 and response.getheader("allow") == "GET"
    finally:
        connection.close()


def test_openmetrics_when_asked_for(served: Served) -> None:
    status, headers, body = served.get("/metrics", {"Accept": "application/openmetrics-text; version=1.0.0"})
    assert status == 200 and headers["content-type"].startswith("application/openmetrics-text")
    assert body.decode().rstrip().endswith("# EOF")


def test_the_history_point_of_the_workload(served: Served) -> None:
    status, _, body = served.get("/api/history")
    assert status == 200
    history = json.loads(body)
    assert history["step_secs"] == 10 and history["points"][-1] == served.point
    point = served.point
    families = served.scrape()
    totals = {move: sum(by_queue(families[f"kittiwake_tasks_{move}"], f"kittiwake_tasks_{move}_total").values())
              for move in ("enqueued", "leased", "dequeued", "released", "dead_lettered", "expired")}
    elapsed = totals["enqueued"] / point["enqueued"]  # every move of the broker happened in the step
    for move, total in totals.items():
        assert point[move] * elapsed == pytest.approx(total), move
    assert point["t"] == pytest.approx(time.time(), abs=60)
    for name in ("wait_p50", "wait_p95", "run_p50", "run_p95", "commit_p50", "commit_p95"):
        assert point[name] is not None and point[name] >= 0, name

"""DAGs in the broker (Albatross §5.2.2): a task starts only once all its parents finished;
a failed or cancelled parent fails its whole subtree; no central DAG process."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from kittiwake.app import TaskFailed
from support.broker_process import BrokerProcess
from worker import apps
from worker.harness import read_lines, workers


def timeline(path: Path) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    starts: dict[str, list[float]] = {}
    ends: dict[str, list[float]] = {}
    for line in read_lines(path):
        kind, tag, stamp = line.split()
        (starts if kind == "start" else ends).setdefault(tag, []).append(float(stamp))
    return starts, ends


def test_a_dag_of_1000_tasks_finishes_in_dependency_order(broker: BrokerProcess, app, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    rng = random.Random(5)
    job = app.job()
    nodes = [job.add(apps.node, str(runs), "0")]
    edges: list[tuple[int, int]] = []
    for index in range(1, 1000):
        # fan-out: early nodes get many children; fan-in: up to 4 parents each
        parents = sorted({int(rng.random() ** 2 * index) for _ in range(rng.randint(1, 4))})
        nodes.append(job.add(apps.node, str(runs), str(index), after=[nodes[p] for p in parents]))
        edges.extend((parent, index) for parent in parents)
    handles = job.submit(chunk=250)
    assert handles[nodes[999]].status().state == "blocked"
    with workers(broker.url, tmp_path, "--processes", "2", "--concurrency", "8", processes=2):
        assert handles.results(timeout=120) == [str(n) for n in range(1000)]
    starts, ends = timeline(runs)
    assert all(len(starts[str(n)]) == 1 and len(ends[str(n)]) == 1 for n in range(1000))
    assert max(sum(1 for p, _ in edges if p == n) for n in range(1000)) > 20  # there is fan-out
    for parent, child in edges:
        assert starts[str(child)][0] >= ends[str(parent)][0], (parent, child)


def test_a_fan_in_of_1000_parents_fires_its_child_exactly_once(broker: BrokerProcess, app, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    job = app.job()
    parents = [job.add(apps.node, str(runs), f"p{n}") for n in range(1000)]
    child = job.add(apps.node, str(runs), "child", after=parents)
    handles = job.submit()
    with workers(broker.url, tmp_path, "--processes", "2", "--concurrency", "4", processes=2):
        assert handles[child].result(timeout=120) == "child"
    starts, ends = timeline(runs)
    assert len(starts["child"]) == 1
    assert starts["child"][0] >= max(ends[f"p{n}"][0] for n in range(1000))
    assert sum(len(times) for times in starts.values()) == 1001


def test_a_failed_parent_fails_its_subtree_and_nothing_else(broker: BrokerProcess, app, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    job = app.job()
    root = job.add(apps.node, str(runs), "root")
    failing = job.add(apps.node_fails, str(runs), "failing", after=[root])
    child = job.add(apps.node, str(runs), "child", after=[failing])
    grandchild = job.add(apps.node, str(runs), "grandchild", after=[child, root])
    sibling = job.add(apps.node, str(runs), "sibling", after=[root])
    handles = job.submit()
    with workers(broker.url, tmp_path, "--concurrency", "2"):
        assert handles[root].result(timeout=30) == "root"
        assert handles[sibling].result(timeout=30) == "sibling"
        with pytest.raises(TaskFailed) as failure:
            handles[failing].result(timeout=30)
        assert failure.value.type == "RuntimeError"
        for node in (child, grandchild):
            with pytest.raises(TaskFailed) as failure:
                handles[node].result(timeout=30)
            assert failure.value.reason.startswith("PARENT_FAILED ")
            assert handles[node].status().state == "failed"
    starts, _ = timeline(runs)
    assert set(starts) == {"root", "failing", "sibling"}


def test_cancelling_a_waiting_task_cancels_what_waits_on_it(broker: BrokerProcess, app, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    first = apps.node.submit(str(runs), "first", delay=60)
    second = apps.node.submit(str(runs), "second", after=[first])
    third = apps.node.submit(str(runs), "third", after=[second])
    assert second.status().state == "blocked"
    assert second.cancel() is True
    with pytest.raises(TaskFailed) as failure:
        second.result(timeout=5)
    assert failure.value.reason == "CANCELLED"
    with pytest.raises(TaskFailed) as failure:
        third.result(timeout=10)
    assert failure.value.reason == f"PARENT_FAILED {second.queue}/{second.pid}"
    assert first.status().state == "pending"


def test_a_job_with_a_cycle_is_refused(app) -> None:
    job = app.job()
    first = job.add(apps.node, "x", "1")
    second = job.add(apps.node, "x", "2", after=[first])
    first.parents.append(second)
    with pytest.raises(ValueError, match="cycle"):
        job.submit()


def test_a_node_with_a_node_name_waits_in_that_nodes_local_queue(broker: BrokerProcess, app) -> None:
    job = app.job()
    local = job.add(apps.node, "x", "local", node="n1")
    child = job.add(apps.node, "x", "child", after=[local])
    assert local.queue == "tests#dag@n1" and child.queue == "tests#dag"
    handles = job.submit()
    assert handles[local].queue == "tests#dag@n1"
    assert app.client.get("tests#dag@n1", local.pid).pid == local.pid
    with pytest.raises(ValueError, match="node= or delay="):
        job.add(apps.node, "x", "late", node="n1", delay=5)
    with pytest.raises(ValueError, match="node"):
        job.add(apps.node, "x", "bad", node="no spaces")

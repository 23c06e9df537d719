"""The reuse index with python steps (no Spark): a job that runs although a record of its fingerprint
exists — in a fresh run, or because the record's data is gone — leaves the record the next run takes,
and a record of the older layout (pid = the bare fingerprint) is still read, as the oldest."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from kittiwake import Client
from kittiwake.flow import Dataset, Flow
from kittiwake.flow.reuse import records, reuse_queue

SETTINGS = {"factor": 1}  # what the step reads beside its tokens: the case `--fresh` is for

scaling = Flow("reuse-index-scaling")


@scaling.step(inputs={"x": scaling.input("x")}, reuse=True)
def scale(ctx: Any, x: Any) -> int:
    return int(x.value) * SETTINGS["factor"]


writing = Flow("reuse-index-writing")


@writing.step(inputs={"x": writing.input("x")}, reuse=True)
def write(ctx: Any, x: Any) -> Dataset:
    path = ctx.output_path()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as file:
        file.write(str(int(x.value) * 2))
    return Dataset.path(path)


def run_once(client: Client, flow: Flow, data: Path, *, fresh: bool = False) -> tuple[Any, int]:
    run = flow.run(client, {"x": Dataset.inline(10)}, data_dir=data, fresh=fresh)
    status = run.wait(timeout=60)
    assert status.state == "done", status
    (progress,) = status.steps
    return run, progress.reused


def test_the_run_after_a_fresh_one_reuses_the_fresh_outputs(client: Client, python_workers, tmp_path: Path) -> None:
    # the fresh run's record collapsed onto the first run's (same pid): the next plain run went back
    # to the output from before the fresh run
    python_workers(scaling)
    SETTINGS["factor"] = 1
    try:
        first, _ = run_once(client, scaling, tmp_path)
        assert first.outputs()["scale.out"].value == 10
        SETTINGS["factor"] = 2
        fresh, reused = run_once(client, scaling, tmp_path, fresh=True)
        assert (fresh.outputs()["scale.out"].value, reused) == (20, 0)
        after, reused = run_once(client, scaling, tmp_path)
        assert (after.outputs()["scale.out"].value, reused) == (20, 1)
    finally:
        SETTINGS["factor"] = 1


def test_a_record_whose_data_is_gone_is_replaced_by_the_job_that_ran(client: Client, python_workers,
                                                                      tmp_path: Path) -> None:
    # the job that missed could not replace the dead record, so no run ever reused again
    python_workers(writing)
    first, _ = run_once(client, writing, tmp_path)
    shutil.rmtree(tmp_path / first.id)
    second, reused = run_once(client, writing, tmp_path)
    assert reused == 0  # the record's data is gone: a miss
    third, reused = run_once(client, writing, tmp_path)
    assert reused == 1 and third.outputs()["write.out"] == second.outputs()["write.out"]
    assert [record.run for record in records(client, writing, writing.steps["write"])] == [second.id, first.id]


def test_a_record_of_the_older_layout_is_read_and_then_superseded(client: Client, python_workers,
                                                                   tmp_path: Path) -> None:
    python_workers(scaling)
    first, _ = run_once(client, scaling, tmp_path)
    queue = reuse_queue(scaling, scaling.steps["scale"])
    (view,) = client.peek(queue, 10)
    fingerprint = view.pid.partition(".")[0]
    client.delete_queue(queue)
    client.enqueue(queue, bytes(view.data), pid=fingerprint)  # as a release before this layout wrote it
    _, reused = run_once(client, scaling, tmp_path)
    assert reused == 1
    _, reused = run_once(client, scaling, tmp_path, fresh=True)
    assert reused == 0
    assert [v.pid == fingerprint for v in client.peek(queue, 10)] == [True, False]  # the bare one sorts first
    _, reused = run_once(client, scaling, tmp_path)
    assert reused == 1

"""The MapReduce apps on Kittiwake's workers, end to end over TCP: equal to the reference, sorted,
spilling, local-first with stealing, and whole after a map worker is SIGKILLed mid-run."""

from __future__ import annotations

import os
import re
import threading
import time
from pathlib import Path
from typing import Iterator

import pytest

from kittiwake.client import Client
from kittiwake.errors import BadRequest
from kittiwake.mapreduce import gen_data, reference
from kittiwake.mapreduce.driver import input_files, run_native
from kittiwake.mapreduce.outputs import canonical_of_native, sort_output_check
from support.broker_process import BrokerProcess
from worker.harness import WorkerProcess

APP = "kittiwake.mapreduce.tasks:app"
SEED = 11
PATTERN = "ab"


@pytest.fixture(scope="module")
def text_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("native-text") / "in"
    gen_data.write(gen_data.plan(gen_data.TEXT, 400_000, 20_000, SEED), folder)
    return folder


@pytest.fixture(scope="module")
def records_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("native-records") / "in"
    gen_data.write(gen_data.plan(gen_data.RECORDS, 300_000, 10_000, SEED), folder)
    return folder


@pytest.fixture
def nodes(broker: BrokerProcess, tmp_path: Path) -> Iterator[list[WorkerProcess]]:
    """Two worker processes of two slots, on nodes n0 and n1, stealing soon when idle."""
    started = [WorkerProcess(broker.url, tmp_path / f"{node}.log", "--node", node, "--concurrency", "2",
                             "--steal-after", "0.2", app=APP) for node in ("n0", "n1")]
    try:
        yield started
    finally:
        for worker in started:
            worker.kill()


@pytest.mark.parametrize("app", ["wordcount", "grep", "sort"])
def test_each_app_equals_the_single_process_reference(app: str, broker: BrokerProcess, nodes, text_dir: Path,
                                                      records_dir: Path, tmp_path: Path) -> None:
    source = records_dir if app == "sort" else text_dir
    pattern = PATTERN if app == "grep" else None
    run = run_native(broker.url, app, source, tmp_path / "out", reducers=3, pattern=pattern,
                     nodes=["n0", "n1"], slots=4, block_bytes=7_000)  # maps of several blocks
    assert run.maps == len(input_files(source)) and run.reducers == 3
    assert run.tasks == run.maps + 3 + (0 if app == "grep" else 1)  # a barrier stands for the maps
    assert run.local_maps + run.stolen_maps == run.maps and run.processes == 2
    assert run.busy_seconds > 0 and 0 <= run.overhead < 1 and run.mb_s > 0
    assert sorted(path.name for path in (tmp_path / "out").iterdir()) == [
        f"part-r-{reducer:05d}.{'bin' if app == 'sort' else 'txt'}" for reducer in range(3)]
    expected = reference.reference(app, input_files(source), pattern)
    if app == "sort":
        canonical, ordered = sort_output_check(tmp_path / "out", "native")
        assert ordered, "the part files in order are not globally sorted"
        assert canonical == expected
    else:
        assert canonical_of_native(app, tmp_path / "out") == expected
    assert not any(Path("/dev/shm/kittiwake-mapreduce").glob("*")), "intermediates left behind"


@pytest.mark.parametrize("app", ["wordcount", "sort"])
def test_maps_that_spill_to_disk_give_the_same_output(app: str, broker: BrokerProcess, nodes, text_dir: Path,
                                                      records_dir: Path, tmp_path: Path) -> None:
    source = records_dir if app == "sort" else text_dir
    run = run_native(broker.url, app, source, tmp_path / "out", reducers=2, nodes=["n0", "n1"],
                     spill_bytes=2_000, block_bytes=3_000, work_dir=tmp_path / "work")
    assert run.spilled_maps == run.maps
    expected = reference.reference(app, input_files(source))
    if app == "sort":
        assert sort_output_check(tmp_path / "out", "native") == (expected, True)
    else:
        assert canonical_of_native(app, tmp_path / "out") == expected
    assert not any((tmp_path / "work" / "kittiwake-mapreduce").iterdir()), "spill files left behind"


def test_a_map_worker_killed_mid_run_neither_corrupts_nor_loses_output(broker: BrokerProcess, records_dir: Path,
                                                                       tmp_path: Path) -> None:
    """SIGKILL of one node's worker while it holds maps; a new worker takes its node's place."""
    app = "mapreduce.mr_slow_maps:app"
    common = ("--concurrency", "1", "--steal-after", "0.2")
    first = WorkerProcess(broker.url, tmp_path / "n0.log", "--node", "n0", *common, app=app)
    other = WorkerProcess(broker.url, tmp_path / "n1.log", "--node", "n1", *common, app=app)
    killed = threading.Event()
    done_at_kill: list[int] = []

    def progress(done: int, total: int) -> None:
        if done >= 5 and not killed.is_set():
            killed.set()
            done_at_kill.append(done)
            first.kill()  # SIGKILL: the supervisor and its process, mid-map

    try:
        restarted = None
        result: dict[str, object] = {}
        runner = threading.Thread(target=lambda: result.update(run=run_native(
            broker.url, "sort", records_dir, tmp_path / "out", reducers=3, nodes=["n0", "n1"], progress=progress,
            timeout=120)))
        runner.start()
        assert killed.wait(60), "the job never got going"
        restarted = WorkerProcess(broker.url, tmp_path / "n0-again.log", "--node", "n0", *common, app=app)
        runner.join(120)
        assert not runner.is_alive(), "the job did not finish after the kill"
        run = result["run"]
    finally:
        for worker in (first, other, restarted):
            if worker is not None:
                worker.kill()
    assert done_at_kill[0] < run.maps, "the kill landed after the maps were done"  # type: ignore[attr-defined]
    assert sort_output_check(tmp_path / "out", "native") == (reference.reference("sort", input_files(records_dir)),
                                                              True)
    assert sorted(os.listdir(tmp_path / "out")) == [f"part-r-{reducer:05d}.bin" for reducer in range(3)]


def test_bad_arguments_are_refused_before_anything_is_sent(text_dir: Path, tmp_path: Path) -> None:
    url = "kw://127.0.0.1:1"  # nothing listens: every check must come first
    with pytest.raises(BadRequest, match="app must be"):
        run_native(url, "join", text_dir, tmp_path / "o")
    with pytest.raises(BadRequest, match="pattern"):
        run_native(url, "grep", text_dir, tmp_path / "o")
    with pytest.raises(BadRequest, match="only grep"):
        run_native(url, "sort", text_dir, tmp_path / "o", pattern="x")
    with pytest.raises(BadRequest, match="reducers"):
        run_native(url, "sort", text_dir, tmp_path / "o", reducers=0)
    with pytest.raises(BadRequest, match="does not exist"):
        run_native(url, "sort", tmp_path / "missing", tmp_path / "o")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    with pytest.raises(BadRequest, match="not empty"):
        run_native(url, "wordcount", text_dir, tmp_path / "full")
    with pytest.raises(BadRequest, match="nodes"):
        run_native(url, "wordcount", text_dir, tmp_path / "o", nodes="n0")  # type: ignore[arg-type]


# ------------------------------------------------------------------ a failed job ends


def job_of(failure: pytest.ExceptionInfo[TimeoutError]) -> str:
    """The id of the job a run_native TimeoutError names."""
    match = re.search(r"mapreduce job (\S+) did not finish", str(failure.value))
    assert match, failure.value
    return match.group(1)


def job_leftovers(broker: BrokerProcess, out: Path, job: str) -> dict[str, object]:
    """What a job could leave once it ended: tasks, locations queues, its intermediates (its own
    directory only: other tests' jobs may run beside it), part files."""
    with Client(broker.url) as client:
        queued = sum(queue.size for queue in client.list_queues("mapreduce*") if not queue.queue.endswith(".dead"))
        located = [queue.queue for queue in client.list_queues("mapreduce.locations.*")]
    return {"queued": queued, "locations": located, "intermediates": [str(SHM / job)] if (SHM / job).exists() else [],
            "out": sorted(path.name for path in out.iterdir())}


SHM = Path("/dev/shm/kittiwake-mapreduce")
NOTHING_LEFT = {"queued": 0, "locations": [], "intermediates": [], "out": []}


def test_a_failed_job_has_its_tasks_cancelled_so_none_runs_after_it(broker: BrokerProcess, text_dir: Path,
                                                                    tmp_path: Path) -> None:
    """No worker up: the job times out with every task queued; a worker started then finds none."""
    out = tmp_path / "out"
    with pytest.raises(TimeoutError) as failed:
        run_native(broker.url, "wordcount", text_dir, out, reducers=2, timeout=1)
    job = job_of(failed)
    assert job_leftovers(broker, out, job) == NOTHING_LEFT
    worker = WorkerProcess(broker.url, tmp_path / "worker.log", "--concurrency", "2", app=APP)
    try:
        run_native(broker.url, "grep", text_dir, tmp_path / "later", reducers=1, pattern=PATTERN, timeout=120)
    finally:  # the worker had its time to run anything left of the failed job
        worker.kill()
    assert job_leftovers(broker, out, job) == NOTHING_LEFT


@pytest.mark.parametrize("stall", ["map", "reduce"])
def test_a_run_going_when_its_job_fails_writes_nothing_after(stall: str, broker: BrokerProcess, text_dir: Path,
                                                             tmp_path: Path) -> None:
    """Map 0 (or every reducer, its input read and its partial part file open) stalls 4 s; the driver
    gives up after 2 s and cancels; the run wakes without its lease: no intermediates made again, no
    location recorded, no part file."""
    out = tmp_path / "out"
    worker = WorkerProcess(broker.url, tmp_path / "worker.log", "--concurrency", "4", app="mapreduce.mr_stalled:app",
                           env={"MR_STALL": stall, "MR_STALL_SECS": "4"})
    try:
        with pytest.raises(TimeoutError) as failed:
            run_native(broker.url, "wordcount", text_dir, out, reducers=2, timeout=2)
        time.sleep(6)  # the stalled runs wake, try to write, and give up
    finally:
        worker.kill()
    assert job_leftovers(broker, out, job_of(failed)) == NOTHING_LEFT


@pytest.mark.parametrize("app", ["wordcount", "grep"])
def test_one_reducer_over_more_maps_than_a_task_may_wait_for_is_submitted_whole(app: str, broker: BrokerProcess,
                                                                              tmp_path: Path) -> None:
    """10,001 maps and 1 reducer: barriers stand for the maps (the broker refused the reduce's 10,001
    parents after the maps were sent); no worker, so the job times out and leaves nothing queued."""
    source = tmp_path / "in"
    source.mkdir()
    for index in range(10_001):
        (source / f"part-{index:05d}.txt").write_bytes(b"a b\n")
    out = tmp_path / "out"
    with pytest.raises(TimeoutError) as failed:
        run_native(broker.url, app, source, out, reducers=1, pattern="a" if app == "grep" else None, timeout=3)
    assert job_leftovers(broker, out, job_of(failed)) == NOTHING_LEFT
    with Client(broker.url) as client:  # every task was sent, then cancelled: the maps, 3 barriers, the reduce
        dead = sum(queue.size for queue in client.list_queues("mapreduce*.dead"))
    assert dead == 10_001 + 3 + 1

"""`run_native`: one MapReduce job on Kittiwake's workers, from input files to part files.

The driver does no data work beyond sort's sample: it lists the input's part
files, picks the job's directories, samples sort's splits, submits the whole
graph as one `Job` — a map per file (``node=`` its partition's node when
nodes are given, round robin, so workers with ``--node`` run their own and
steal from the others when idle), a reduce per reducer with ``after=`` its
maps — and waits for the results. Grep's reducer r depends only on its range
of maps; wordcount's and sort's on every map, through barrier tasks of at
most `BARRIER_GROUP` maps each (below `Limits.max_batch`, the most parents a
task may name), whatever the reducer count: a map that finishes then updates
one waiting task in the broker, not every reducer (a grep reducer of more
than `BARRIER_GROUP` maps waits for barriers too). The graph is checked
against that limit before anything is sent: the job goes in several
requests, and a refused one would leave the tasks sent before it queued.

The driver makes the job's intermediate directories before it submits; when
the job ends (done or failed) it deletes the locations queue and those
directories. A job that fails (a task failed, the timeout passed, the submit
was refused half way) first has its tasks cancelled in the broker, so none
runs after it ended; a run already going loses its lease, and `tasks` keeps
such a run from writing intermediates or a part file.

The figures it returns are the job's wall time from the first call (sort's
sampling included, as Spark's ``orderBy`` samples in its own job) to the last
part file, and the sum of the tasks' own run times: `overhead` is the share of
the slots' time not spent in a task's code (scheduling, fetching, idling).
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from kittiwake.app import App
from kittiwake.app.envelope import new_ids
from kittiwake.app.job import Job, Node
from kittiwake.errors import BadRequest
from kittiwake.mapreduce.gen_data import MANIFEST_NAME
from kittiwake.mapreduce.partitioners import sample_splits, validate_reducers
from kittiwake.mapreduce.spec import (
    DEFAULT_BLOCK_BYTES,
    DEFAULT_SPILL_BYTES,
    GREP,
    SORT,
    JobSpec,
    validate_app,
    validate_pattern,
)
from kittiwake.mapreduce.tasks import BARRIER_TASK, MAP_TASK, REDUCE_TASK, make_app
from kittiwake.model import Limits

DEFAULT_REDUCERS = 4
BARRIER_GROUP = 5_000
CANCEL_BATCH = 5_000  # tasks per cancel request, below `Limits.max_batch`
MEMORY_ROOT = Path("/dev/shm")
Progress = Callable[[int, int], None]  # (tasks done, tasks in all)
log = logging.getLogger(__name__)


@dataclass
class NativeRun:
    """What one job did."""

    app: str
    input_bytes: int
    maps: int
    reducers: int
    tasks: int  # every task submitted: maps, reduces, barriers
    seconds: float  # first call to last part file
    busy_seconds: float  # the map and reduce tasks' own run times, summed
    map_seconds: float  # first call to the last map's result
    spilled_maps: int
    output_bytes: int
    processes: int  # worker processes that ran a map
    local_maps: int  # maps run on the node their partition names
    stolen_maps: int  # maps of one node's partition run by another node's worker
    slots: int | None = None
    overhead: float | None = None  # 1 - busy / (seconds × slots), with `slots` known
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def mb_s(self) -> float:
        return self.input_bytes / 1e6 / self.seconds if self.seconds > 0 else 0.0

    def as_dict(self) -> dict[str, Any]:
        record = asdict(self)
        record["mb_s"] = round(self.mb_s, 2)
        return record


def input_files(input_dir: Path | str) -> list[Path]:
    """The partition files of a `gen-data` directory (or any directory of part files), in name order."""
    input_dir = Path(input_dir)
    if not input_dir.is_dir():
        raise BadRequest(f"input directory {input_dir} does not exist")
    files = sorted(path for path in input_dir.iterdir()
                   if path.is_file() and path.name.startswith("part-") and path.name != MANIFEST_NAME)
    if not files:
        raise BadRequest(f"{input_dir} holds no part-* files")
    return files


def _job_dirs(job: str, work_dir: Path | None) -> tuple[Path, Path]:
    spill_root = (work_dir or Path(tempfile.gettempdir())) / "kittiwake-mapreduce"
    memory_root = MEMORY_ROOT / "kittiwake-mapreduce" if MEMORY_ROOT.is_dir() else spill_root / "memory"
    return memory_root / job, spill_root / job


def run_native(
    url: str | None,
    app_name: str,
    input_dir: Path | str,
    out_dir: Path | str,
    *,
    reducers: int = DEFAULT_REDUCERS,
    pattern: str | bytes | None = None,
    nodes: Sequence[str] = (),
    spill_bytes: int = DEFAULT_SPILL_BYTES,
    block_bytes: int = DEFAULT_BLOCK_BYTES,
    work_dir: Path | None = None,
    slots: int | None = None,
    timeout: float = 3600.0,
    progress: Progress | None = None,
    app: App | None = None,
) -> NativeRun:
    """Run `app_name` over `input_dir`'s part files into `out_dir` (new or empty) on the workers of
    the broker at `url` (or of `app`, a `make_app` app); returns the job's figures. Raises the first
    task failure (`TaskFailed`) or TimeoutError after `timeout` seconds (naming the job: `job <id>`)."""
    started = time.perf_counter()
    validate_app(app_name)
    validate_reducers(reducers)
    if pattern is not None and app_name != GREP:
        raise BadRequest(f"only grep takes a pattern, not {app_name}")
    grep_pattern = validate_pattern(pattern) if app_name == GREP else b""
    if timeout <= 0:
        raise BadRequest("timeout must be above zero")
    if isinstance(nodes, str):
        raise BadRequest("nodes is a list of node names")
    files = input_files(Path(input_dir))
    out = Path(out_dir).absolute()
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise BadRequest(f"output directory {out} exists and is not empty")
    out.mkdir(parents=True, exist_ok=True)
    owned = app is None
    app = app or make_app(url)
    job = new_ids(1, time.time())[0]
    memory_dir, spill_dir = _job_dirs(job, work_dir)
    locations_queue = f"mapreduce.locations.{job}"
    submitted: Job | None = None  # once set, some of its tasks may be in the broker
    try:
        spec = JobSpec(
            app=app_name, job=job, maps=len(files), reducers=reducers, out_dir=str(out),
            memory_dir=str(memory_dir), spill_dir=str(spill_dir), locations_queue=locations_queue,
            spill_bytes=spill_bytes, block_bytes=block_bytes, pattern=grep_pattern,
            splits=tuple(sample_splits(files, reducers)) if app_name == SORT else (),
        )
        record = spec.as_dict()
        graph = app.job(f"mapreduce {app_name} {job}")  # its name in the job registry (the dashboard)
        maps = [graph.add(MAP_TASK, record, index, str(path.absolute()),
                          node=nodes[index % len(nodes)] if nodes else None)
                for index, path in enumerate(files)]
        barriers: list[Node] = []
        shared = [] if app_name == GREP else _barriers(graph, maps, barriers)  # for any reducer count
        reduces = []
        for reducer in range(reducers):
            parents = (shared if app_name != GREP else _grep_parents(
                graph, [maps[index] for index in spec.maps_of_reducer(reducer)], barriers))
            reduces.append(graph.add(REDUCE_TASK, record, reducer, after=parents))
        _check_graph(graph)  # before anything is sent: a refused job leaves no task behind
        for directory in (memory_dir, spill_dir):  # maps write into them, never make them (`tasks`)
            directory.mkdir(parents=True, exist_ok=True)
        submitted = graph
        handles = graph.submit()
        total = len(maps) + len(reduces)
        deadline = time.monotonic() + timeout
        map_results = []
        for done, node in enumerate(maps, 1):
            map_results.append(handles[node].result(max(0.0, deadline - time.monotonic())))
            if progress is not None:
                progress(done, total)
        map_seconds = time.perf_counter() - started
        reduce_results = []
        for done, node in enumerate(reduces, len(maps) + 1):
            reduce_results.append(handles[node].result(max(0.0, deadline - time.monotonic())))
            if progress is not None:
                progress(done, total)
        seconds = time.perf_counter() - started
    except BaseException as error:
        if submitted is not None:  # a failed job's tasks must not run on, nor write, after it ended
            _cancel(app, submitted, f"mapreduce job {job} ended: {type(error).__name__}")
        if isinstance(error, TimeoutError):
            raise TimeoutError(f"mapreduce job {job} did not finish within {timeout:g} s; its tasks were "
                               "cancelled") from error
        raise
    finally:
        _clean_up(app, locations_queue, memory_dir, spill_dir)
        if owned:
            app.close()
    busy = sum(result["seconds"] for result in map_results + reduce_results)
    return NativeRun(
        app=app_name,
        input_bytes=sum(path.stat().st_size for path in files),
        maps=len(maps),
        reducers=reducers,
        tasks=len(maps) + len(barriers) + len(reduces),
        seconds=seconds,
        busy_seconds=busy,
        map_seconds=map_seconds,
        spilled_maps=sum(1 for result in map_results if result["spilled"]),
        output_bytes=sum(result["output_bytes"] for result in reduce_results),
        processes=len({result["process"] for result in map_results}),
        local_maps=sum(1 for result in map_results if _placement(result) == "local"),
        stolen_maps=sum(1 for result in map_results if _placement(result) == "stolen"),
        slots=slots,
        overhead=(1 - busy / (seconds * slots)) if slots else None,
    )


def _placement(result: dict[str, Any]) -> str:
    """"local", "stolen" or "shared": where a map ran against where its partition is."""
    queue, _, node = str(result.get("queue", "")).partition("@")
    if not node:
        return "shared"
    return "local" if node == result.get("node") else "stolen"


def _barriers(graph: Job, maps: list[Node], barriers: list[Node]) -> list[Node]:
    """One barrier task per `BARRIER_GROUP` of `maps`, added to `graph` and to `barriers`; returns them."""
    made = [graph.add(BARRIER_TASK, after=maps[start:start + BARRIER_GROUP])
            for start in range(0, len(maps), BARRIER_GROUP)]
    barriers.extend(made)
    return made


def _grep_parents(graph: Job, maps: list[Node], barriers: list[Node]) -> list[Node]:
    """A grep reducer's parents: its maps, or barriers over them past `BARRIER_GROUP`."""
    return maps if len(maps) <= BARRIER_GROUP else _barriers(graph, maps, barriers)


def _check_graph(graph: Job) -> None:
    """BadRequest for a task the broker would refuse for its parents (`Limits.max_batch`): the job
    is sent in several requests, and one refused after the first would leave the others queued."""
    limit = Limits().max_batch
    for node in graph.nodes:
        if len(node.parents) > limit:
            raise BadRequest(f"task {node.definition.name} of the job would wait for {len(node.parents)} "
                             f"tasks, over the limit of {limit}")


def _cancel(app: App, graph: Job, reason: str) -> None:
    """Withdraw every task of `graph` still in the broker (finished or never sent ones are not
    found, and that is fine): queued ones never run, running ones lose their lease, so their
    finishing update — and the location it would record — is refused; dependents fail with them."""
    tasks = [(node.queue, node.pid) for node in graph.nodes]
    for start in range(0, len(tasks), CANCEL_BATCH):
        try:
            app.client.cancel(tasks[start:start + CANCEL_BATCH], reason)
        except Exception:  # noqa: BLE001 - a job's failure must not be hidden by its clean-up
            log.warning("could not cancel tasks of a failed job (%s)", reason, exc_info=True)
            return


def _clean_up(app: App, locations_queue: str, *directories: Path) -> None:
    try:
        app.client.delete_queue(locations_queue)
    except Exception:  # noqa: BLE001 - a job's failure must not be hidden by its clean-up
        pass
    for directory in directories:
        shutil.rmtree(directory, ignore_errors=True)

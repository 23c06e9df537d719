"""`kittiwake bench mapreduce`: grep, wordcount and sort on Kittiwake's workers and on PySpark, same run.

Albatross (§5.4, Figs 59/61/63) plots MapReduce throughput against partition
size: with small partitions a central scheduler's per-task cost dominates.
Here both systems run on this machine over the same files:

1. Input (`data`): per partition size, a text dataset (grep, wordcount) and a
   records dataset (sort) of `size_bytes`, made with gen-data.
2. Kittiwake: a durable broker (`kittiwake broker`, fsync, on a throwaway
   directory) and `nodes` commands `kittiwake worker
   kittiwake.mapreduce.tasks:app --node n<i> --concurrency C`, default flags
   otherwise, each holding its record in the worker registry before the first
   job; the driver (`run_native`) submits each job from this process with
   map tasks placed round robin on n0.., slots = nodes × C. Spark: the
   session running in this process (a test suite's) or a new `local[2]` one
   with `spark.driver.memory` 4g; `run_spark` with Spark's defaults beyond one
   input partition per file and `reducers` shuffle partitions. Starting
   either is timed apart, never in a rate.
3. Warm-up: one small job per app on each system, unmeasured.
4. Reference check: the first files (up to `sample_bytes`) of the 1 MB
   dataset through both systems and the plain-Python `reference`; equal when
   all three canonical outputs are (for sort, both outputs also in order).
5. Each app × partition size: Kittiwake, then Spark, on the same files into
   fresh output directories; the canonical outputs compared
   (`outputs_equal`; for sort both also globally sorted), then removed.

A rate is input bytes ÷ the job's wall time (MB/s, 10^6 bytes). A run that
fails ends its row only (`error`). Every process started here is stopped
and every throwaway directory removed, however the run ends.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn, TransferSpeedColumn

from kittiwake.bench.harness import BrokerProcess
from kittiwake_benchmarks.mapreduce.data import (
    KIND_OF_APP,
    Dataset,
    ensure_dataset,
    make_sample,
    sample_source,
    size_label,
)
from kittiwake_benchmarks.mapreduce.targets import evaluate_targets
from kittiwake.bench.worker_group import WorkerGroup
from kittiwake.bench.report import machine_info, progress_bars
from kittiwake_benchmarks.settings import MAPREDUCE_APPS, MapReduceSettings
from kittiwake.errors import BadRequest
from kittiwake.mapreduce.spec import GREP, SORT

WORKER_APP = "kittiwake.mapreduce.tasks:app"
READY_TIMEOUT_SECS = 60.0  # for every worker command to hold its registry record
POLL_SECS = 0.05
WATCH_SECS = 0.2  # how often the worker commands are checked while a job runs
JOB_TIMEOUT_SECS = 3600.0

Bar = Callable[[float, int], None]


def default_pattern(seed: int) -> str:
    """Grep's pattern when none is given: the seed's fourth most frequent word (many lines, not all)."""
    from kittiwake.mapreduce.gen_data import vocabulary

    return vocabulary(seed)[3]


def check_settings(settings: MapReduceSettings) -> None:
    """Raise BadRequest for settings no run can use."""
    if not settings.apps:
        raise BadRequest("choose at least one app")
    unknown = [app for app in settings.apps if app not in MAPREDUCE_APPS]
    if unknown:
        raise BadRequest(f"unknown app {', '.join(unknown)}; choose from {', '.join(MAPREDUCE_APPS)} or all")
    if not settings.partition_sizes:
        raise BadRequest("give at least one partition size")
    for size in settings.partition_sizes:
        if size < 100:
            raise BadRequest(f"a partition size must be at least 100 bytes, not {size}")
        if size > settings.size_bytes:
            raise BadRequest(f"the partition size {size:,} bytes is larger than the size {settings.size_bytes:,} bytes")
    if len(set(settings.partition_sizes)) != len(settings.partition_sizes):
        raise BadRequest("a partition size is given twice")
    for name in ("reducers", "nodes", "concurrency", "sample_bytes", "warmup_bytes"):
        value = getattr(settings, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise BadRequest(f"{name} must be a positive integer, not {value!r}")
    if settings.pattern is not None and (not settings.pattern or "\n" in settings.pattern or "\r" in settings.pattern):
        raise BadRequest("a grep pattern is one non-empty line")


# ------------------------------------------------------------------ systems


@dataclass
class Cluster:
    """The broker and the worker commands of the Kittiwake side."""

    broker: BrokerProcess
    workers: WorkerGroup
    url: str
    nodes: list[str]
    slots: int
    app: Any = None  # the driver's `make_app` app
    startup_s: float = 0.0

    def watch(self) -> None:
        failure = self.workers.failed()
        if failure:
            raise RuntimeError(failure)


def worker_commands(settings: MapReduceSettings) -> list[list[str]]:
    return [[sys.executable, "-m", "kittiwake", "worker", WORKER_APP, "--node", f"n{index}",
             "--concurrency", str(settings.concurrency)] for index in range(settings.nodes)]


def start_cluster(settings: MapReduceSettings, root: Path, stack: list[Callable[[], object]]) -> Cluster:
    """A broker and the worker commands, registered; their stops pushed on `stack` as they start."""
    from kittiwake.mapreduce.tasks import make_app
    from kittiwake.worker.registry import live_workers

    begin = time.monotonic()
    broker = BrokerProcess(root / "broker-data", root / "broker.log", settings.durability)
    stack.append(broker.stop)
    broker.start()
    url = f"kw://{broker.host}:{broker.port}"
    workers = WorkerGroup(worker_commands(settings), {**os.environ, "KITTIWAKE_URL": url}, root / "workers.log")
    stack.append(workers.stop)
    workers.start()
    cluster = Cluster(broker, workers, url, [f"n{index}" for index in range(settings.nodes)],
                      settings.nodes * settings.concurrency)
    cluster.app = make_app(url)
    stack.append(cluster.app.close)
    deadline = time.monotonic() + READY_TIMEOUT_SECS
    while len(live_workers(cluster.app.client)) < settings.nodes:
        cluster.watch()
        if time.monotonic() > deadline:
            raise RuntimeError(f"the worker commands did not register within {READY_TIMEOUT_SECS:.0f}s"
                               f"{workers.log_tail()}")
        time.sleep(POLL_SECS)
    cluster.startup_s = time.monotonic() - begin
    return cluster


def open_spark(settings: MapReduceSettings, stack: list[Callable[[], object]]) -> tuple[Any, float, bool]:
    """The session of this process if one runs (left running), else a new one stopped at the end;
    with the seconds it took to start and whether it was reused."""
    from kittiwake.testing.spark_session import spark_available
    from kittiwake_benchmarks.spark_peer import start_spark

    reason = spark_available()
    if reason is not None:
        raise BadRequest(reason)
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    if SparkContext._active_spark_context is not None:  # noqa: SLF001 - PySpark's own "is one running"
        return SparkSession.builder.getOrCreate(), 0.0, True
    begin = time.monotonic()
    session = start_spark(settings.spark_master, {"spark.driver.memory": settings.spark_driver_memory})
    stack.append(session.stop)
    return session, time.monotonic() - begin, False


# ------------------------------------------------------------------ one job on each


@dataclass
class PairRun:
    """One app over one input on both systems, outputs compared."""

    native: Any = None  # NativeRun
    spark: Any = None  # mapreduce.spark_jobs.SparkRun
    outputs_equal: bool | None = None
    native_sorted: bool | None = None
    spark_sorted: bool | None = None
    canonicals: dict[str, Any] = field(default_factory=dict)


def _pattern_for(app: str, pattern: str) -> str | None:
    return pattern if app == GREP else None


def _watched(cluster: Cluster, call: Callable[[], Any]) -> Any:
    """`call()` in a thread while this one watches the worker commands: a command that exits (or is
    stopped from outside) raises here at once instead of leaving the job waiting for its timeout."""
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome["value"] = call()
        except BaseException as exc:  # handed to the caller
            outcome["error"] = exc

    thread = threading.Thread(target=target, name="mapreduce-driver", daemon=True)
    thread.start()
    while thread.is_alive():
        thread.join(WATCH_SECS)
        if thread.is_alive():
            cluster.watch()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def run_native_job(cluster: Cluster, app: str, input_dir: Path, out_dir: Path, settings: MapReduceSettings,
                   pattern: str, bar: Bar | None = None) -> Any:
    from kittiwake.mapreduce.driver import run_native

    def progress(done: int, total: int) -> None:
        if bar is not None:
            bar(done / total, done)

    return _watched(cluster, lambda: run_native(
        None, app, input_dir, out_dir, reducers=settings.reducers, pattern=_pattern_for(app, pattern),
        nodes=cluster.nodes, slots=cluster.slots, progress=progress, timeout=JOB_TIMEOUT_SECS, app=cluster.app))


def run_spark_job(spark: Any, app: str, input_dir: Path, out_dir: Path, partition_bytes: int,
                  settings: MapReduceSettings, pattern: str, bar: Bar | None = None) -> Any:
    from kittiwake.mapreduce.spark_jobs import run_spark

    if bar is not None:
        bar(0.0, 0)
    run = run_spark(spark, app, input_dir, out_dir, partition_bytes=partition_bytes,
                    pattern=_pattern_for(app, pattern), reducers=settings.reducers)
    if bar is not None:
        bar(1.0, run.tasks or 0)
    return run


def compare_outputs(app: str, native_out: Path, spark_out: Path) -> PairRun:
    """Canonical outputs of both systems; for sort also whether each is globally sorted."""
    from kittiwake.mapreduce.outputs import NATIVE, SPARK, canonical_of_native, canonical_of_spark, sort_output_check

    pair = PairRun()
    if app == SORT:
        native, pair.native_sorted = sort_output_check(native_out, NATIVE)
        spark, pair.spark_sorted = sort_output_check(spark_out, SPARK)
    else:
        native, spark = canonical_of_native(app, native_out), canonical_of_spark(app, spark_out)
    pair.canonicals = {"native": native, "spark": spark}
    pair.outputs_equal = native == spark and pair.native_sorted is not False and pair.spark_sorted is not False
    return pair


def run_pair(cluster: Cluster, spark: Any, app: str, input_dir: Path, partition_bytes: int, work: Path,
             settings: MapReduceSettings, pattern: str, label: str = "",
             bar: Callable[[str], Bar] | None = None) -> PairRun:
    """`app` over `input_dir` on Kittiwake then on Spark, outputs compared then removed; with `bar`,
    a progress bar per system, named after `label`. Each job starts after `os.sync()`: the writeback
    of a dataset just generated, or of the other system's output, is not charged to it."""
    native_out, spark_out = work / "native-out", work / "spark-out"
    for path in (native_out, spark_out):
        shutil.rmtree(path, ignore_errors=True)
    try:
        os.sync()
        native = run_native_job(cluster, app, input_dir, native_out, settings, pattern,
                                bar(f"{label}: Kittiwake") if bar else None)
        os.sync()
        spark_run = run_spark_job(spark, app, input_dir, spark_out, partition_bytes, settings, pattern,
                                  bar(f"{label}: Spark") if bar else None)
        pair = compare_outputs(app, native_out, spark_out)
        pair.native, pair.spark = native, spark_run
        return pair
    finally:
        for path in (native_out, spark_out):
            shutil.rmtree(path, ignore_errors=True)


# ------------------------------------------------------------------ the run


def _exit_on_signal(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)


def _data_bars(console: Console) -> Progress:
    return Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                    TimeRemainingColumn(), console=console, transient=False)


def prepare_data(settings: MapReduceSettings, root: Path, console: Console) -> list[Dataset]:
    kinds = sorted({KIND_OF_APP[app] for app in settings.apps}, reverse=True)  # text first
    datasets = []
    with _data_bars(console) as bars:
        for partition_size in settings.partition_sizes:
            for kind in kinds:
                label = f"{kind} {size_label(settings.size_bytes)} in {size_label(partition_size)} files"
                task = bars.add_task(label, total=None)

                def progress(written: int, total: int, task: Any = task) -> None:
                    bars.update(task, completed=written, total=total)

                dataset = ensure_dataset(root, kind, settings.size_bytes, partition_size, settings.seed, progress)
                if dataset.reused:
                    bars.update(task, description=f"{label} (reused)")
                datasets.append(dataset)
    return datasets


def warm_up(cluster: Cluster, spark: Any, datasets: list[Dataset], work: Path, settings: MapReduceSettings,
            pattern: str, bar: Callable[[str], Bar]) -> float:
    """One small unmeasured job per app on each system; the seconds it all took."""
    begin = time.monotonic()
    for app in settings.apps:
        smallest = min((dataset for dataset in datasets if dataset.kind == KIND_OF_APP[app]),
                       key=lambda dataset: dataset.partition_size_bytes)
        sample = work / f"warmup-{app}"
        make_sample(smallest, sample, settings.warmup_bytes)
        try:
            run_pair(cluster, spark, app, sample, smallest.partition_size_bytes, work, settings, pattern,
                     f"warm-up {app}", bar)
        finally:
            shutil.rmtree(sample, ignore_errors=True)
    return time.monotonic() - begin


def reference_check(cluster: Cluster, spark: Any, datasets: list[Dataset], work: Path,
                    settings: MapReduceSettings, pattern: str, bar: Callable[[str], Bar]) -> dict[str, Any]:
    """Per app: a sample through Kittiwake, Spark and the plain-Python reference; equal when all agree."""
    from kittiwake.mapreduce.reference import reference

    checks: dict[str, Any] = {}
    for app in settings.apps:
        source = sample_source(datasets, KIND_OF_APP[app])
        sample = work / f"sample-{app}"
        try:
            files = make_sample(source, sample, settings.sample_bytes)
            pair = run_pair(cluster, spark, app, sample, source.partition_size_bytes, work, settings, pattern,
                            f"reference {app}", bar)
            expected = reference(app, files, _pattern_for(app, pattern))
            checks[app] = {"sample_bytes": sum(path.stat().st_size for path in files), "files": len(files),
                           "partition_size_bytes": source.partition_size_bytes,
                           "equal": bool(pair.outputs_equal and pair.canonicals["native"] == expected),
                           "lines": expected.lines}
        except Exception as exc:  # the check fails, the benchmark goes on
            checks[app] = {"sample_bytes": None, "equal": False, "error": f"{type(exc).__name__}: {exc}"}
            cluster.watch()  # a worker command that exited ends the benchmark
        finally:
            shutil.rmtree(sample, ignore_errors=True)
    return checks


def _rate(size: int, seconds: float | None) -> float | None:
    return round(size / 1e6 / seconds, 3) if seconds else None


def result_record(app: str, dataset: Dataset, pair: PairRun | None, error: str | None) -> dict[str, Any]:
    native, spark = (pair.native, pair.spark) if pair is not None else (None, None)
    native_rate = _rate(dataset.input_bytes, native.seconds if native else None)
    spark_rate = _rate(dataset.input_bytes, spark.seconds if spark else None)
    return {
        "app": app,
        "partition_size_bytes": dataset.partition_size_bytes,
        "input_bytes": dataset.input_bytes,
        "partitions": dataset.partitions,
        "native_mb_s": native_rate,
        "spark_mb_s": spark_rate,
        "ratio": round(native_rate / spark_rate, 3) if native_rate and spark_rate else None,
        "native_tasks": native.tasks if native else None,
        "spark_tasks": spark.tasks if spark else None,
        "outputs_equal": bool(pair.outputs_equal) if pair is not None else False,
        "native_seconds": round(native.seconds, 4) if native else None,
        "spark_seconds": round(spark.seconds, 4) if spark else None,
        "native_overhead": round(native.overhead, 4) if native and native.overhead is not None else None,
        "spilled_maps": native.spilled_maps if native else None,
        "stolen_maps": native.stolen_maps if native else None,
        "local_maps": native.local_maps if native else None,
        "native_processes": native.processes if native else None,
        "native_busy_seconds": round(native.busy_seconds, 4) if native else None,
        "spark_output_files": spark.output_files if spark else None,
        "sorted": {"native": pair.native_sorted, "spark": pair.spark_sorted} if pair is not None and app == SORT
        else None,
        "error": error,
    }


def run_mapreduce(settings: MapReduceSettings, console: Console) -> dict[str, Any]:
    """The whole benchmark; the JSON report (see the package's modules)."""
    check_settings(settings)
    pattern = settings.pattern or default_pattern(settings.seed)
    stack: list[Callable[[], object]] = []  # what to undo, in reverse order
    scratch = Path(tempfile.mkdtemp(prefix="kittiwake-bench-mapreduce-"))
    stack.append(lambda: shutil.rmtree(scratch, ignore_errors=True))
    if settings.data_dir is None:
        data_root = scratch / "data"
    else:
        data_root = Path(settings.data_dir)
        data_root.mkdir(parents=True, exist_ok=True)
    previous_sigterm = None
    if threading.current_thread() is threading.main_thread():
        previous_sigterm = signal.signal(signal.SIGTERM, _exit_on_signal)  # a SIGTERM cleans up like Ctrl-C
    results: list[dict[str, Any]] = []
    try:
        datasets = prepare_data(settings, data_root, console)
        spark, spark_startup, reused = open_spark(settings, stack)
        cluster = start_cluster(settings, scratch, stack)
        work = scratch / "work"
        work.mkdir()
        with progress_bars(console) as bar:
            warmup_s = warm_up(cluster, spark, datasets, work, settings, pattern, bar)
            checks = reference_check(cluster, spark, datasets, work, settings, pattern, bar)
            for app in settings.apps:
                for dataset in (d for d in datasets if d.kind == KIND_OF_APP[app]):
                    label = f"{app} {size_label(dataset.partition_size_bytes)} ×{dataset.partitions:,}"
                    pair, error = None, None
                    try:
                        pair = run_pair(cluster, spark, app, dataset.path, dataset.partition_size_bytes, work,
                                        settings, pattern, label, bar)
                    except Exception as exc:  # one run failing ends its row only
                        error = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
                        console.print(f"[red]{label}: failed — {error}")
                        cluster.watch()  # a worker command that died ends the benchmark
                    results.append(result_record(app, dataset, pair, error))
        spark_info = {"master": spark.sparkContext.master, "version": spark.version,
                      "driver_memory": spark.sparkContext.getConf().get("spark.driver.memory", None)}
    finally:
        problems = []
        for step in reversed(stack):
            try:
                step()
            except Exception as exc:
                problems.append(f"{type(exc).__name__}: {exc}")
        if previous_sigterm is not None:
            signal.signal(signal.SIGTERM, previous_sigterm)
        if problems:
            console.print(f"[red]clean-up: {'; '.join(problems)}")
    settings_record = {**asdict(settings), "apps": list(settings.apps),
                       "partition_sizes": list(settings.partition_sizes), "pattern": pattern,
                       "worker_command": f"kittiwake worker {WORKER_APP} --node n<i> --concurrency "
                                         f"{settings.concurrency}",
                       "slots": settings.nodes * settings.concurrency, "spark": spark_info}
    return {
        "machine": machine_info(),
        "settings": settings_record,
        "spark_startup_s": round(spark_startup, 3),
        "spark_reused_session": reused,
        "kittiwake_startup_s": round(cluster.startup_s, 3),
        "warmup_s": round(warmup_s, 3),
        "datasets": [{"kind": d.kind, "partition_size_bytes": d.partition_size_bytes, "partitions": d.partitions,
                      "input_bytes": d.input_bytes, "reused": d.reused,
                      "path": str(d.path) if settings.data_dir is not None else None} for d in datasets],
        "results": results,
        "reference": checks,
        "targets": evaluate_targets(results, settings.apps),
    }

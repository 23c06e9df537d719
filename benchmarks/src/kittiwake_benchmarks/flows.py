"""`kittiwake bench flows`: data pipelines on the broker — joins, step start, and the cost of a flow over plain Spark.

One durable broker subprocess (default flags: fsync), then three figures,
each against a reference measured in the same run:

1. `join_tokens` — tokens/s through a three-input join (`declare_join` with
   required ports a, b, c): `--join-keys` keys, their tokens dealt in one
   random order to `--producers` processes (`join_load`), sent in
   `enqueue_many` requests of `--batch`; the join starts one job per key in
   the commit of its last token. The job queue is then drained and checked:
   one job per key, none twice, each holding its key's three tokens. The
   reference `plain_enqueue` sends the same tokens with the same producers
   into plain queues; `ratio` = join rate ÷ plain rate.
2. `step_start` — a Spark step's start after its last token: `flow_probe`'s
   two-input step on a warm Spark worker (the benchmark's own session, in
   this process), from the acknowledgement of the update that brings the
   last token to the step function's first line. References: a no-op Spark
   job on the same session (`spark_noop`: ``spark.range(0, 1, 1, 1).count()``) and the broker's lease round trip
   (`lease_round_trip`); `ratio` = no-op job p50 ÷ step start p50.
3. `overhead` — the main job's flow (`kittiwake.demo.shop_flow`, the same
   Spark worker, a `kittiwake worker` for its python steps) against
   `kittiwake.demo.plain_spark`, the same transformations as one PySpark
   script, on the same generated data and the same session (so the same
   settings); every pass must produce the same figures. `--repeats` passes
   of each, in ABBA order (the machine's load drifts); overhead = mean flow
   ÷ mean plain − 1, and where the flow's time went, per step
   (`demo.step_times`), in its fastest pass. Every flow pass is a fresh run
   (no reuse); after them, two incremental re-runs (`run_reruns`): nothing
   changed, then one shard changed — `rerun_unchanged_ratio` and
   `rerun_one_changed_ratio` are their seconds ÷ the fresh passes' mean.

A warm-up pass of both pipelines on a small dataset (`--warmup-size`) runs
first, unmeasured. Targets (this 2-core machine): ≥ 10,000 join tokens/s;
step start p50 ≤ 20 ms, p99 ≤ 100 ms; overhead ≤ 5%; re-runs ≤ 0.3× (one shard
of six changed) and ≤ 0.1× (nothing changed) the first run. They are printed as
met or not, never asserted.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
import time
from array import array
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable, TypedDict

from rich.console import Console
from rich.table import Table

from kittiwake.bench import references
from kittiwake_benchmarks import flow_probe, join_load
from kittiwake.bench.harness import BrokerProcess, Measured, latency_summary_ms
from kittiwake.bench.jobs import LoadResult
from kittiwake.bench.processes import ProcessPool
from kittiwake.bench.report import (
    check_target,
    describe_target,
    figure,
    machine_info,
    numbers_table,
    progress_bars,
    show_figures,
)
from kittiwake_benchmarks.settings import FLOWS_JOIN_GROUP, FLOWS_PLAIN_GROUP, FlowsSettings

HISTOGRAM_EDGES_MS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000)
HISTOGRAM_WIDTH = 40
PIPELINE_TIMEOUT_SECS = 3600.0
FOLLOW_POLL_SECS = 1.0
JOIN_NAME = f"{FLOWS_JOIN_GROUP}#three"
JOB_QUEUE = f"{FLOWS_JOIN_GROUP}#jobs"


def _ports(group: str) -> dict[str, str]:
    return {port: f"{group}#in.{port}" for port in join_load.JOIN_PORTS}


# ------------------------------------------------------------------ joins


def _produce(pool: ProcessPool, url: str, ports: dict[str, str], settings: FlowsSettings,
             progress: Callable[[float, int], None]) -> LoadResult:
    start_ns = time.monotonic_ns() + 500_000_000  # time for every producer to connect
    for index in range(settings.producers):
        pool.start(index, join_load.Produce(url, tuple(ports.items()), settings.join_keys, index, settings.producers,
                                            settings.batch, settings.in_flight, settings.seed, start_ns))
    total = settings.join_keys * len(ports)
    merged = LoadResult(latencies_ns=array("q"))
    waiting = set(range(settings.producers))
    failure = None
    while waiting:
        done = sum(pool.count(index) for index in range(settings.producers))
        progress(min(1.0, done / total), done)
        for index in sorted(waiting):
            if pool.done(index, 0.05):
                waiting.discard(index)
                try:
                    merged.merge(pool.result(index))
                except RuntimeError as error:
                    failure = failure or str(error)
    progress(1.0, merged.tasks)
    if failure:
        raise RuntimeError(failure)
    return merged


def _rate(result: LoadResult) -> Measured:
    seconds = (result.last_end_ns - result.first_start_ns) / 1e9 if result.ops else 0.0
    return Measured(result, seconds)


def _timed_produce(broker: BrokerProcess, pool: ProcessPool, ports: dict[str, str], settings: FlowsSettings,
                   progress: Callable[[float, int], None]) -> Measured:
    cpu_before, wall_before = broker.cpu_secs(), time.monotonic()
    measured = _rate(_produce(pool, f"kw://{broker.host}:{broker.port}", ports, settings, progress))
    wall = time.monotonic() - wall_before
    if wall > 0:
        measured.broker_cpu_percent = round(100.0 * (broker.cpu_secs() - cpu_before) / wall, 1)
    return measured



class _Shape(TypedDict):
    """The load a join figure is measured under, kept in its record."""

    keys: int
    tokens: int
    ports: int
    producers: int
    batch: int
    in_flight: int

def run_joins(settings: FlowsSettings, broker: BrokerProcess,
              bar: Callable[[str], Callable[[float, int], None]]) -> dict[str, Any]:
    """The join figure and its plain reference (see the module docstring)."""
    from kittiwake.client import Client

    join_ports, plain_ports = _ports(FLOWS_JOIN_GROUP), _ports(FLOWS_PLAIN_GROUP)
    tokens = settings.join_keys * len(join_ports)
    pool = ProcessPool(settings.producers, join_load.serve)
    try:
        with Client(f"kw://{broker.host}:{broker.port}") as client:
            client.declare_join(JOIN_NAME, JOB_QUEUE, required=join_ports)
            joined = _timed_produce(broker, pool, join_ports, settings, bar(f"join: {tokens:,} tokens, random order"))
            drained = join_load.drain_jobs(client, JOB_QUEUE, settings.join_keys, JOIN_NAME, join_ports)
            left_waiting = sum(info.tokens_waiting for info in client.list_joins(f"^{FLOWS_JOIN_GROUP}#"))
            plain = _timed_produce(broker, pool, plain_ports, settings, bar(f"plain enqueue: {tokens:,} tokens"))
            stored = sum(row.size for row in client.stats(list(plain_ports.values())))
            for queue in plain_ports.values():
                client.delete_queue(queue)
            client.drop_join(JOIN_NAME)
    finally:
        pool.close()
    shape: _Shape = {"keys": settings.join_keys, "tokens": tokens, "ports": len(join_ports), "producers": settings.producers,
             "batch": settings.batch, "in_flight": settings.in_flight}
    plain_record = figure(plain, **shape, stored=stored)
    join_record = figure(
        joined,
        ratio=round(joined.tasks_per_sec / plain.tasks_per_sec, 3) if plain.tasks_per_sec else None,
        reference={"source": "plain enqueue of the same tokens by the same producers, same run",
                   "tokens_per_s": plain_record["tasks_per_s"]},
        target={"tasks_per_s_min": references.TARGET_JOIN_TOKENS_PER_SEC},
        **shape, **drained.as_dict(), tokens_left_waiting=left_waiting,
    )
    join_record["meets_target"] = check_target(join_record)
    return {"join_tokens": join_record, "plain_enqueue": plain_record, "_measured": {"join": joined, "plain": plain}}


# ----------------------------------------------------------- Spark figures


def _latency_measured(samples_ns: list[int]) -> Measured:
    result = LoadResult(tasks=len(samples_ns), ops=len(samples_ns), latencies_ns=array("q", samples_ns))
    return Measured(result, sum(samples_ns) / 1e9)


def run_step_start(settings: FlowsSettings, url: str, spark: Any, data_dir: str,
                   bar: Callable[[str], Callable[[float, int], None]]) -> dict[str, Any]:
    from kittiwake.client import Client

    total = settings.start_samples + settings.start_warmup
    update = bar(f"step start: {settings.start_samples:,} runs")
    with Client(url) as client:
        starts = flow_probe.step_start_samples(client, data_dir, settings.start_samples, settings.start_warmup,
                                               progress=lambda done: update(done / total, done))
    noop = flow_probe.spark_noop_samples(spark, settings.noop_samples)
    lease = flow_probe.lease_round_trip_samples(url, settings.noop_samples)
    measured = {"start": _latency_measured(starts), "noop": _latency_measured(noop), "lease": _latency_measured(lease)}
    noop_ms, lease_ms = latency_summary_ms(noop), latency_summary_ms(lease)
    start_ms = latency_summary_ms(starts)
    ratio = round(noop_ms["p50"] / start_ms["p50"], 2) if noop_ms and start_ms and start_ms["p50"] else None
    record = figure(measured["start"], rate=False, ratio=ratio,
                    reference={"spark_noop_job_ms": noop_ms, "lease_round_trip_ms": lease_ms},
                    target={f"latency_ms_{key}_max": value for key, value in references.TARGET_STEP_START_MS.items()})
    record["meets_target"] = check_target(record)
    return {"step_start": record, "spark_noop": figure(measured["noop"], rate=False),
            "lease_round_trip": figure(measured["lease"], rate=False), "_measured": measured}


def run_pipeline(url: str, root: Path, manifest: Any, console: Console, label: str,
                 check: Callable[[], None] = lambda: None, *, fresh: bool = True,
                 data_dir: Path | None = None) -> tuple[str, dict[str, Any], float, float, Any]:
    """One run of the shop flow on `manifest`: (run id, outputs, started, ended, status), times
    wall-clock seconds; the end is the one the run's end record holds, not the moment a poll saw
    it, so the run is polled only once a second (a poll is a few dozen requests to the broker, on
    the cores the run uses). `fresh`: every job runs (no reuse of earlier runs' outputs)."""
    from kittiwake.client import Client
    from kittiwake.demo import live
    from kittiwake.demo.shop_flow import flow, jobs_per_step
    from kittiwake.flow import Dataset

    with Client(url) as client:
        started = time.time()
        handle = flow.run(client, {"dataset": Dataset.path(manifest.root)}, data_dir=str(data_dir or root / "runs"),
                          fresh=fresh)
        with console.status(f"{label}: the flow", spinner="dots"):
            status = live.follow(handle, jobs_per_step(len(manifest.shards)), console, started=started, show=False,
                                 timeout_secs=PIPELINE_TIMEOUT_SECS, check=check, poll_secs=FOLLOW_POLL_SECS)
        ended = status.ended_at or time.time()
        if status.state != "done":
            raise RuntimeError(f"the flow's run {handle.id} ended {status.state}: {status.reason}; "
                               + "; ".join(f"{dead.step} {dead.key}: {dead.reason}" for dead in status.dead[:3]))
        return handle.id, handle.outputs(), started, ended, status


def _order(repeats: int) -> list[str]:
    """The passes in ABBA order (flow, plain, plain, flow, ...), so neither always runs first or
    later than the other while the machine's load drifts."""
    order: list[str] = []
    for index in range(repeats):
        order += ["flow", "plain"] if index % 2 == 0 else ["plain", "flow"]
    return order


class CpuMeter:
    """CPU seconds of the processes a pass uses: the Spark JVM, this process (the driver's Python,
    the Spark worker's threads), the broker and the python worker; and of the JVM's, the time its
    JIT compilers spent (`jit`, summed over compiler threads) and its collectors (`gc`), as its
    management beans count them: a pass that pays for compiling code the JVM had not made hot yet
    shows it there; and how many classes Spark's code generator compiled (`codegen_compiles`)."""

    def __init__(self, spark: Any, broker: BrokerProcess | None, others: Callable[[], list[int]]) -> None:
        try:
            jvm = spark.sparkContext._jvm
            self.jvm_pid: int | None = int(jvm.java.lang.ProcessHandle.current().pid())
            self._management: Any = jvm.java.lang.management.ManagementFactory
            self._codegen: Any = jvm.org.apache.spark.metrics.source.CodegenMetrics
        except Exception:  # a remote or unusual session: no JVM figure
            self.jvm_pid = None
            self._management = self._codegen = None
        self.broker = broker
        self.others = others

    def read(self) -> dict[str, float | None]:
        from kittiwake.bench.processes import cpu_secs, process_cpu_secs

        pids = self.others()
        workers = [process_cpu_secs(pid) for pid in pids]
        jit, gc = self._jvm_times()
        return {"jvm": process_cpu_secs(self.jvm_pid) if self.jvm_pid else None, "python": cpu_secs(),
                "broker": self.broker.cpu_secs() if self.broker is not None else None,
                "python_worker": sum(value for value in workers if value is not None) if pids else None,
                "jit": jit, "gc": gc, "codegen_compiles": self._codegen_compiles()}

    def _codegen_compiles(self) -> float | None:
        """Classes Spark's code generator compiled so far (its cache's misses: a query whose
        generated code differs — a literal inlined, say — compiles again, and the JIT follows)."""
        if self._codegen is None:
            return None
        try:
            return float(self._codegen.METRIC_COMPILATION_TIME().getCount())
        except Exception:
            return None

    def _jvm_times(self) -> tuple[float | None, float | None]:
        if self._management is None:
            return None, None
        try:
            jit = self._management.getCompilationMXBean().getTotalCompilationTime() / 1000.0
            gc = sum(bean.getCollectionTime() for bean in self._management.getGarbageCollectorMXBeans()) / 1000.0
        except Exception:  # a JVM without these beans
            return None, None
        return float(jit), float(gc)

    @staticmethod
    def spent(before: dict[str, float | None], after: dict[str, float | None]) -> dict[str, float | None]:
        return {key: _spent(value, after.get(key)) for key, value in before.items()}


def run_overhead(settings: FlowsSettings, url: str, spark: Any, root: Path, manifest: Any,
                 console: Console, meter: CpuMeter | None = None,
                 check: Callable[[], None] = lambda: None) -> dict[str, Any]:
    """`settings.repeats` passes of each pipeline (ABBA order); the means, each pass with the CPU it
    used, and where the flow's time went in its fastest pass."""
    import os

    from kittiwake.demo import plain_spark, step_times
    from kittiwake.demo.check import read_figures
    from kittiwake.demo.shop_flow import flow, read_timings

    passes: list[dict[str, Any]] = []
    fastest: tuple[float, Any] | None = None
    figures_paths: list[Any] = []
    for number, kind in enumerate(_order(settings.repeats)):
        # each pass starts with no dirty pages of the generator or of the passes before it to write
        # back: otherwise the first one pays for the dataset the generator just wrote
        os.sync()
        load = os.getloadavg()[0]
        cpu_before = meter.read() if meter is not None else None
        if kind == "flow":
            run, outputs, started, ended, _ = run_pipeline(url, root / f"flow-{number}", manifest, console,
                                                           f"overhead, pass {number + 1}", check)
            seconds = ended - started
            figures_paths.append(outputs["report.figures"].uri)
            if fastest is None or seconds < fastest[0]:
                fastest = (seconds, step_times.run_times(flow, read_timings(root / f"flow-{number}" / "runs", run),
                                                         started, ended))
            passes.append({"pipeline": kind, "seconds": round(seconds, 3), "load_average_1m": round(load, 2)})
        else:
            with console.status(f"overhead, pass {number + 1}: the plain PySpark script", spinner="dots"):
                plain = plain_spark.run(spark, manifest, root / f"plain-{number}")
            seconds = plain["seconds"]["total"]
            figures_paths.append(root / f"plain-{number}" / "figures")
            passes.append({"pipeline": kind, "seconds": round(seconds, 3), "load_average_1m": round(load, 2),
                           "parts": {key: round(value, 3) for key, value in plain["seconds"].items()}})
        if meter is not None and cpu_before is not None:
            passes[-1]["cpu_secs"] = CpuMeter.spent(cpu_before, meter.read())
    first = read_figures(figures_paths[0])
    same = all(read_figures(path) == first for path in figures_paths[1:])
    flow_secs = [item["seconds"] for item in passes if item["pipeline"] == "flow"]
    plain_secs = [item["seconds"] for item in passes if item["pipeline"] == "plain"]
    flow_mean, plain_mean = sum(flow_secs) / len(flow_secs), sum(plain_secs) / len(plain_secs)
    assert fastest is not None
    record: dict[str, Any] = {
        "flow_s": round(flow_mean, 3), "plain_s": round(plain_mean, 3),
        "overhead_percent": round(100.0 * (flow_mean / plain_mean - 1.0), 1) if plain_mean else None,
        "overhead_percent_fastest": round(100.0 * (min(flow_secs) / min(plain_secs) - 1.0), 1),
        "target": {"overhead_percent_max": references.TARGET_FLOW_OVERHEAD_PERCENT},
        "same_figures": same,
        "dataset": {"bytes": manifest.bytes, "lines": manifest.lines, "shards": len(manifest.shards)},
        "passes": passes,
        "flow_times": fastest[1].as_dict(),
        "plain_seconds": next(item["parts"] for item in passes
                              if item["pipeline"] == "plain" and item["seconds"] == min(plain_secs)),
    }
    record["cpu_secs"] = {kind: _mean_cpu([item.get("cpu_secs") for item in passes if item["pipeline"] == kind])
                          for kind in ("flow", "plain")}
    record.update(run_reruns(url, root, manifest, console, flow_mean, plain_mean, check))
    record["target"].update({"rerun_one_changed_ratio_max": references.TARGET_RERUN_ONE_CHANGED_RATIO,
                             "rerun_unchanged_ratio_max": references.TARGET_RERUN_UNCHANGED_RATIO})
    record["meets_target"] = check_target(record)
    return record


def run_reruns(url: str, root: Path, manifest: Any, console: Console, flow_secs: float, plain_secs: float,
               check: Callable[[], None] = lambda: None) -> dict[str, Any]:
    """Incremental re-runs after the overhead passes (each a fresh run, each leaving its jobs in
    the reuse index): the flow again with nothing changed, then with one shard drawn again
    (`demo.dataset.change_shard`); each one's seconds ÷ the fresh passes' mean, and the jobs
    it ran and reused per step."""
    from kittiwake.demo.dataset import change_shard

    reruns: dict[str, Any] = {}
    for name, change in (("unchanged", None), ("one_changed", len(manifest.shards) // 2)):
        if change is not None:
            change_shard(manifest, change)
        _, _, started, ended, status = run_pipeline(url, root / f"rerun-{name}", manifest, console,
                                                    f"re-run, {name.replace('_', ' ')}", check, fresh=False)
        seconds = ended - started
        reruns[name] = {"seconds": round(seconds, 3), "changed_shard": change,
                        "jobs": {step.step: {"ran": step.done - step.reused, "reused": step.reused}
                                 for step in status.steps}}
    return {
        "rerun_unchanged_ratio": round(reruns["unchanged"]["seconds"] / flow_secs, 3) if flow_secs else None,
        "rerun_one_changed_ratio": round(reruns["one_changed"]["seconds"] / flow_secs, 3) if flow_secs else None,
        "rerun_unchanged_vs_plain": round(plain_secs / reruns["unchanged"]["seconds"], 1)
        if reruns["unchanged"]["seconds"] else None,
        "reruns": reruns,
    }


def _mean_cpu(readings: list[dict[str, float | None] | None]) -> dict[str, float | None] | None:
    """The mean of each process's CPU seconds over passes (None where one was not measured)."""
    known = [reading for reading in readings if reading]
    if not known:
        return None
    return {key: (round(sum(reading[key] or 0.0 for reading in known) / len(known), 2)
                  if all(reading.get(key) is not None for reading in known) else None)
            for key in known[0]}


def _warm_up(settings: FlowsSettings, url: str, spark: Any, root: Path, console: Console) -> float | None:
    """One unmeasured pass of both pipelines on a small dataset with as many shards as the measured
    one (the flow's jobs then have the shapes and concurrency they have when measured); its
    seconds, or None when skipped."""
    from kittiwake.demo import plain_spark
    from kittiwake.demo.dataset import default_shards, generate, parse_size

    if settings.warmup_size.strip() in ("", "0"):
        return None
    began = time.monotonic()
    shards = settings.shards or default_shards(parse_size(settings.size))
    with console.status("warming up: both pipelines on a small dataset", spinner="dots"):
        manifest = generate(root / "warmup", parse_size(settings.warmup_size), shards, settings.seed + 1)
        run_pipeline(url, root / "warmup-flow", manifest, console, "warm-up")
        plain_spark.run(spark, manifest, root / "warmup-plain")
    return time.monotonic() - began


def _generate(settings: FlowsSettings, folder: Path, console: Console) -> Any:
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeElapsedColumn

    from kittiwake.demo.dataset import generate, parse_size

    size = parse_size(settings.size)
    with Progress(TextColumn("[bold]generating the dataset"), BarColumn(), DownloadColumn(), TimeElapsedColumn(),
                  console=console) as progress:
        task = progress.add_task("generate", total=size)
        return generate(folder, size, settings.shards, settings.seed,
                        progress=lambda written: progress.update(task, completed=written))


def run_spark_figures(settings: FlowsSettings, broker: BrokerProcess, root: Path, console: Console, session: Any,
                      bar: Callable[[str], Callable[[float, int], None]]) -> dict[str, Any]:
    """Step start and overhead on one session with an in-process Spark worker and a python worker."""
    from kittiwake.testing.spark_session import spark_available
    from kittiwake.demo import transforms
    from kittiwake.demo.main_job import FLOW_REFERENCE
    from kittiwake.demo.services import Services
    from kittiwake.demo.shop_flow import flow as shop_flow
    from kittiwake.flow.spark_worker import SparkWorker, start_session

    url = f"kw://{broker.host}:{broker.port}"
    reason = spark_available()
    if reason is not None and session is None:
        return {"error": reason}
    manifest = _generate(settings, root / "dataset", console) if not settings.only or "overhead" in settings.only else None
    started_here = False
    if session is None:
        from pyspark.sql import SparkSession

        session = SparkSession.getActiveSession()
    if session is None:
        with console.status("starting a SparkSession (local[2])", spinner="dots"):
            session = start_session("local[2]", transforms.SESSION_SETTINGS, app_name="kittiwake-bench-flows")
        started_here = True
    previous = transforms.apply_settings(session)
    services = Services(root, url)
    worker = SparkWorker([flow_probe.probe, shop_flow], url=url, session=session, concurrency=2)
    thread = threading.Thread(target=worker.run, name="kittiwake-bench-spark-worker", daemon=True)
    try:
        services.start_python_workers(FLOW_REFERENCE, 1, 2)
        thread.start()
        if not worker.started.wait(120):
            raise RuntimeError("the Spark worker did not start")
        warmup_secs = _warm_up(settings, url, session, root, console)
        figures: dict[str, Any] = {}
        if not settings.only or "step_start" in settings.only:
            figures.update(run_step_start(settings, url, session, str(root / "probe-runs"), bar))
        if not settings.only or "overhead" in settings.only:
            meter = CpuMeter(session, broker, services.worker_pids)
            figures["overhead"] = run_overhead(settings, url, session, root, manifest, console, meter,
                                               services.check_alive)
            figures["overhead"]["warmup_s"] = None if warmup_secs is None else round(warmup_secs, 2)
        figures["spark"] = {"master": session.sparkContext.master, "version": session.version,
                            "reused_session": not started_here}
        return figures
    finally:
        worker.stop()
        thread.join(60)
        services.stop()
        transforms.apply_settings(session, previous)
        if started_here:
            session.stop()


# --------------------------------------------------------------------- run


def run_flows(settings: FlowsSettings, console: Console, *, parent_dir: str | None = None,
              spark_session: Any = None) -> tuple[dict[str, Any], dict[str, Measured]]:
    """Every figure; the JSON report and the latency samples (for the CDF plot)."""
    root = Path(tempfile.mkdtemp(prefix="kittiwake-bench-", dir=parent_dir))
    broker = BrokerProcess(root / "data", root / "broker.log", settings.durability)
    try:
        broker.start()
        joins: dict[str, Any] = {}
        spark: dict[str, Any] = {}
        with progress_bars(console) as bar:
            if not settings.only or "joins" in settings.only:
                joins = run_joins(settings, broker, bar)
            if not settings.only or {"step_start", "overhead"} & set(settings.only):
                spark = run_spark_figures(settings, broker, root, console, spark_session, bar)
        broker_rss_mb = broker.peak_rss_mb()
    finally:
        broker.stop()
        shutil.rmtree(root, ignore_errors=True)
    measured: dict[str, Measured] = {}
    flows: dict[str, Any] = {}
    for part in (joins, spark):
        for name, value in part.items():
            if name == "_measured":
                continue
            flows[name] = value
    spark_measured = spark.get("_measured", {})
    if "start" in spark_measured:
        measured["last token → Spark step entered"] = spark_measured["start"]
        measured["no-op Spark job"] = spark_measured["noop"]
        measured["lease round trip"] = spark_measured["lease"]
    report = {"machine": machine_info(), "settings": {**asdict(settings), "broker_peak_rss_mb": broker_rss_mb},
              "flows": flows}
    report["flows"]["step_start_histogram"] = histogram(spark_measured["start"].result.latencies_ns) \
        if "start" in spark_measured else None
    return report, measured


# -------------------------------------------------------------------- show


def histogram(samples_ns: Any) -> list[dict[str, Any]]:
    """Counts of samples per latency bucket (ms), the buckets of `HISTOGRAM_EDGES_MS`."""
    counts = [0] * (len(HISTOGRAM_EDGES_MS) + 1)
    for sample in samples_ns:
        ms = sample / 1e6
        slot = next((index for index, edge in enumerate(HISTOGRAM_EDGES_MS) if ms < edge), len(HISTOGRAM_EDGES_MS))
        counts[slot] += 1
    buckets = []
    low = 0.0
    for index, count in enumerate(counts):
        high = HISTOGRAM_EDGES_MS[index] if index < len(HISTOGRAM_EDGES_MS) else None
        buckets.append({"from_ms": low, "to_ms": high, "count": count})
        low = float(high) if high is not None else low
    return buckets


def _histogram_table(buckets: list[dict[str, Any]]) -> Table:
    table = Table(title="step start latency (last token committed → Spark step entered)", title_justify="left")
    table.add_column("ms", justify="right")
    table.add_column("samples", justify="right")
    table.add_column("")
    most = max((bucket["count"] for bucket in buckets), default=0) or 1
    for bucket in buckets:
        label = f"{bucket['from_ms']:g}–{bucket['to_ms']:g}" if bucket["to_ms"] is not None else f"≥ {bucket['from_ms']:g}"
        table.add_row(label, f"{bucket['count']:,}", "█" * round(HISTOGRAM_WIDTH * bucket["count"] / most))
    return table


def _overhead_rows(record: dict[str, Any]) -> list[tuple[str, str, str, bool | None]]:
    times = record["flow_times"]
    plain = record["plain_seconds"]
    dataset = record["dataset"]
    rows: list[tuple[str, str, str, bool | None]] = [
        ("dataset", f"{dataset['bytes'] / 1e6:,.1f} MB, {dataset['lines']:,} rows, {dataset['shards']} shards", "", None),
        ("the flow (kittiwake.demo.shop_flow), mean", f"{record['flow_s']:.2f} s  ({_passes(record, 'flow')})", "", None),
        ("one PySpark script (kittiwake.demo.plain_spark), mean", f"{record['plain_s']:.2f} s  "
         f"({_passes(record, 'plain')}; fastest: read, clean, join and figures {plain.get('figures', 0):.1f}, "
         f"report {plain.get('report', 0):.1f})", "", None),
        ("flow ÷ plain − 1 (means)", "—" if record["overhead_percent"] is None else f"{record['overhead_percent']:+.1f}%",
         describe_target(record["target"]), record["meets_target"]),
        ("flow ÷ plain − 1 (fastest passes)", f"{record['overhead_percent_fastest']:+.1f}%", "", None),
        ("same figures from both", "yes" if record["same_figures"] else "NO", "", record["same_figures"]),
        *_rerun_rows(record),
        *_cpu_rows(record.get("cpu_secs") or {}),
        ("flow's fastest pass: Spark steps' busy time (2 slots)", f"{times['spark_busy_secs']:.2f} s "
         f"(÷ 2 = {times['spark_busy_secs'] / 2:.2f} s)", "", None),
        ("flow: python steps' busy time", f"{times['python_busy_secs']:.2f} s", "", None),
        ("flow: no step running (hand-offs on the critical path)", f"{times['idle_secs']:.2f} s", "", None),
    ]
    return rows


def _rerun_rows(record: dict[str, Any]) -> list[tuple[str, str, str, bool | None]]:
    """The re-runs: seconds, ÷ the first runs' mean, and the jobs run (the rest reused)."""
    rows: list[tuple[str, str, str, bool | None]] = []
    for name, label in (("unchanged", "re-run, nothing changed"), ("one_changed", "re-run, one shard changed")):
        rerun = (record.get("reruns") or {}).get(name)
        ratio = record.get(f"rerun_{name}_ratio")
        if rerun is None or ratio is None:
            continue
        bound = record["target"].get(f"rerun_{name}_ratio_max")
        ran = ", ".join(f"{step} {jobs['ran']}" for step, jobs in rerun["jobs"].items() if jobs["ran"]) or "none"
        rows.append((f"{label} ÷ the flow's first runs", f"{ratio:.3f}× ({rerun['seconds']:.1f} s; jobs run: {ran})",
                     f"≤ {bound}×" if bound is not None else "", ratio <= bound if bound is not None else None))
    return rows


def _cpu_rows(cpu: dict[str, Any]) -> list[tuple[str, str, str, bool | None]]:
    """CPU seconds per pass (means), which the machine's load moves less than wall time."""
    rows: list[tuple[str, str, str, bool | None]] = []
    for kind, label in (("flow", "the flow"), ("plain", "the script")):
        spent = cpu.get(kind)
        if not spent:
            continue
        parts = [f"{name} {spent[key]:.1f}" for key, name in (("jvm", "Spark JVM"), ("python", "this process"),
                                                             ("broker", "broker"), ("python_worker", "python worker"))
                 if spent.get(key) is not None]
        parts += [f"(JVM's {name} {spent[key]:.1f})" for key, name in (("jit", "JIT compiling"), ("gc", "GC"))
                  if spent.get(key) is not None]
        if spent.get("codegen_compiles") is not None:
            parts.append(f"({spent['codegen_compiles']:.0f} classes generated)")
        rows.append((f"CPU s per pass, {label}", ", ".join(parts), "", None))
    return rows


def _passes(record: dict[str, Any], pipeline: str) -> str:
    return ", ".join(f"{item['seconds']:.1f} s at load {item['load_average_1m']:.1f}" for item in record["passes"]
                     if item["pipeline"] == pipeline)


def _steps_table(record: dict[str, Any]) -> Table:
    table = Table(title="where the flow's time went in its fastest pass, per step (wait: inputs ready → function "
                        "entered: the broker's hand-off, reading the inputs, a free slot)", title_justify="left")
    for column in ("step", "engine", "jobs", "busy s", "wait ms mean", "wait ms max"):
        table.add_column(column, justify="left" if column in ("step", "engine") else "right")
    for step in record["flow_times"]["steps"]:
        table.add_row(step["step"], step["engine"], str(step["jobs"]), f"{step['busy_secs']:.2f}",
                      "—" if step["wait_ms_mean"] is None else f"{step['wait_ms_mean']:,.0f}",
                      "—" if step["wait_ms_max"] is None else f"{step['wait_ms_max']:,.0f}")
    return table


def show(console: Console, report: dict[str, Any]) -> None:
    flows = report["flows"]
    settings = report["settings"]
    show_figures(console, f"kittiwake bench flows — {settings['producers']} producers, {settings['durability']}, "
                          "×ref: join ÷ plain enqueue; step start vs a no-op Spark job",
                 {name: flows[name] for name in ("join_tokens", "plain_enqueue", "step_start", "spark_noop",
                                                 "lease_round_trip") if name in flows})
    join = flows.get("join_tokens")
    if join is not None:
        verdict = "[green]exactly once" if join["exactly_once"] and not join["tokens_left_waiting"] else "[red]NOT exactly once"
        console.print(f"join: {join['jobs']:,} jobs drained for {join['keys']:,} keys — {verdict}[/] "
                      f"(duplicates {join['duplicates']}, missing {join['missing']}, malformed {join['malformed']}, "
                      f"tokens left waiting {join['tokens_left_waiting']})")
    if flows.get("step_start_histogram"):
        console.print(_histogram_table(flows["step_start_histogram"]))
    if "overhead" in flows:
        console.print(numbers_table("the main job's flow vs one plain PySpark script, same data and session",
                                    _overhead_rows(flows["overhead"])))
        console.print(_steps_table(flows["overhead"]))
    elif "error" in flows:
        console.print(f"[yellow]Spark figures not measured: {flows['error']}")


def _spent(before: float | None, after: float | None) -> float | None:
    return round(after - before, 2) if before is not None and after is not None else None

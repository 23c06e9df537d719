"""`kittiwake bench tasks`: Kittiwake as a pull-based task scheduler, against CloudKon, Albatross and Spark.

One durable broker subprocess, `--workers` worker processes and one
submitter process (`task_processes`: CloudKon's task queue + response queue
design), spawned once and reused by every figure; each figure uses its own
task queue. The parent only coordinates, draws progress bars and reads the
broker's CPU time.

1. `null_tasks` (CloudKon Fig 29, Albatross Fig 54): `--tasks` null tasks
   submitted in bundles of `--bundle` as fast as the broker takes them; the
   rate is tasks / (first submit → last result back at the submitter). Its
   own `latency_ms` (submit → start) is mostly queueing, since the whole
   backlog is submitted at once; the scheduler's delay is figure 2.
2. `latency_ms` (CloudKon Figs 30–32, Albatross Fig 53): submit → start of
   null tasks submitted one per request at `--latency-rate` per second (open
   loop) to workers parked in long-poll leases: the scheduler's own delay,
   durable commit included. Start is the worker's clock as it calls the task.
3. `efficiency` (CloudKon Fig 33): sleep 1, 16 and 128 ms tasks, enough for
   `--busy-secs` of work per worker; efficiency = ideal time (total task time
   / workers) ÷ makespan (first submit → last result). `busy_efficiency` is
   the same with the time the workers measured inside the tasks, so a sleep
   that overslept (the OS timer) is told apart from scheduling overhead.
4. `efficiency.mixed` (CloudKon Fig 34): tasks of 1 ms–1 s (log-uniform,
   seeded), `--mixed-busy-secs` of work per worker, submitted in random order.
5. `spark` (`spark_peer`): the same null tasks on PySpark `local[2]`, and
   `ratio_vs_spark` = Kittiwake's null-task rate ÷ Spark's.

Targets (this 2-core machine, durable broker, two workers): ≥ 20,000 null
tasks/s; submit → start p50 ≤ 1 ms, p99 ≤ 5 ms, max ≤ 60 ms; efficiency
≥ 95% at 16 ms and ≥ 99% at 128 ms; ≥ 100× PySpark. They are printed as met
or not, never asserted.
"""

from __future__ import annotations

import math
import os
import random
import shutil
import tempfile
import time
from array import array
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from rich.console import Console

from kittiwake.bench import references
from kittiwake.bench.harness import BrokerProcess, Measured, latency_summary_ms
from kittiwake.bench.processes import ProcessPool
from kittiwake.bench.jobs import LoadResult
from kittiwake.bench.report import (
    check_target,
    describe_target,
    machine_info,
    numbers_table,
    progress_bars,
    show_figures,
)
from kittiwake_benchmarks.settings import TASKS_GROUP, TasksSettings
from kittiwake_benchmarks.spark_peer import SparkRun, run_spark
from kittiwake_benchmarks.task_processes import STOP, SubmitJob, SubmitReport, WorkerJob, WorkerReport, serve

EFFICIENCY_TASK_MS = (1, 16, 128)
MIXED_MIN_MS = 1.0
MIXED_MAX_MS = 1000.0
WORKERS_READY_SECS = 0.3  # after starting the workers, before the first submit
POLL_SECS = 0.05


# ------------------------------------------------------------------- phases


@dataclass
class Phase:
    """One figure's run: the submitter's report, the workers' and the broker's CPU."""

    submitted: SubmitReport
    workers: list[WorkerReport]
    broker_cpu_secs: float
    wall_secs: float
    durations_us: array | None = None
    sleep_us: int = 0
    extras: dict[str, Any] = field(default_factory=dict)

    @property
    def total_task_secs(self) -> float:
        if self.durations_us is not None:
            return sum(self.durations_us) / 1e6
        return self.sleep_us * self.submitted.tasks / 1e6

    def cpu_percent(self) -> dict[str, float]:
        wall = self.wall_secs or 1.0
        return {
            "broker_cpu_percent": round(100.0 * self.broker_cpu_secs / wall, 1),
            "workers_cpu_percent": round(100.0 * sum(w.cpu_secs for w in self.workers) / wall, 1),
            "submitter_cpu_percent": round(100.0 * self.submitted.cpu_secs / wall, 1),
        }


class TaskBench:
    """A broker, the worker and submitter processes, and one method per kind of figure."""

    def __init__(self, settings: TasksSettings, broker: BrokerProcess, pool: ProcessPool) -> None:
        self.settings = settings
        self.broker = broker
        self.pool = pool
        self.url = f"kw://{broker.host}:{broker.port}"
        self.submitter = settings.workers  # the pool's last member

    def run(self, name: str, *, tasks: int, progress: Callable[[float, int], None], sleep_us: int = 0,
            durations_us: array | None = None, rate_per_sec: float | None = None) -> Phase:
        settings = self.settings
        queue = f"{TASKS_GROUP}#tasks.{name}"
        for index in range(settings.workers):
            self.pool.start(index, WorkerJob(self.url, queue, f"bench-worker-{index}", settings.results,
                                             settings.max_batch))
        time.sleep(WORKERS_READY_SECS)  # connected and parked in a long-poll lease
        job = SubmitJob(self.url, queue, f"{TASKS_GROUP}#reply.{name}", tasks, settings.bundle, sleep_us,
                        durations_us, rate_per_sec)
        cpu_before = self.broker.cpu_secs()
        wall_before = time.monotonic()
        self.pool.start(self.submitter, job)
        try:
            while not self.pool.done(self.submitter, POLL_SECS):
                done = self.pool.count(self.submitter)
                progress(done / tasks, done)
                for index in range(settings.workers):
                    if self.pool.done(index):  # a worker ended mid-figure: only a failure does that
                        self.pool.result(index)
                        raise RuntimeError(f"worker {index} stopped before the figure ended")
            submitted: SubmitReport = self.pool.result(self.submitter)
        finally:
            wall = time.monotonic() - wall_before
            broker_cpu = self.broker.cpu_secs() - cpu_before
            for index in range(settings.workers):
                self.pool.send(index, STOP)
        workers = [self.pool.result(index) for index in range(settings.workers)]
        progress(1.0, submitted.results)
        return Phase(submitted, workers, broker_cpu, wall, durations_us, sleep_us)


def mixed_durations_us(busy_secs: float, workers: int, seed: int) -> array:
    """Log-uniform task times of 1 ms–1 s (CloudKon Fig 34's range), until workers × busy_secs of work."""
    rng = random.Random(seed)
    durations = array("q")
    total = 0.0
    low, high = math.log(MIXED_MIN_MS), math.log(MIXED_MAX_MS)
    while total < busy_secs * workers:
        milliseconds = math.exp(rng.uniform(low, high))
        durations.append(int(milliseconds * 1000))
        total += milliseconds / 1000
    return durations


def homogeneous_count(task_ms: int, busy_secs: float, workers: int) -> int:
    """Tasks of `task_ms` for `busy_secs` of work on each worker (a multiple of workers)."""
    return workers * max(1, math.ceil(busy_secs * 1000 / task_ms))


# ------------------------------------------------------------------ records


def _efficiency_record(phase: Phase, workers: int, task_ms: int | None) -> dict[str, Any]:
    submitted = phase.submitted
    ideal = phase.total_task_secs / workers
    makespan = submitted.seconds
    busy = submitted.run_ns / 1e9 / workers
    record: dict[str, Any] = {
        "tasks": submitted.tasks,
        "task_ms": task_ms,
        "ideal_s": round(ideal, 4),
        "makespan_s": round(makespan, 4),
        "efficiency": round(ideal / makespan, 4) if makespan > 0 else None,
        "busy_efficiency": round(busy / makespan, 4) if makespan > 0 else None,
        "task_overshoot_ms_mean": round((busy * workers - phase.total_task_secs) * 1000 / max(1, submitted.tasks), 4),
        **phase.cpu_percent(),
        **_worker_timeline(phase),
    }
    key = f"{task_ms}ms" if task_ms is not None else "mixed"
    target = references.TARGET_EFFICIENCY.get(key)
    record["target"] = {"efficiency_min": target} if target else None
    record["meets_target"] = check_target(record)
    reference = references.CLOUDKON_EFFICIENCY.get(key)
    record["reference"] = {"source": references.CLOUDKON, "efficiency": reference} if reference else None
    return record


def _worker_timeline(phase: Phase) -> dict[str, Any]:
    """Where the makespan went, per worker: before its first task, starved between batches, after its last."""
    submitted = phase.submitted
    return {
        "workers": [
            {
                "tasks": worker.tasks,
                "batches": worker.batches,
                "in_tasks_s": round(worker.busy_secs, 4),
                "before_first_task_ms": round((worker.first_start_ns - submitted.first_submit_ns) / 1e6, 3),
                "starved_ms": round(worker.starved_secs * 1000, 3),
                "after_last_task_ms": round((submitted.last_result_ns - worker.last_end_ns) / 1e6, 3),
            }
            for worker in phase.workers
        ]
    }


def _measured(latencies_ns: array, tasks: int, seconds: float) -> Measured:
    result = LoadResult(tasks=tasks, ops=len(latencies_ns), latencies_ns=latencies_ns)
    return Measured(result, seconds)


def _null_record(phase: Phase) -> dict[str, Any]:
    submitted = phase.submitted
    rate = submitted.results / submitted.seconds if submitted.seconds > 0 else 0.0
    record: dict[str, Any] = {
        "tasks_per_s": round(rate, 1),
        "latency_ms": latency_summary_ms(submitted.latencies_ns),  # queueing: see latency_ms_under_load
        "samples": len(submitted.latencies_ns),
        "errors": 0,
        "tasks": submitted.results,
        "seconds": round(submitted.seconds, 4),
        "submit_seconds": round((submitted.last_submit_ns - submitted.first_submit_ns) / 1e9, 4),
        "ratio": references.rate_ratio(rate, references.ALBATROSS_NULL_TASKS_PER_SEC),
        "reference": {"source": references.ALBATROSS, "tasks_per_s": references.ALBATROSS_NULL_TASKS_PER_SEC},
        "target": {"tasks_per_s_min": references.TARGET_NULL_TASKS_PER_SEC},
        "batches": sum(w.batches for w in phase.workers),
        "largest_batch": max((w.largest_batch for w in phase.workers), default=0),
        **phase.cpu_percent(),
    }
    record["meets_target"] = check_target(record)
    record["load_cpu_percent"] = round(record["workers_cpu_percent"] + record["submitter_cpu_percent"], 1)
    return record


def _latency_record(phase: Phase, rate_per_sec: float) -> dict[str, Any]:
    submitted = phase.submitted
    latency = latency_summary_ms(submitted.latencies_ns)
    record: dict[str, Any] = {
        "tasks_per_s": None,
        "latency_ms": latency,
        "samples": len(submitted.latencies_ns),
        "errors": 0,
        "rate_per_s": rate_per_sec,
        "ratio": references.latency_ratio(references.ALBATROSS_LATENCY_MS["p50"], latency["p50"] if latency else None),
        "reference": {"source": references.ALBATROSS, "latency_ms": references.ALBATROSS_LATENCY_MS},
        "target": {f"latency_ms_{key}_max": bound for key, bound in references.TARGET_TASK_LATENCY_MS.items()},
        **phase.cpu_percent(),
    }
    record["meets_target"] = check_target(record)
    record["load_cpu_percent"] = round(record["workers_cpu_percent"] + record["submitter_cpu_percent"], 1)
    return record


def _targets(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Every target of the issue: what it asks, what was measured, met or not (None: not measured)."""
    null = report["null_tasks"]
    latency = report["latency"]
    runs = report["efficiency_runs"]
    ratio = report["ratio_vs_spark"]
    targets = {
        "null_tasks_per_s": {"target": describe_target(null["target"]), "value": null["tasks_per_s"],
                             "met": null["meets_target"]},
        "latency_ms": {"target": describe_target(latency["target"]), "value": latency["latency_ms"],
                       "met": latency["meets_target"]},
    }
    for key in ("16ms", "128ms"):
        run = runs.get(key)
        targets[f"efficiency_{key}"] = {"target": f"≥ {references.TARGET_EFFICIENCY[key]:.0%}",
                                        "value": run["efficiency"] if run else None,
                                        "met": run["meets_target"] if run else None}
    targets["ratio_vs_spark"] = {"target": f"≥ {references.TARGET_RATIO_VS_SPARK:.0f}×", "value": ratio,
                                 "met": None if ratio is None else ratio >= references.TARGET_RATIO_VS_SPARK}
    return targets


# --------------------------------------------------------------------- run


def run_tasks(settings: TasksSettings, console: Console, *, parent_dir: str | None = None,
              spark_session: Any = None) -> tuple[dict[str, Any], dict[str, Measured]]:
    """Run every figure; returns the JSON report and the latency samples (for the CDF plot)."""
    workers = settings.workers
    phases: dict[str, Phase] = {}
    load_before = os.getloadavg()
    root = Path(tempfile.mkdtemp(prefix="kittiwake-bench-", dir=parent_dir))
    broker = BrokerProcess(root / "data", root / "broker.log", settings.durability)
    pool: ProcessPool | None = None
    try:
        with progress_bars(console) as bar:
            pool = ProcessPool(workers + 1, serve)
            broker_startup_s = broker.start()
            bench = TaskBench(settings, broker, pool)
            phases["null"] = bench.run("null", tasks=settings.tasks,
                                       progress=bar(f"null tasks ×{settings.tasks:,}"))
            phases["latency"] = bench.run("latency", tasks=settings.latency_tasks,
                                          rate_per_sec=settings.latency_rate_per_sec,
                                          progress=bar(f"submit → start at {settings.latency_rate_per_sec:,.0f}/s"))
            for task_ms in EFFICIENCY_TASK_MS:
                count = homogeneous_count(task_ms, settings.busy_secs, workers)
                phases[f"{task_ms}ms"] = bench.run(f"sleep-{task_ms}ms", tasks=count, sleep_us=task_ms * 1000,
                                                   progress=bar(f"sleep {task_ms} ms ×{count:,}"))
            durations = mixed_durations_us(settings.mixed_busy_secs, workers, settings.mixed_seed)
            phases["mixed"] = bench.run("mixed", tasks=len(durations), durations_us=durations,
                                        progress=bar(f"mixed 1 ms–1 s ×{len(durations):,}"))
            broker_rss_mb = broker.peak_rss_mb()
            load_after = os.getloadavg()  # before Spark, which loads both cores itself
        pool.close()
        pool = None
        broker.stop()
        spark = _run_spark(console, settings.spark_tasks, spark_session)
    finally:
        if pool is not None:
            pool.close()
        broker.stop()
        shutil.rmtree(root, ignore_errors=True)

    null = _null_record(phases["null"])
    latency = _latency_record(phases["latency"], settings.latency_rate_per_sec)
    runs = {key: _efficiency_record(phases[key], workers, int(key[:-2]) if key != "mixed" else None)
            for key in (*(f"{ms}ms" for ms in EFFICIENCY_TASK_MS), "mixed")}
    spark_record = spark.as_dict()
    spark_record["reference"] = {"source": references.ALBATROSS,
                                 "tasks_per_s": references.ALBATROSS_SPARK_TASKS_PER_SEC}
    ratio = round(null["tasks_per_s"] / spark.tasks_per_sec, 1) if spark.tasks_per_sec and null["tasks_per_s"] else None
    report: dict[str, Any] = {
        "machine": machine_info(),
        "settings": {**asdict(settings), "broker_startup_s": round(broker_startup_s, 3),
                     "broker_peak_rss_mb": broker_rss_mb},
        # other processes on the machine take cores from the broker and workers: 1, 5, 15 min load
        # averages before the Kittiwake figures and after them (before Spark)
        "load_average": {"before": [round(value, 2) for value in load_before],
                         "after": [round(value, 2) for value in load_after]},
        "null_tasks": null,
        "latency_ms": latency["latency_ms"],
        "latency": latency,
        "efficiency": {key: run["efficiency"] for key, run in runs.items()},
        "efficiency_runs": runs,
        "spark": spark_record,
        "ratio_vs_spark": ratio,
    }
    report["targets"] = _targets(report)
    measured = {
        f"submit → start at {settings.latency_rate_per_sec:,.0f}/s": _measured(
            phases["latency"].submitted.latencies_ns, settings.latency_tasks, phases["latency"].submitted.seconds),
        "submit → start, null-task backlog": _measured(
            phases["null"].submitted.latencies_ns, settings.tasks, phases["null"].submitted.seconds),
    }
    return report, measured


def _run_spark(console: Console, tasks: int, session: Any) -> SparkRun:
    if tasks <= 0:
        return SparkRun(tasks=0, error="skipped (--spark-tasks 0)")
    with console.status(f"PySpark local[2]: {tasks:,} null tasks (starts a JVM; Spark runs them slowly)"):
        return run_spark(tasks, session)


# -------------------------------------------------------------------- show


def _percent(value: float | None) -> str:
    return "—" if value is None else f"{100 * value:.1f}%"


def show(console: Console, report: dict[str, Any]) -> None:
    workers = report["settings"]["workers"]
    show_figures(console, f"kittiwake bench tasks — {workers} workers, {report['settings']['durability']}, "
                          f"×ref = vs Albatross (64 nodes)",
                 {"null_tasks": report["null_tasks"], "submit_to_start": report["latency"]})
    rows: list[tuple[str, str, str, bool | None]] = []
    for key, run in report["efficiency_runs"].items():
        label = f"efficiency, sleep {key}" if key != "mixed" else "efficiency, mixed 1 ms–1 s"
        reference = run["reference"]
        value = (f"{_percent(run['efficiency'])} ({run['tasks']:,} tasks, makespan {run['makespan_s']:.2f} s, "
                 f"in tasks {_percent(run['busy_efficiency'])})")
        if reference:
            value += f"; CloudKon {_percent(reference['efficiency'])}"
        target = f"≥ {_percent(run['target']['efficiency_min'])}" if run["target"] else ""
        rows.append((label, value, target, run["meets_target"]))
    spark = report["spark"]
    if spark.get("tasks_per_s"):
        spark_value = (f"{spark['tasks_per_s']:,.1f} tasks/s ({spark['tasks']:,} tasks in {spark['seconds']:.1f} s; "
                       f"start-up {spark['startup_s']:.1f} s + warm-up {spark['warmup_s']:.1f} s, {spark['master']}, "
                       f"Spark {spark['version']})")
    else:
        spark_value = f"not measured: {spark.get('error')}"
    rows.append(("PySpark null tasks", spark_value, "", None))
    ratio = report["ratio_vs_spark"]
    rows.append(("Kittiwake ÷ PySpark", "—" if ratio is None else f"{ratio:,.0f}×",
                 report["targets"]["ratio_vs_spark"]["target"], report["targets"]["ratio_vs_spark"]["met"]))
    console.print(numbers_table("efficiency (CloudKon Figs 33–34) and the Spark peer", rows))
    null = report["null_tasks"]
    console.print(f"[dim]null tasks: {null['tasks']:,} in {null['seconds']:.2f} s ({null['batches']:,} batches, "
                  f"largest {null['largest_batch']}); CPU over the figure: broker {null['broker_cpu_percent']:.0f}%, "
                  f"workers {null['workers_cpu_percent']:.0f}%, submitter {null['submitter_cpu_percent']:.0f}% "
                  f"of one core. Its latency columns are queueing behind the backlog; "
                  f"submit_to_start is the paced figure. Load average before and after Kittiwake's figures: "
                  f"{report['load_average']['before'][0]:.2f}, {report['load_average']['after'][0]:.2f} "
                  f"(other processes on this machine)")

"""`kittiwake bench workers`: what a user of `@app.task` and `kittiwake worker` gets, default flags.

Every figure runs on a fresh durable broker (`kittiwake broker`, fsync, on a
throwaway directory), with the bench's app (`kittiwake.bench.user_app`) served by `kittiwake
worker kittiwake.bench.user_app:app --processes P` as a real
subprocess (`kittiwake.bench.worker_group`), default flags otherwise — `--concurrency
C` in the figures that ask for slots, and `--worker-arg` options for A/B
runs. The workers run before the first submit: the bench waits until every
process holds its record in the worker registry, then a moment more. The
submitter is a process of its own (`kittiwake.bench.map_submitter`) that calls `app.map` once;
every task appends its record to the tally (`kittiwake.bench.tally`), which this
process reads.

1. `map_drain`: `--tasks` null tasks (1 KB payload, `ignore_result=True`)
   through `app.map(f, items, chunk=1000)` to P processes of one slot;
   tasks ÷ (first submit → last task's end).
2. `map_results`: the same with results kept, collected by the submitter
   with `app.results(handles)`; the end is the last result collected.
3. `efficiency`: `--rounds` × slots tasks sleeping `--sleep-secs` on P × C
   slots; efficiency = run time ÷ (slots × (first start → last end)).
4. `mix`: `--mix-short` tasks of `short_secs` and `mix_long_per_slot` ×
   slots of `--sleep-secs`, shuffled, one `app.map`; its efficiency and its
   longest idle-while-waiting (`slots`): a slot idle while a submitted task
   had not started.

References, measured or computed in the same run: for 1–2 the lean ceiling
— the raw client's `enqueue_many` in bundles of the same chunk and `bench
tasks`' lean workers on P processes (`tasks.TaskBench`: batch leases, one
result message per batch); for 3–4 the ideal makespan, the tasks' nominal
work ÷ slots (at least the longest task), against first submit → last end.
`ratio` is Kittiwake's figure ÷ the lean one, or ideal ÷ measured: above 1
is better. Targets are printed as met or not, never asserted.

The report (`report`'s JSON style): `{"machine", "settings",
"load_average", "lean_ceiling", "workers": {figure: record}}`, each record
with the usual `tasks_per_s`, `latency_ms` (None), `samples`, `errors`,
`ratio`, `reference`, `target`, `meets_target`, plus `status` (`ok`,
`failed`) and `reason`, and the figure's own numbers. A figure that fails
(a worker command exits, the drain stalls) ends its row only. Every process
started is stopped, however the run ends.
"""

from __future__ import annotations

import os
import random
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

from kittiwake.bench import references
from kittiwake.bench.harness import BrokerProcess
from kittiwake.bench import tally
from kittiwake.bench.tally import make_payload
from kittiwake.bench.tally import TaskRun
from kittiwake.bench.worker_group import WorkerGroup
from kittiwake.bench.processes import ProcessPool, process_cpu_secs
from kittiwake.bench.report import check_target, machine_info, progress_bars
from kittiwake.bench.settings import WORKERS_QUEUE
from kittiwake_benchmarks.settings import WORKERS_FIGURES, TasksSettings, WorkersSettings
from kittiwake_benchmarks.workers import slots
from kittiwake.bench.map_submitter import APP_MODULE, CLOSE, Map, Mapped, Open, serve
from kittiwake.errors import BadRequest

POLL_SECS = 0.05
READY_TIMEOUT_SECS = 60.0  # for every worker process to hold its registry record
READY_SETTLE_SECS = 0.3  # then: its leasers are parked in a long-poll
SETTLE_SECS = 5.0  # after the last task: its acknowledgement reaches the broker
LEAN_SOURCE = ("raw client enqueue_many in bundles of {chunk} + `bench tasks`' lean workers on {processes} processes "
               "(batch leases, one result message per batch), this run")
IDEAL_SOURCE = "ideal: the tasks' nominal work ÷ slots (at least the longest task), against first submit → last end"

Bar = Callable[[str], Callable[[float, int], None]]


class FigureFailed(Exception):
    """A figure could not finish; its row says why and the run goes on."""


@dataclass
class Timeline:
    """What the chart draws of a slot figure: every run, the chunks' answers, the first submit."""

    runs: list[TaskRun]
    acknowledged: list[tuple[float, int]]
    submitted_at: float
    slots: int
    long_secs: float


@dataclass
class Outcome:
    """One figure's raw results."""

    mapped: Mapped
    runs: list[TaskRun]
    slots: int
    left_in_queue: int | None
    broker_cpu_percent: float | None
    workers_cpu_percent: float | None
    worker_command: str
    extras: dict[str, Any] = field(default_factory=dict)


# ------------------------------------------------------------------ commands


def worker_command(python: str, settings: WorkersSettings, concurrency: int | None) -> list[str]:
    """`kittiwake worker` as a user starts it: P processes, C slots when the figure asks, else defaults."""
    command = [python, "-m", "kittiwake", "worker", f"{APP_MODULE}:app", "--processes", str(settings.processes)]
    if concurrency is not None:
        command += ["--concurrency", str(concurrency)]
    return command + list(settings.worker_args)


def _shown(command: list[str]) -> str:
    return " ".join(["kittiwake", *command[3:]])


def mix_seconds(settings: WorkersSettings, slot_count: int) -> list[float]:
    """The mix: short and long tasks, shuffled with the settings' seed."""
    long_tasks = settings.mix_long_per_slot * slot_count
    seconds = [settings.short_secs] * settings.mix_short + [settings.sleep_secs] * long_tasks
    random.Random(settings.mix_seed).shuffle(seconds)
    return seconds


# ------------------------------------------------------------------ one figure


class FigureRun:
    """One figure: its broker, its workers, its submitter process, and the tally."""

    def __init__(self, name: str, settings: WorkersSettings, root: Path, concurrency: int | None) -> None:
        self.settings = settings
        self.directory = root / name
        self.directory.mkdir(parents=True, exist_ok=True)
        self.tally_path = self.directory / "tally.bin"
        self.command = worker_command(sys.executable, settings, concurrency)
        self.slots = settings.processes * (concurrency or 1)
        self.broker = BrokerProcess(self.directory / "data", self.directory / "broker.log", settings.durability)
        self.workers: WorkerGroup | None = None
        self.pool: ProcessPool | None = None
        self.client: Any = None
        self.worker_pids: list[int] = []
        self.busy = False  # the submitter process runs a job whose answer was not read

    def _watch(self) -> None:
        failure = self.workers.failed() if self.workers is not None else None
        if failure:
            raise FigureFailed(failure)

    def _start(self, job: Any) -> None:
        assert self.pool is not None
        self.pool.start(0, job)
        self.busy = True

    def _call(self, job: Any) -> Any:
        self._start(job)
        assert self.pool is not None
        while not self.pool.done(0, POLL_SECS):
            self._watch()
        return self._result()

    def _result(self) -> Any:
        assert self.pool is not None
        self.busy = False
        try:
            return self.pool.result(0)
        except RuntimeError as exc:
            raise FigureFailed(str(exc).strip().splitlines()[-1]) from exc

    def _wait_ready(self) -> None:
        from kittiwake.worker.registry import live_workers

        deadline = time.monotonic() + READY_TIMEOUT_SECS
        while True:
            self._watch()
            live = live_workers(self.client)
            if len(live) >= self.settings.processes:
                self.worker_pids = [int(record.info["pid"]) for record in live if record.info.get("pid")]
                break
            if time.monotonic() > deadline:
                raise FigureFailed(f"{len(live)} of {self.settings.processes} worker processes registered within "
                                   f"{READY_TIMEOUT_SECS:.0f}s{self.workers.log_tail() if self.workers else ''}")
            time.sleep(POLL_SECS)
        time.sleep(READY_SETTLE_SECS)

    def _workers_cpu_secs(self) -> float | None:
        values = [process_cpu_secs(pid) for pid in self.worker_pids]
        return sum(value for value in values if value is not None) if values else None

    def run(self, job: Map, expected: int, progress: Callable[[float, int], None]) -> Outcome:
        from kittiwake.client import Client

        self.broker.start()
        url = f"kw://{self.broker.host}:{self.broker.port}"
        env = {"KITTIWAKE_URL": url, tally.TALLY_ENV: str(self.tally_path)}
        self.client = Client(url)
        self.workers = WorkerGroup([self.command], {**os.environ, **env}, self.directory / "workers.log")
        self.workers.start()
        self.pool = ProcessPool(1, serve)
        self._call(Open(env))
        self._wait_ready()

        broker_cpu, workers_cpu, wall = self.broker.cpu_secs(), self._workers_cpu_secs(), time.monotonic()
        self._start(job)
        last_count, last_change = -1, time.monotonic()
        mapped: Mapped | None = None
        while True:
            done = tally.count(self.tally_path)
            progress(min(1.0, done / max(1, expected)), done)
            if mapped is None and self.pool.done(0):
                mapped = self._result()
            if done >= expected and mapped is not None:
                break
            now = time.monotonic()
            if done != last_count:
                last_count, last_change = done, now
            elif done < expected and now - last_change > self.settings.stall_secs:  # results: app.results' timeout
                raise FigureFailed(f"stalled: {done:,} of {expected:,} tasks done, none in the last "
                                   f"{self.settings.stall_secs:.0f}s{self.workers.log_tail()}")
            self._watch()
            time.sleep(POLL_SECS)
        wall = time.monotonic() - wall
        broker_cpu = self.broker.cpu_secs() - broker_cpu
        after = self._workers_cpu_secs()
        runs = tally.records(self.tally_path)
        return Outcome(
            mapped, runs, self.slots, self._left_in_queue(),
            round(100.0 * broker_cpu / wall, 1) if wall > 0 else None,
            round(100.0 * (after - workers_cpu) / wall, 1) if wall > 0 and after is not None and workers_cpu is not None
            else None,
            _shown(self.command),
        )

    def _left_in_queue(self) -> int | None:
        deadline = time.monotonic() + SETTLE_SECS
        while True:
            left = sum(info.size for info in self.client.list_queues(pattern=f"^{WORKERS_QUEUE.replace('.', '[.]')}$"))
            if not left or time.monotonic() > deadline:
                return left
            time.sleep(POLL_SECS)

    def release(self) -> str | None:
        """Stop everything this figure started, each step whatever the others did; what went wrong."""
        problems = []
        steps: list[Callable[[], object]] = []
        if self.workers is not None:
            steps.append(self.workers.stop)
        if self.pool is not None:
            pool = self.pool
            if not self.busy:  # closes the app (its reply queues); a process still busy is ended as it stands

                def close_app() -> None:
                    pool.start(0, CLOSE)
                    pool.done(0, 10.0)

                steps.append(close_app)
            steps.append(pool.close)
        if self.client is not None:
            steps.append(self.client.close)
        steps.append(self.broker.stop)
        for step in steps:
            try:
                step()
            except Exception as exc:
                problems.append(f"{type(exc).__name__}: {exc}")
        self.workers = self.pool = self.client = None
        return "; ".join(problems) or None


# ------------------------------------------------------------------ records


def _blank_record(name: str, label: str) -> dict[str, Any]:
    return {"figure": name, "label": label, "status": "ok", "reason": None, "tasks_per_s": None, "latency_ms": None,
            "samples": 0, "errors": 0, "ratio": None, "reference": None, "target": None, "meets_target": None}


def _common(outcome: Outcome) -> dict[str, Any]:
    mapped = outcome.mapped
    return {
        "tasks": mapped.tasks,
        "done": len(outcome.runs),
        "slots": outcome.slots,
        "slots_seen": len(slots.by_slot(outcome.runs)),
        "worker_command": outcome.worker_command,
        "submit_s": round(mapped.returned_at - mapped.submitted_at, 4),
        "submit_tasks_per_s": round(mapped.tasks / (mapped.returned_at - mapped.submitted_at), 1)
        if mapped.returned_at > mapped.submitted_at else None,
        "first_start_after_submit_ms": round((min(run.started for run in outcome.runs) - mapped.submitted_at) * 1000, 3)
        if outcome.runs else None,
        "left_in_queue": outcome.left_in_queue,
        "broker_cpu_percent": outcome.broker_cpu_percent,
        "workers_cpu_percent": outcome.workers_cpu_percent,
    }


def drain_record(record: dict[str, Any], outcome: Outcome, keep_results: bool, lean: float | None) -> None:
    mapped = outcome.mapped
    last_end = max(run.ended for run in outcome.runs)
    end = mapped.collected_at if keep_results and mapped.collected_at is not None else last_end
    seconds = end - mapped.submitted_at
    rate = len(outcome.runs) / seconds if seconds > 0 else None
    target = (references.TARGET_WORKERS_MAP_RESULTS_TASKS_PER_SEC if keep_results
              else references.TARGET_WORKERS_MAP_TASKS_PER_SEC)
    record.update(_common(outcome))
    record.update(
        seconds=round(seconds, 4),
        tasks_per_s=round(rate, 1) if rate else None,
        after_submit_s=round(end - mapped.returned_at, 4),
        results=mapped.results if keep_results else None,
        reference={"source": "lean ceiling", "tasks_per_s": lean} if lean else None,
        ratio=references.rate_ratio(rate, lean),
        target={"tasks_per_s_min": target},
    )
    record["meets_target"] = check_target(record)


def slot_record(record: dict[str, Any], outcome: Outcome, nominal_secs: list[float], with_idle_target: bool) -> None:
    mapped, runs, slot_count = outcome.mapped, outcome.runs, outcome.slots
    first_start = min(run.started for run in runs)
    last_end = max(run.ended for run in runs)
    ideal = max(sum(nominal_secs) / slot_count, max(nominal_secs))
    from_submit = last_end - mapped.submitted_at
    limit_ms = references.TARGET_WORKERS_IDLE_WHILE_WAITING_MS
    idle = slots.idle_while_waiting(runs, mapped.acknowledged, slot_count, limit_ms / 1000)
    busy = slots.busy_secs(runs)
    efficiency = slots.efficiency(runs, slot_count)
    record.update(_common(outcome))
    record.update(
        efficiency=round(efficiency, 4) if efficiency is not None else None,
        task_secs=round(busy, 4),
        nominal_task_secs=round(sum(nominal_secs), 4),
        makespan_s=round(last_end - first_start, 4),
        from_submit_s=round(from_submit, 4),
        ideal_s=round(ideal, 4),
        idle_while_waiting_ms=round(idle.longest_secs * 1000, 3),
        idle_while_waiting_slot=idle.longest_slot,
        idle_while_waiting_from_s=round(idle.longest_from_secs, 4) if idle.longest_from_secs is not None else None,
        idle_while_waiting_total_s=round(idle.total_secs, 4),
        idle_while_waiting_over_limit=idle.stretches_over_limit,
        reference={"source": IDEAL_SOURCE, "makespan_s": round(ideal, 4)},
        ratio=round(ideal / from_submit, 4) if from_submit > 0 else None,
    )
    target: dict[str, float] = {}
    if not with_idle_target:
        target["efficiency_min"] = references.TARGET_WORKERS_EFFICIENCY
    else:
        target["idle_while_waiting_ms_max"] = limit_ms
    record["target"] = target
    record["meets_target"] = check_target(record)


# ------------------------------------------------------------------ the run


def figure_label(name: str, settings: WorkersSettings) -> str:
    if name == "map_drain":
        return "map drain"
    if name == "map_results":
        return "map drain, results kept"
    if name == "efficiency":
        return f"efficiency {settings.sleep_secs:g} s"
    return f"mix {settings.short_secs * 1000:g} ms / {settings.sleep_secs:g} s"


def check_settings(settings: WorkersSettings) -> None:
    """Raise BadRequest for settings no run can use."""
    unknown = [name for name in settings.only if name not in WORKERS_FIGURES]
    if unknown:
        raise BadRequest(f"unknown figures: {', '.join(unknown)}; choose from {', '.join(WORKERS_FIGURES)}")
    if min(settings.tasks, settings.processes, settings.concurrency, settings.rounds, settings.chunk,
           settings.mix_long_per_slot) < 1 or settings.mix_short < 0:
        raise BadRequest("tasks, processes, concurrency, rounds, chunk and long tasks per slot must be at least 1, "
                         "short tasks at least 0")
    if settings.sleep_secs <= 0 or settings.short_secs <= 0 or settings.stall_secs <= 0:
        raise BadRequest("task and stall times must be above 0 s")


def _exit_on_signal(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)


def _lean_ceiling(settings: WorkersSettings, root: Path, bar: Bar) -> dict[str, Any]:
    """`bench tasks`' null-task figure on a fresh broker: raw enqueue_many bundles, lean workers."""
    from kittiwake_benchmarks.task_processes import serve as lean_serve
    from kittiwake_benchmarks.tasks import TaskBench

    directory = root / "lean"
    directory.mkdir(parents=True, exist_ok=True)
    lean_settings = TasksSettings(tasks=settings.tasks, workers=settings.processes, bundle=settings.chunk,
                                  durability=settings.durability)
    broker = BrokerProcess(directory / "data", directory / "broker.log", settings.durability)
    pool: ProcessPool | None = None
    try:
        pool = ProcessPool(settings.processes + 1, lean_serve)
        broker.start()
        phase = TaskBench(lean_settings, broker, pool).run(
            "null", tasks=settings.tasks, progress=bar(f"lean ceiling ×{settings.tasks:,}"))
    finally:
        if pool is not None:
            pool.close()
        broker.stop()
    submitted = phase.submitted
    rate = submitted.results / submitted.seconds if submitted.seconds > 0 else None
    return {"source": LEAN_SOURCE.format(chunk=settings.chunk, processes=settings.processes),
            "tasks": submitted.results, "seconds": round(submitted.seconds, 4),
            "tasks_per_s": round(rate, 1) if rate else None, **phase.cpu_percent()}


def run_workers(settings: WorkersSettings, console: Console, *,
                parent_dir: str | None = None) -> tuple[dict[str, Any], dict[str, Timeline]]:
    """Every figure of the settings, each on a fresh broker; the JSON report and the slot timelines."""
    check_settings(settings)
    chosen = [name for name in WORKERS_FIGURES if not settings.only or name in settings.only]
    payload = make_payload()
    load_before = os.getloadavg()
    root = Path(tempfile.mkdtemp(prefix="kittiwake-bench-", dir=parent_dir))
    records: dict[str, dict[str, Any]] = {}
    timelines: dict[str, Timeline] = {}
    lean: dict[str, Any] | None = None
    previous_sigterm = None
    if threading.current_thread() is threading.main_thread():
        previous_sigterm = signal.signal(signal.SIGTERM, _exit_on_signal)  # a SIGTERM cleans up like Ctrl-C
    try:
        with progress_bars(console) as bar:
            if {"map_drain", "map_results"} & set(chosen):
                try:
                    lean = _lean_ceiling(settings, root, bar)
                except Exception as exc:
                    lean = {"source": LEAN_SOURCE.format(chunk=settings.chunk, processes=settings.processes),
                            "tasks_per_s": None, "error": f"{type(exc).__name__}: {exc}"}
                    console.print(f"[red]lean ceiling: failed — {exc}")
            for name in chosen:
                records[name], timeline = _run_figure(name, settings, root, payload, bar, lean, console)
                if timeline is not None:
                    timelines[name] = timeline
    finally:
        shutil.rmtree(root, ignore_errors=True)
        if previous_sigterm is not None:
            signal.signal(signal.SIGTERM, previous_sigterm)
    report = {
        "machine": machine_info(),
        "settings": {**asdict(settings), "only": list(settings.only), "worker_args": list(settings.worker_args),
                     "payload_bytes": len(payload), "figures": chosen},
        # other processes on the machine take cores from the broker and the workers: 1, 5, 15 min load averages
        "load_average": {"before": [round(value, 2) for value in load_before],
                         "after": [round(value, 2) for value in os.getloadavg()]},
        "lean_ceiling": lean,
        "workers": records,
    }
    return report, timelines


def _run_figure(name: str, settings: WorkersSettings, root: Path, payload: str, bar: Bar,
                lean: dict[str, Any] | None, console: Console) -> tuple[dict[str, Any], Timeline | None]:
    label = figure_label(name, settings)
    record = _blank_record(name, label)
    drain = name in ("map_drain", "map_results")
    concurrency = None if drain else settings.concurrency
    run = FigureRun(name, settings, root, concurrency)
    timeline = None
    try:
        if drain:
            keep = name == "map_results"
            job = Map("null_kept" if keep else "null", settings.chunk, count=settings.tasks, payload=payload,
                      keep_results=keep)
            outcome = run.run(job, settings.tasks, bar(f"{label} ×{settings.tasks:,}"))
            drain_record(record, outcome, keep, (lean or {}).get("tasks_per_s"))
        else:
            seconds = ([settings.sleep_secs] * (settings.rounds * run.slots) if name == "efficiency"
                       else mix_seconds(settings, run.slots))
            job = Map("sleep", settings.chunk, seconds=seconds)
            outcome = run.run(job, len(seconds), bar(f"{label} ×{len(seconds):,}"))
            slot_record(record, outcome, seconds, with_idle_target=name == "mix")
            timeline = Timeline(outcome.runs, outcome.mapped.acknowledged, outcome.mapped.submitted_at, run.slots,
                                settings.sleep_secs)
    except Exception as exc:  # one figure failing (its workers, its broker, its submitter) ends its row only
        text = str(exc) if isinstance(exc, FigureFailed) else f"{type(exc).__name__}: {exc}"
        record.update(status="failed", reason=text, errors=1)
        console.print(f"[red]{label}: failed — {text.splitlines()[0] if text else ''}")
    finally:
        problem = run.release()
        if problem:
            console.print(f"[red]{label}: clean-up — {problem}")
    return record, timeline

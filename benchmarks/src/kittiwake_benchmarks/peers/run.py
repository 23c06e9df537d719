"""`kittiwake bench peers`: Kittiwake on the path its users take, beside Celery, RQ, Dramatiq, Huey and pgqueuer.

Every system runs the same null task (`tally.null_task`: a 1 KB payload in,
nothing out) through its own documented API and its own worker command, with
`--processes` worker processes (see `systems` for each command and every
setting that differs from the tool's defaults). One system at a time, each
on its own service: a fresh Kittiwake broker (durable, default flags) on a
throwaway directory; the claimed Redis database, emptied before and after;
pgqueuer's own schema. For each system, in this order:

`--kittiwake-store URL` runs Kittiwake's broker on that store instead (as
`bench ops --store`: it must hold no task, and a schema the run created is
dropped), e.g. PostgreSQL, so that Kittiwake and pgqueuer on one database
server compare in the same run.

1. single submit/s: `--submits` tasks one by one from one thread, with the
   workers paused: they were started on the empty queue, ran one task (booted,
   connected, warm) and were stopped (SIGSTOP to each command's group).
2. bulk submit/s: the rest of `--tasks` through the tool's bulk API, in
   calls of `PEERS_BULK_CHUNK` (no bulk API: "—", and they go one by one).
3. drain tasks/s: the workers are resumed (SIGCONT) on that backlog of
   `--tasks`; the rate is tasks ÷ (first task's start → last task's end),
   both read from the tally every task appends to — one clock, no polling
   in the figure. Beside it, what a user waiting on the queue sees:
   `resume_to_empty_per_s`, tasks ÷ (resume → the system first says its
   queue is empty, polled every `POLL_SECS`, and every task ran), with
   `resume_to_first_start_s` and `resume_to_last_end_s`; for Kittiwake,
   `broker_cpu_us_per_task`, the broker's CPU from the resume to the queue
   empty ÷ the tasks. The kept-results
   row ends when the submitter holds every result. Then the tasks left in
   the queue are counted (0 when all drained). A drain not finished within
   `max_drain_secs` is reported as partial, at the rate it reached; the
   rest of its backlog is purged through the tool's own call and the
   workers are started again.
4. submit → start on the now idle system: one warm-up task (not counted),
   then `--latency-samples` tasks one at a time, `latency_gap_secs` apart;
   p50 and p99. The workers stop.
5. threaded submit/s: `--threaded-submits` tasks one by one through the
   same single submit, from `PEERS_SUBMIT_THREADS` threads of the submitter
   at once, with no worker running (a system whose client cannot be shared
   between threads shows "—" and why); then the queue is purged.

The submitting side runs in a process of its own (`submitter`), so no
system's import-time set-up meets another's, and this process only
coordinates: it starts and stops brokers and workers, reads the tally and
draws progress bars. Every process it starts is stopped, and every database
emptied, however the run ends (an error, Ctrl-C, SIGTERM).

The report (`report`'s JSON style): `{"machine", "settings", "load_average",
"peers": {system: record}}`, where a record has the usual `tasks_per_s`
(the drain), `latency_ms` (submit → start), `samples`, `errors`, `ratio`
(Kittiwake's drain ÷ this system's: above 1, Kittiwake is ahead),
`reference`, `target`, `meets_target`, and `status` (`ok`, `partial`,
`skipped`, `failed`) with its `reason`, the service and its durability, the
worker command, the settings changed, and the phases' own records; and
`disk_commit`: the floor under a durable submit → start, measured in the same
run — 4 KiB written over a block of a synced file and fsynced, with the
latency samples' pause between two (`latency_ms`, `samples`).
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from contextlib import ExitStack
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable

from rich.console import Console

from kittiwake.bench.bench_store import bench_store
from kittiwake.bench.harness import BrokerProcess, latency_summary_ms
from kittiwake.bench.jobs import FsyncProbe
from kittiwake.bench.probes import run_fsync_probe
from kittiwake.bench import tally
from kittiwake_benchmarks.peers.services import PostgresSchema, RedisDatabase
from kittiwake_benchmarks.peers.submitter import (
    CLOSE,
    PURGE,
    WAITING,
    Collect,
    Collected,
    Open,
    Sample,
    Sampled,
    Submit,
    Submitted,
    serve,
)
from kittiwake_benchmarks.peers.systems import SYSTEMS, System
from kittiwake.bench.worker_group import WorkerGroup
from kittiwake.bench.processes import ProcessPool
from kittiwake.bench.report import machine_info, progress_bars
from kittiwake.bench.tally import make_payload
from kittiwake_benchmarks.settings import (
    KITTIWAKE_SYSTEM,
    PEERS_BULK_CHUNK,
    PEERS_REDIS_URL_ENV,
    PEERS_SUBMIT_THREADS,
    PeersSettings,
)
from kittiwake.errors import BadRequest
from kittiwake.store.location import parse_store_url

POLL_SECS = 0.05
EMPTY_WAIT_SECS = 30.0  # after the last task ran, for the system to say its queue is empty
WARMUP_TIMEOUT_SECS = 120.0  # workers started again after a partial drain boot before the warm-up task runs
SAMPLE_TIMEOUT_SECS = 30.0  # an idle system starts one task within this, or the figure fails
KITTIWAKE_SERVICE = "Kittiwake broker, --durability fsync (default): an ok reply means the task is on disk"

Bar = Callable[[str], Callable[[float, int], None]]


class PeerFailed(Exception):
    """A system could not finish a phase; the row says why and the run goes on."""


# ------------------------------------------------------------------ one call


def _call(pool: ProcessPool, job: Any, progress: Callable[[float, int], None] | None = None, expected: int = 1,
          watch: Callable[[], None] = lambda: None) -> Any:
    """Run one job in the submitter process, updating a bar from its counter."""
    pool.start(0, job)
    while not pool.done(0, POLL_SECS):
        if progress is not None:
            done = pool.count(0)
            progress(min(1.0, done / max(1, expected)), done)
        watch()
    try:
        result = pool.result(0)
    except RuntimeError as exc:
        raise PeerFailed(str(exc).strip().splitlines()[-1]) from exc
    if progress is not None:
        progress(1.0, expected)
    return result


# ------------------------------------------------------------------ one system


class SystemRun:
    """One row: its service, workers and submitter process, and the phases in order."""

    def __init__(self, system: System, settings: PeersSettings, root: Path, payload: str, bar: Bar,
                 redis: RedisDatabase, postgres: PostgresSchema) -> None:
        self.system = system
        self.settings = settings
        self.directory = root / system.name
        self.directory.mkdir(parents=True, exist_ok=True)
        self.tally_path = self.directory / "tally.bin"
        self.payload = payload
        self.bar = bar
        self.redis = redis
        self.postgres = postgres
        self.broker: BrokerProcess | None = None
        self.store = ExitStack()  # the Kittiwake broker's store when --kittiwake-store names one
        self.pool: ProcessPool | None = None
        self.workers: WorkerGroup | None = None
        self.env: dict[str, str] = {tally.TALLY_ENV: str(self.tally_path)}
        self.record = _blank_record(system, settings)
        self.tally_base = 0  # tally records before the backlog's: the warm-up task's

    # ------------------------------------------------------------ service

    def prepare(self) -> str | None:
        """Start or claim the service; None, or why the system is skipped."""
        system = self.system
        missing = system.missing()
        if missing:
            return missing
        if system.service == "kittiwake":
            url = self.settings.kittiwake_store
            service = KITTIWAKE_SERVICE
            if url is not None:
                service = f"{KITTIWAKE_SERVICE}; store {self.store.enter_context(bench_store(url)).describe()}"
                self.record["label"] = f"{self.system.label} ({parse_store_url(url).kind})"
            self.broker = BrokerProcess(self.directory / "data", self.directory / "broker.log", store_url=url)
            self.broker.start()
            self.env["KITTIWAKE_URL"] = f"kw://{self.broker.host}:{self.broker.port}"
            self.record.update(service=service, durable=True)
            return None
        if system.service == "redis":
            if not self.redis.claimed:
                problem = self.redis.problem or self.redis.claim()
                if problem:
                    return problem
            self.redis.empty()
            self.env[PEERS_REDIS_URL_ENV] = self.settings.redis_url
            service, durable = self.redis.describe()
            self.record.update(service=service, durable=durable)
            return None
        if system.service == "postgres":
            problem = self.postgres.create()
            if problem:
                return problem
            self.env.update(PGDSN=self.settings.pg_dsn, PGQUEUER_SCHEMA=self.postgres.schema)
            problem = self.postgres.install(sys.executable, {**os.environ, **self.env})
            if problem:
                return problem
            service, durable = self.postgres.describe()
            self.record.update(service=f"{service}, schema {self.postgres.schema}", durable=durable)
            return None
        raise ValueError(f"unknown service {system.service}")

    def release(self) -> str | None:
        """Stop everything this row started and empty what it used, each step whatever the others
        did; what went wrong, if anything."""
        problems = []
        steps: list[Callable[[], object]] = []
        if self.workers is not None:
            steps.append(self.workers.stop)
        if self.pool is not None:  # closed with CLOSE after a whole run; otherwise ended as it stands
            steps.append(self.pool.close)
        if self.broker is not None:
            steps.append(self.broker.stop)
        steps.append(self.store.close)  # after the broker: drops a schema the run created
        if self.system.service == "redis" and self.redis.claimed:
            steps.append(self.redis.empty)
        if self.system.service == "postgres":
            steps.append(self.postgres.drop)
        for step in steps:
            try:
                step()
            except Exception as exc:
                problems.append(f"{type(exc).__name__}: {exc}")
        self.workers = None
        self.pool = None
        self.broker = None
        return "; ".join(problems) or None

    # ------------------------------------------------------------- phases

    def _start_workers(self) -> None:
        settings = self.settings
        commands = self.system.worker_commands(sys.executable, settings.processes, settings.redis_url)
        self.workers = WorkerGroup(commands, {**os.environ, **self.env}, self.directory / "workers.log")
        self.workers.start()

    def _stop_workers(self) -> None:
        assert self.workers is not None
        self.workers.stop()
        self.workers = None

    def _watch_workers(self) -> None:
        failure = self.workers.failed() if self.workers is not None else None
        if failure:
            raise PeerFailed(failure)

    def run(self) -> None:
        system, settings = self.system, self.settings
        label = system.label
        self.pool = ProcessPool(1, serve)
        bulk_api = _call(self.pool, Open(system.module_path, dict(system.submitter_options), dict(self.env)))
        record = self.record
        record["bulk_submit"]["api"] = bulk_api

        # the workers start on the empty queue and run one task (booted, connected, warm), then pause
        # while the backlog is submitted; the drain resumes them
        self._start_workers()
        _call(self.pool, Sample(1, self.payload, str(self.tally_path), 0.0, WARMUP_TIMEOUT_SECS),
              watch=self._watch_workers)
        assert self.workers is not None
        self.workers.pause()
        self.tally_base = tally.count(self.tally_path)

        # 1, 2. the backlog, with the workers paused
        singles = min(settings.submits, settings.tasks)
        single: Submitted = _call(self.pool, Submit(singles, self.payload),
                                  self.bar(f"{label}: submit one by one ×{singles:,}"), singles)
        record["single_submit"].update(tasks=single.tasks, seconds=round(single.seconds, 4),
                                       tasks_per_s=_rate(single.tasks_per_sec))
        rest = settings.tasks - singles
        if rest > 0:
            bulk: Submitted = _call(self.pool, Submit(rest, self.payload, bulk=bulk_api is not None,
                                                      chunk=PEERS_BULK_CHUNK),
                                    self.bar(f"{label}: submit in bulk ×{rest:,}" if bulk_api else
                                             f"{label}: submit the rest one by one ×{rest:,}"), rest)
            if bulk_api is not None:
                record["bulk_submit"].update(tasks=bulk.tasks, seconds=round(bulk.seconds, 4),
                                             tasks_per_s=_rate(bulk.tasks_per_sec))

        # 3. the drain
        complete = self._drain()
        if complete:
            record["drain"]["left_in_queue"] = _call(self.pool, WAITING)
        else:  # what is left would keep the workers busy: drop it, and start them again on an empty queue
            self._stop_workers()
            _call(self.pool, PURGE)
            self._start_workers()

        # 4. submit → start on the idle system: one warm-up task (not counted), then the samples
        _call(self.pool, Sample(1, self.payload, str(self.tally_path), 0.0, WARMUP_TIMEOUT_SECS),
              watch=self._watch_workers)
        sampled: Sampled = _call(
            self.pool, Sample(settings.latency_samples, self.payload, str(self.tally_path), settings.latency_gap_secs,
                              SAMPLE_TIMEOUT_SECS),
            self.bar(f"{label}: submit → start ×{settings.latency_samples:,}"), settings.latency_samples,
            watch=self._watch_workers)
        latency = latency_summary_ms(sampled.latencies_ns)
        record["latency"] = {"samples": len(sampled.latencies_ns), "latency_ms": latency,
                             "gap_secs": settings.latency_gap_secs}
        record.update(latency_ms=latency, samples=len(sampled.latencies_ns))
        self._stop_workers()

        # 5. single submits from several threads at once, no worker running; then the queue is emptied
        if settings.threaded_submits:
            count = settings.threaded_submits
            threaded: Submitted = _call(
                self.pool, Submit(count, self.payload, threads=PEERS_SUBMIT_THREADS),
                self.bar(f"{label}: submit one by one from {PEERS_SUBMIT_THREADS} threads ×{count:,}"), count)
            record["threaded_submit"].update(tasks=threaded.tasks, seconds=round(threaded.seconds, 4),
                                             tasks_per_s=_rate(threaded.tasks_per_sec), reason=threaded.reason)
            if threaded.tasks:
                _call(self.pool, PURGE)
        _call(self.pool, CLOSE)

    def _drain(self) -> bool:
        """Resume the paused workers on the backlog and wait for it; whether it all ran within the limit."""
        system, settings = self.system, self.settings
        expected = settings.tasks
        base = self.tally_base
        progress = self.bar(f"{system.label}: drain ×{expected:,}")
        assert self.workers is not None and self.pool is not None
        if system.keeps_results:
            self.pool.start(0, Collect(settings.max_drain_secs))
        broker_cpu = self.broker.cpu_secs() if self.broker is not None else None
        resumed_at = self.workers.resume()
        deadline = time.monotonic() + settings.max_drain_secs
        last_count, last_change = -1, time.monotonic()
        partial = False
        while True:
            done = tally.count(self.tally_path) - base
            progress(min(1.0, done / expected), done)
            if done >= expected and (not system.keeps_results or self.pool.done(0)):
                break
            now = time.monotonic()
            if done != last_count:
                last_count, last_change = done, now
            elif now - last_change > settings.stall_secs:
                raise PeerFailed(f"the drain stalled: {done:,} of {expected:,} tasks done, none in the last "
                                 f"{settings.stall_secs:.0f}s{self.workers.log_tail()}")
            if now > deadline:
                partial = True
                break
            self._watch_workers()
            time.sleep(POLL_SECS)
        record = self.record
        drain = record["drain"]
        span = tally.span(self.tally_path, base)
        done = tally.count(self.tally_path) - base
        if span is None:
            raise PeerFailed("no task of the backlog ran")
        first_start, last_end = span
        if system.keeps_results:
            if partial:
                self.pool.close()  # still waiting for results: the process goes, a new one takes over
                self.pool = ProcessPool(1, serve)
                _call(self.pool, Open(system.module_path, dict(system.submitter_options), dict(self.env)))
            else:
                collected: Collected = self.pool.result(0)
                drain["results"] = collected.results
                last_end = max(last_end, collected.finished_at)
        seconds = last_end - first_start
        drain.update(done=done, complete=not partial, seconds=round(seconds, 4),
                     tasks_per_s=_rate(done / seconds if seconds > 0 else None),
                     resume_to_first_start_s=round(first_start - resumed_at, 4),
                     resume_to_last_end_s=round(last_end - resumed_at, 4))
        empty_at = None if partial else self._queue_empty_at(time.monotonic() + EMPTY_WAIT_SECS)
        if broker_cpu is not None and self.broker is not None and done:
            drain["broker_cpu_us_per_task"] = round((self.broker.cpu_secs() - broker_cpu) / done * 1e6, 1)
        if empty_at is not None:
            whole = max(empty_at, last_end) - resumed_at
            drain.update(resume_to_empty_s=round(whole, 4), resume_to_empty_per_s=_rate(done / whole if whole > 0 else None))
        record["tasks_per_s"] = drain["tasks_per_s"]
        if partial:
            record["status"] = "partial"
            record["reason"] = (f"{done:,} of {expected:,} tasks ran within --max-drain-secs "
                                f"{settings.max_drain_secs:g}; the drain rate is theirs, the rest was purged")
        return not partial

    def _queue_empty_at(self, deadline: float) -> float | None:
        """time.time() when the system first says its queue is empty (every task taken and
        acknowledged, as far as it counts them), looking every `POLL_SECS`; None when it cannot say
        or not before `deadline` (monotonic)."""
        assert self.pool is not None
        while time.monotonic() < deadline:
            waiting = _call(self.pool, WAITING)
            if waiting is None:
                return None
            if waiting == 0:
                return time.time()
            time.sleep(POLL_SECS)
        return None


def _rate(value: float | None) -> float | None:
    return round(value, 1) if value else None


def _blank_record(system: System, settings: PeersSettings) -> dict[str, Any]:
    commands = system.worker_commands("python", settings.processes, settings.redis_url)
    return {
        "system": system.name,
        "label": system.label,
        "version": system.version(),
        "status": "ok",
        "reason": None,
        "service": None,
        "durable": None,
        "workers": system.workers_text(settings.processes),
        "worker_commands": [" ".join(command) for command in commands],
        "changed_settings": list(system.changed),
        "latency": None,
        "single_submit": {"tasks": 0, "seconds": None, "tasks_per_s": None},
        "bulk_submit": {"tasks": 0, "seconds": None, "tasks_per_s": None, "api": None},
        "threaded_submit": {"threads": PEERS_SUBMIT_THREADS, "tasks": 0, "seconds": None, "tasks_per_s": None,
                            "reason": None},
        "drain": {"tasks": settings.tasks, "done": 0, "complete": False, "seconds": None, "tasks_per_s": None,
                  "resume_to_first_start_s": None, "resume_to_last_end_s": None, "resume_to_empty_s": None,
                  "resume_to_empty_per_s": None, "broker_cpu_us_per_task": None, "left_in_queue": None},
        # the record every benchmark writes (`report.figure`): the drain's rate, submit → start
        "tasks_per_s": None,
        "latency_ms": None,
        "samples": 0,
        "errors": 0,
        "ratio": None,
        "reference": None,
        "target": None,
        "meets_target": None,
    }


# ----------------------------------------------------------------- the run


def _exit_on_signal(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)


def _run_system(system: System, settings: PeersSettings, root: Path, payload: str, bar: Bar,
                redis: RedisDatabase, postgres: PostgresSchema, console: Console) -> dict[str, Any]:
    row = SystemRun(system, settings, root, payload, bar, redis, postgres)
    try:
        reason = row.prepare()
        if reason:
            row.record.update(status="skipped", reason=reason)
            console.print(f"[yellow]{system.label}: skipped — {reason}")
        else:
            row.run()
    except Exception as exc:  # one system failing (its service, its workers, its client) ends its row only
        text = str(exc) if isinstance(exc, PeerFailed) else f"{type(exc).__name__}: {exc}"
        row.record.update(status="failed", reason=text, errors=1)
        console.print(f"[red]{system.label}: failed — {text.splitlines()[0] if text else ''}")
    finally:
        problem = row.release()
        if problem:
            console.print(f"[red]{system.label}: clean-up — {problem}")
    return row.record


def _add_ratios(records: dict[str, dict[str, Any]]) -> None:
    reference = records.get(KITTIWAKE_SYSTEM, {}).get("tasks_per_s")
    for name, record in records.items():
        if name == KITTIWAKE_SYSTEM or not reference:
            continue
        rate = record.get("tasks_per_s")
        record["reference"] = {"source": "Kittiwake, this run", "tasks_per_s": reference}
        record["ratio"] = round(reference / rate, 2) if rate else None


def check_settings(settings: PeersSettings) -> None:
    """Raise BadRequest for settings no run can use."""
    unknown = [name for name in settings.peers if name not in SYSTEMS or name == KITTIWAKE_SYSTEM]
    if unknown:
        raise BadRequest(f"unknown peers: {', '.join(unknown)}; choose from "
                         f"{', '.join(name for name in SYSTEMS if name != KITTIWAKE_SYSTEM)}")
    if (settings.tasks < 1 or settings.submits < 0 or settings.threaded_submits < 0 or settings.latency_samples < 1
            or settings.processes < 1):
        raise BadRequest("tasks, latency samples and processes must be at least 1, submits and threaded submits "
                         "at least 0")
    if settings.latency_gap_secs < 0 or settings.stall_secs <= 0 or settings.max_drain_secs <= 0:
        raise BadRequest("the latency gap must be at least 0 s, the stall and drain limits above 0 s")


def run_peers(settings: PeersSettings, console: Console, *, parent_dir: str | None = None) -> dict[str, Any]:
    """Every system of the settings, one after another; the JSON report."""
    check_settings(settings)
    systems = [SYSTEMS[KITTIWAKE_SYSTEM], *(SYSTEMS[name] for name in settings.peers)]
    payload = make_payload()
    load_before = os.getloadavg()
    root = Path(tempfile.mkdtemp(prefix="kittiwake-bench-", dir=parent_dir))
    redis = RedisDatabase(settings.redis_url)
    postgres = PostgresSchema(settings.pg_dsn)
    records: dict[str, dict[str, Any]] = {}
    previous_sigterm = None
    if threading.current_thread() is threading.main_thread():
        previous_sigterm = signal.signal(signal.SIGTERM, _exit_on_signal)  # a SIGTERM cleans up like Ctrl-C
    disk_commit: dict[str, Any] = {}
    try:
        with progress_bars(console) as bar:
            for system in systems:
                records[system.name] = _run_system(system, settings, root, payload, bar, redis, postgres, console)
            disk_commit = _disk_commit(settings, root, bar)
    finally:
        try:
            redis.release()
        finally:
            try:
                postgres.drop()
            finally:
                shutil.rmtree(root, ignore_errors=True)
                if previous_sigterm is not None:
                    signal.signal(signal.SIGTERM, previous_sigterm)
    _add_ratios(records)
    return {
        "machine": machine_info(),
        "settings": {**asdict(settings), "peers": list(settings.peers), "payload_bytes": len(payload),
                     "bulk_chunk": PEERS_BULK_CHUNK, "submit_threads": PEERS_SUBMIT_THREADS},
        # other processes on the machine take cores from every system alike: 1, 5, 15 min load averages
        "load_average": {"before": [round(value, 2) for value in load_before],
                         "after": [round(value, 2) for value in os.getloadavg()]},
        "peers": records,
        "disk_commit": disk_commit,
    }


def _disk_commit(settings: PeersSettings, root: Path, bar: Bar) -> dict[str, Any]:
    """The disk's own durable write, paused like the latency samples: what a durable system's
    submit → start cannot go below on this machine."""
    samples = settings.latency_samples
    progress = bar("disk: 4 KiB + fsync, paused like the samples")
    counter = _Counter(lambda done: progress(done / samples, done))
    probed = run_fsync_probe(FsyncProbe(str(root), samples, pause_secs=settings.latency_gap_secs), counter)
    return {"latency_ms": latency_summary_ms(probed.latencies_ns), "samples": len(probed.latencies_ns),
            "pause_secs": settings.latency_gap_secs}


class _Counter:
    """What a probe updates as it goes (`value`), forwarded to a progress bar."""

    def __init__(self, report: Callable[[int], None]) -> None:
        self._report = report
        self._value = 0

    @property
    def value(self) -> int:
        return self._value

    @value.setter
    def value(self, done: int) -> None:
        self._value = done
        self._report(done)

"""`kittiwake bench celery`: one Celery app on Kittiwake (the kombu transport) and on Redis, in the same run.

The app is `celery_transport_app` — the benchmarks' null task, acks_late,
everything else Celery's default — and nothing in it changes between the two
systems but `CELERY_BROKER_URL`. For each system and each worker pool
(`--pools`: `solo`, one process that runs tasks in its consumer loop, and
`prefork` with `--concurrency` children, Celery's default):

1. submit: `--tasks` calls of `null.delay(payload)` (1 KB), one after the
   other from this process: the producer's rate;
2. drain: `celery worker -P <pool>` started on that backlog; the rate is the
   tasks over the span from the first task's start to the last one's end, read
   from the tally file every null task appends to (`peers.tally`).

`ratio` on a Kittiwake row is its rate over Redis's for the same figure; the
target is Kittiwake's drain at `ratio_min` (3×) Redis's. The broker is a
fresh one on a throwaway directory with `--durability fsync` (an acked
message is on disk); Redis is the database `bench peers` uses, claimed and
emptied the same way, and its persistence is printed beside the table, since
a Redis without `appendfsync always` acknowledges what a power cut loses.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from rich.console import Console

from kittiwake_benchmarks.celery_transport_app import QUEUE_ENV, TASK_NAME, create_app
from kittiwake.bench.harness import BrokerProcess
from kittiwake.bench import tally
from kittiwake.bench.tally import make_payload
from kittiwake_benchmarks.peers.services import RedisDatabase
from kittiwake.bench.report import machine_info
from kittiwake_benchmarks.settings import CelerySettings

APP_MODULE = "kittiwake_benchmarks.celery_transport_app"
POLL_SECS = 0.05
STOP_TIMEOUT_SECS = 20.0
SYSTEMS = ("kittiwake", "redis")


class FigureFailed(Exception):
    """A figure could not be measured; its row says why and the run goes on."""


def _worker_command(pool: str, concurrency: int, queue: str) -> list[str]:
    return [
        sys.executable, "-m", "celery", "-A", APP_MODULE, "worker", "-P", pool,
        "-c", str(1 if pool == "solo" else concurrency), "-Q", queue, "-n", f"{queue}@%h",
        "--without-gossip", "--without-mingle", "--without-heartbeat", "--loglevel=WARNING",
    ]


def _stop(worker: subprocess.Popen[bytes]) -> None:
    if worker.poll() is None:
        worker.send_signal(signal.SIGTERM)  # Celery's warm shutdown
        try:
            worker.wait(timeout=STOP_TIMEOUT_SECS)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()


def measure(broker_url: str, pool: str, settings: CelerySettings, root: Path, payload: str) -> dict[str, Any]:
    """Submit the backlog through the app, drain it with one `celery worker`; the two rates."""
    name = f"{broker_url.split(':', 1)[0]}-{pool}"
    queue = f"bench.celery.{os.getpid()}.{name}"
    tally_path = root / f"{name}.tally"
    log_path = root / f"{name}.log"
    env = {**os.environ, "CELERY_BROKER_URL": broker_url, QUEUE_ENV: queue, tally.TALLY_ENV: str(tally_path)}
    previous = os.environ.get(QUEUE_ENV)
    os.environ[QUEUE_ENV] = queue  # the submitting app routes by it too
    app = create_app(broker_url)
    try:
        task = app.tasks[TASK_NAME]
        started = time.perf_counter()
        for _ in range(settings.tasks):
            task.delay(payload)
        submit_secs = time.perf_counter() - started
    finally:
        app.close()
        if previous is None:
            os.environ.pop(QUEUE_ENV, None)
        else:
            os.environ[QUEUE_ENV] = previous
    with log_path.open("ab") as log:
        worker = subprocess.Popen(_worker_command(pool, settings.concurrency, queue), env=env,
                                  stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + settings.max_drain_secs
        while tally.count(tally_path) < settings.tasks:
            if worker.poll() is not None:
                raise FigureFailed(f"the worker exited ({worker.returncode}): {log_path.read_text()[-800:]}")
            if time.monotonic() > deadline:
                raise FigureFailed(f"{tally.count(tally_path):,} of {settings.tasks:,} tasks ran "
                                   f"within {settings.max_drain_secs:g}s")
            time.sleep(POLL_SECS)
    finally:
        _stop(worker)
    span = tally.span(tally_path)
    assert span is not None
    drain_secs = span[1] - span[0]
    return {
        "submit_tasks_per_s": round(settings.tasks / submit_secs, 1),
        "drain_tasks_per_s": round(settings.tasks / drain_secs, 1) if drain_secs > 0 else None,
        "drain_s": round(drain_secs, 3),
    }


def _record(measured: dict[str, Any] | None, key: str, system: str, pool: str, settings: CelerySettings,
            problem: str | None) -> dict[str, Any]:
    record: dict[str, Any] = {
        "tasks_per_s": measured.get(key) if measured else None,
        "latency_ms": None,
        "samples": settings.tasks if measured else 0,
        "errors": 0 if measured else 1,
        "ratio": None,
        "reference": None,
        "target": None,
        "meets_target": None,
        "system": system,
        "pool": pool,
        "concurrency": 1 if pool == "solo" else settings.concurrency,
    }
    if problem:
        record["first_error"] = problem
    return record


def run_celery(settings: CelerySettings, console: Console, *, parent_dir: str | None = None) -> dict[str, Any]:
    """Both systems, every pool; the report (`kittiwake.bench.report`'s shape)."""
    import kittiwake.kombu  # noqa: F401  (registers kittiwake:// for the submitting app)

    payload = make_payload()
    figures: dict[str, Any] = {}
    services: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="kittiwake-bench-celery-", dir=parent_dir) as directory:
        root = Path(directory)
        broker = BrokerProcess(root / "data", root / "broker.log")
        broker.start()
        redis = RedisDatabase(settings.redis_url)
        redis_problem = redis.claim()
        services["kittiwake"] = "Kittiwake broker, --durability fsync: an acked message is on disk"
        services["redis"] = redis_problem or redis.describe()[0]
        try:
            for pool in settings.pools:
                for system in SYSTEMS:
                    measured: dict[str, Any] | None = None
                    problem: str | None = None
                    if system == "redis" and redis_problem:
                        problem = redis_problem
                    else:
                        if system == "redis":
                            redis.empty()
                        url = (f"kittiwake://{broker.host}:{broker.port}" if system == "kittiwake"
                               else settings.redis_url)
                        console.print(f"[dim]{system} {pool}: submit and drain {settings.tasks:,} tasks")
                        try:
                            measured = measure(url, pool, settings, root, payload)
                        except FigureFailed as exc:
                            problem = str(exc)
                    for phase, key in (("drain", "drain_tasks_per_s"), ("submit", "submit_tasks_per_s")):
                        figures[f"{system} {pool} {phase}"] = _record(measured, key, system, pool, settings, problem)
        finally:
            redis.release()
            broker.stop()
    _add_ratios(figures, settings)
    return {
        "machine": machine_info(),
        "settings": {"tasks": settings.tasks, "pools": list(settings.pools), "concurrency": settings.concurrency,
                     "redis_url": settings.redis_url, "app": APP_MODULE, "acks_late": True},
        "services": services,
        "celery": figures,
    }


def _add_ratios(figures: dict[str, Any], settings: CelerySettings) -> None:
    for name, record in figures.items():
        if record["system"] != "kittiwake":
            continue
        reference = figures.get(name.replace("kittiwake", "redis", 1))
        ours, theirs = record["tasks_per_s"], reference and reference["tasks_per_s"]
        if ours and theirs:
            record["ratio"] = round(ours / theirs, 2)
            record["reference"] = {"system": "Celery on Redis, same app and pool", "tasks_per_s": theirs}
        if name.endswith("drain"):
            record["target"] = {"ratio_min": settings.ratio_min}
            record["meets_target"] = None if record["ratio"] is None else record["ratio"] >= settings.ratio_min

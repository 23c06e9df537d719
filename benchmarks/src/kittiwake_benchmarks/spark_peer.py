"""The PySpark peer of `kittiwake bench tasks`: the same null tasks on Spark `local[2]`.

Albatross (§5.4.3) compares itself with Spark on null tasks: Spark's central
scheduler saturates near 2,000 tasks/s with a 50 ms median latency. Here the
peer runs on this machine, in the benchmark's own process (PySpark's driver),
with two executor slots for Kittiwake's two worker processes:

    sc.parallelize(range(N), N).map(null_task).collect()

— N tasks of one element each, every one running the same null Python
function as Kittiwake's workers. The time is that one job, end to end, from
the call to the collected list. Start-up is reported apart: starting the
session (JVM and all) and one warm-up job of two tasks (it forks the Python
worker daemon), neither of which is in the rate.

The session is `kittiwake.testing.spark_session`'s (`start_spark`), as in
`bench mapreduce` (with `spark.driver.memory` among its settings). A session
that already runs in this process (a test suite shares one) is used as it
is and left running; otherwise one is started and stopped again.
PySpark is an optional dependency (`pip install kittiwake[spark]`) and needs
Java; without either the peer reports why instead of a rate.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any, Mapping

from kittiwake.testing.spark_session import SPARK_MASTER, spark_available
from kittiwake.testing.spark_session import start_spark as start_session
from kittiwake_benchmarks.task_processes import null_task

APP_NAME = "kittiwake-bench-tasks"
WARMUP_TASKS = 2


@dataclass
class SparkRun:
    """What the peer measured, or why it could not."""

    tasks: int
    tasks_per_sec: float | None = None
    seconds: float | None = None  # the measured job, end to end
    startup_s: float | None = None  # session start (0 when an existing one was used)
    warmup_s: float | None = None  # the first, unmeasured job
    master: str | None = None
    version: str | None = None
    reused_session: bool = False
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """The JSON record: the field names, but the rate under its published key `tasks_per_s`."""
        return {
            JSON_KEYS.get(key, key): (round(value, 4) if isinstance(value, float) else value)
            for key, value in asdict(self).items()
        }


JSON_KEYS = {"tasks_per_sec": "tasks_per_s"}  # the benchmarks' JSON keeps the key every record uses


def run_spark(tasks: int, session: Any = None) -> SparkRun:
    """Time `tasks` null tasks on `session`, the session active in this process, or a new one."""
    run = SparkRun(tasks=tasks)
    reason = spark_available()
    if reason is not None and session is None:
        run.error = reason
        return run
    from pyspark.sql import SparkSession

    started_here = False
    try:
        if session is None:
            session = SparkSession.getActiveSession()
        if session is None:
            begin = time.monotonic()
            session = start_spark()
            run.startup_s = time.monotonic() - begin
            started_here = True
        else:
            run.startup_s = 0.0
            run.reused_session = True
        context = session.sparkContext
        run.master = context.master
        run.version = context.version
        begin = time.monotonic()
        context.parallelize(range(WARMUP_TASKS), WARMUP_TASKS).map(_null).collect()
        run.warmup_s = time.monotonic() - begin
        begin = time.monotonic()
        collected = context.parallelize(range(tasks), tasks).map(_null).collect()
        run.seconds = time.monotonic() - begin
        if len(collected) != tasks:
            raise RuntimeError(f"Spark returned {len(collected)} results for {tasks} tasks")
        run.tasks_per_sec = tasks / run.seconds if run.seconds > 0 else None
    except Exception as exc:  # Spark failing (no JVM, a port) is a finding, not a crash of the benchmark
        run.error = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    finally:
        if started_here and session is not None:
            session.stop()
    return run


def _null(element: int) -> int:
    """The mapped function: call the null task, keep the element (so collect has N results)."""
    null_task()
    return element


def start_spark(master: str = SPARK_MASTER, config: Mapping[str, str] | None = None) -> Any:
    """`kittiwake.testing.spark_session.start_spark` under this benchmark's application name."""
    return start_session(master, config, app_name=APP_NAME)

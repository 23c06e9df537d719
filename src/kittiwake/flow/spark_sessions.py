"""The Spark worker's session: a classic one on a master, or a Spark Connect client of a remote server.

`start_session(master=…)` starts a classic SparkSession — its own driver JVM,
the FAIR scheduler, no UI, error-level logging, Python workers running this
interpreter. `start_session(remote="sc://HOST:PORT")` connects to a Spark
Connect server instead (Spark 4's client–server mode: the server holds the
driver and talks to the cluster; this process holds a gRPC client and no
JVM, so a thin worker drives a shared cluster). `--conf` settings of a
Connect session are set as the session's runtime settings; settings read at
a JVM's start (memory, scheduler mode) belong to the server's command line.

A Connect session has no SparkContext, so what a worker does to one job
differs by kind, and lives here:

* `enter_job` / `leave_job`: a classic session runs the job's Spark jobs in
  the slot's FAIR pool and a job group of its own (thread-local properties of
  the SparkContext); a Connect session tags the thread's operations instead
  (``addTag``: thread-local in the client). Connect has no client-side pools:
  jobs are scheduled as the server's ``spark.scheduler.mode`` says.
* `cancel_job`: ``cancelJobGroup``, or ``interruptTag``.
* `describe`: the master (or the ``sc://`` URL) and the scheduler mode, for the
  worker registry.

What does not work on Connect: steps that use ``spark.sparkContext`` (RDDs,
broadcast variables, accumulators) fail, as any Connect client would; the
`kittiwake` data source works when the server's Python workers import
kittiwake (`kittiwake.spark.register` checks).
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
from pathlib import Path
from typing import Any, Mapping

APP_NAME = "kittiwake-spark-worker"
# the driver logs errors only, so Spark's warnings do not drown the worker's own lines
LOG4J2_ERRORS_ONLY = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n
"""
_TAG_UNSAFE = re.compile(r"[,\s]")  # Connect tags may not hold a comma, nor be blank


def is_connect(session: Any) -> bool:
    """Whether `session` is a Spark Connect client session."""
    return type(session).__module__.startswith("pyspark.sql.connect")


def start_session(master: str | None = "local[*]", conf: Mapping[str, str] | None = None,
                  app_name: str = APP_NAME, *, remote: str | None = None) -> Any:
    """A classic SparkSession on `master`, or with `remote` a Spark Connect session (see the module
    docstring); `conf` adds or overrides settings."""
    from pyspark.sql import SparkSession

    if remote is not None:
        builder = SparkSession.builder.remote(remote)
        for key, value in (conf or {}).items():
            builder = builder.config(key, value)
        return builder.getOrCreate()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    log_config = Path(tempfile.gettempdir(), "kittiwake-spark-worker-log4j2.properties")
    log_config.write_text(LOG4J2_ERRORS_ONLY)
    builder = (
        SparkSession.builder.master(master or "local[*]").appName(app_name)
        .config("spark.scheduler.mode", "FAIR")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile=file:{log_config}")
    )
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session


def job_tag(group: str) -> str:
    """A job group's name as a Connect operation tag."""
    return _TAG_UNSAFE.sub("_", group)


def enter_job(session: Any, group: str, description: str, pool: str | None) -> None:
    """This thread's Spark jobs from now on belong to `group` (and run in `pool`, classic only)."""
    if is_connect(session):
        session.addTag(job_tag(group))
        return
    context = session.sparkContext
    if pool is not None:
        context.setLocalProperty("spark.scheduler.pool", pool)
    context.setJobGroup(group, description, True)


def leave_job(session: Any, group: str, pool: str | None) -> None:
    """Undo `enter_job` for this thread."""
    if is_connect(session):
        session.removeTag(job_tag(group))
        return
    context = session.sparkContext
    context.setLocalProperty("spark.jobGroup.id", None)
    if pool is not None:
        context.setLocalProperty("spark.scheduler.pool", None)


def cancel_job(session: Any, group: str) -> None:
    """Cancel the running Spark jobs of `group` (from any thread)."""
    if is_connect(session):
        session.interruptTag(job_tag(group))
    else:
        session.sparkContext.cancelJobGroup(group)


def describe(session: Any, remote: str | None = None) -> dict[str, str]:
    """The session's master (a Connect session: its ``sc://`` URL) and scheduler mode."""
    if is_connect(session):
        try:
            mode = str(session.conf.get("spark.scheduler.mode", "FIFO"))
        except Exception:  # a server that does not say
            mode = "unknown"
        return {"spark_master": (remote or "sc://").split("/;")[0], "scheduler_mode": mode}  # no token
    context = session.sparkContext
    return {"spark_master": str(context.master),
            "scheduler_mode": str(context.getConf().get("spark.scheduler.mode", "FIFO"))}

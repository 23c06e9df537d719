"""A local Spark session for tests and benchmarks, and whether one can run here at all.

`spark_available()` says why PySpark cannot run on this machine (not installed: `pip install
kittiwake[spark]`; no Java), or None. `start_spark()` starts a `SparkSession` on `local[2]` quiet
enough to sit beside a table or a test's output: no UI, no console progress, the driver JVM logging
errors only (the Spark worker's log4j2 configuration, `LOG4J2_ERRORS_ONLY`), Python workers on this
interpreter. PySpark is imported only when a session starts.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Any, Mapping

from kittiwake.flow.spark_worker import LOG4J2_ERRORS_ONLY

SPARK_MASTER = "local[2]"
APP_NAME = "kittiwake"


def spark_available() -> str | None:
    """None when PySpark can run here, else the reason it cannot."""
    try:
        import pyspark  # noqa: F401
    except ImportError:
        return "pyspark is not installed (pip install kittiwake[spark])"
    java_home = os.environ.get("JAVA_HOME")
    if not (java_home and Path(java_home, "bin", "java").exists()) and not _on_path("java"):
        return "Spark needs Java (no java on PATH and no JAVA_HOME)"
    return None


def _on_path(program: str) -> bool:
    return any(Path(folder, program).exists() for folder in os.environ.get("PATH", "").split(os.pathsep) if folder)


def start_spark(master: str = SPARK_MASTER, config: Mapping[str, str] | None = None, app_name: str = APP_NAME) -> Any:
    """A SparkSession on `master` with its UI, console progress and WARN logging off, plus `config`
    (settings read at JVM start, such as `spark.driver.memory`, apply only to a session started here).

    Python workers run this interpreter, so they import what the driver imports."""
    if config is not None and not all(isinstance(key, str) and isinstance(value, str) for key, value in config.items()):
        raise ValueError(f"Spark settings are str keys and str values, not {dict(config)!r}")
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    log_config = Path(tempfile.gettempdir(), "kittiwake-spark-log4j2.properties")
    log_config.write_text(LOG4J2_ERRORS_ONLY)
    builder = SparkSession.builder
    for key, value in (config or {}).items():
        builder = builder.config(key, value)
    session = (
        builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile=file:{log_config}")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    return session

"""The Python that Spark runs for the data source: the docs' example (examples/spark_source.py, docs/spark-source.md)
runs as written from a virtualenv's python without activating it — no `PYSPARK_PYTHON`, and the
`python3` on `PATH` lacks kittiwake — and where Spark's Python cannot import kittiwake, `register`
raises one error naming the fix instead of the first read failing in a Java trace."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import kittiwake.spark
from kittiwake.spark.executor_python import ExecutorPythonError, is_local_master
from support.broker_process import BrokerProcess
from support.spark_daemons import require_spark

EXAMPLES = Path(__file__).resolve().parent.parent.parent / "examples"
EXPECTED = "".join(f"order-{n} amount={n * 10} available\n" for n in range(5))


def python_without_kittiwake(folder: Path) -> Path:
    """A folder whose `python3` is the interpreter this virtualenv was made from (no kittiwake)."""
    folder.mkdir()
    base = Path(getattr(sys, "_base_executable", "") or "/usr/bin/python3")
    (folder / "python3").symlink_to(base)
    probe = subprocess.run([str(folder / "python3"), "-I", "-c", "import kittiwake"], capture_output=True, timeout=60)
    if probe.returncode == 0:
        pytest.skip(f"{base} imports kittiwake: no interpreter without it to run the example against")
    return folder


def test_the_spark_source_example_runs_from_a_venv_python_without_pyspark_python(broker: BrokerProcess,
                                                                                  tmp_path: Path) -> None:
    require_spark()
    bare = python_without_kittiwake(tmp_path / "bin")
    environment = {key: value for key, value in os.environ.items()
                   if key not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "SPARK_REMOTE", "VIRTUAL_ENV")}
    path = [folder for folder in environment.get("PATH", "").split(os.pathsep)
            if folder and Path(folder).resolve() != Path(sys.executable).parent.resolve()]
    environment["PATH"] = os.pathsep.join([str(bare), *path])  # `python3` is the bare one, java is still there
    done = subprocess.run([sys.executable, str(EXAMPLES / "spark_source.py"), broker.url], cwd=tmp_path,
                          env=environment, capture_output=True, text=True, timeout=400)
    assert done.returncode == 0, done.stderr[-4000:]
    assert done.stdout == EXPECTED


def test_register_says_how_to_fix_an_executor_python_without_kittiwake(spark_session: Any, tmp_path: Path) -> None:
    """The shared session's workers run this interpreter; pointed at one without kittiwake (as a
    cluster's executors would be), `register` probes and refuses in one line, then registering with
    the session's own choice works again."""
    assert is_local_master(spark_session.sparkContext.master)
    bare = python_without_kittiwake(tmp_path / "bin") / "python3"
    context = spark_session.sparkContext
    before = context.pythonExec
    context.pythonExec = str(bare)
    try:
        with pytest.raises(ExecutorPythonError) as refused:
            kittiwake.spark.register(spark_session)
    finally:
        context.pythonExec = before
        kittiwake.spark.register(spark_session)  # the format again as every other test expects it
    message = str(refused.value)
    assert message.startswith("BAD_REQUEST: the executors' Python") and str(bare) in message
    assert "ModuleNotFoundError" in message and "spark.pyspark.python" in message
    assert "\n" not in message and "org.apache" not in message

"""Which Python runs the data source on Spark's side, and one clear error when it cannot import kittiwake.

PySpark runs a Python data source in Python workers that the JVM starts: on the
driver's machine to plan a query, on the executors to read and write. Their
interpreter is the session's ``sparkContext.pythonExec``, taken from
``$PYSPARK_PYTHON`` when the SparkContext started, else ``python3`` from the
JVM's ``PATH``. A script run from a virtualenv's ``bin/python`` without
activating it therefore has workers that lack kittiwake (and PyArrow), and
its first read dies in a Java stack trace ending in ``ModuleNotFoundError``.

`register` (in `kittiwake.spark`) registers the data source with
``pythonExec`` set, for the length of the registration only, to (a classic
session whose user chose no interpreter: ``pythonExec`` still PySpark's
default ``python3`` and no ``$PYSPARK_PYTHON``):

* ``spark.pyspark.python`` if the session's config has it: spark-submit
  turns that setting into ``$PYSPARK_PYTHON``, but set in a builder nothing
  reads it (checked with PySpark 4.0: the workers still ran ``python3``);
* else, on a local master (``local``, ``local[N]``, ``local[*]``,
  ``local-cluster[...]``: executors on this machine), THIS interpreter
  (`sys.executable`).

The registration captures ``pythonExec`` in the data source's Python
function, so its planning and its executors' workers run that interpreter;
the user's own UDFs keep the session's choice. (Setting ``os.environ`` or
``spark.executorEnv.PYSPARK_PYTHON`` once the context runs changes nothing:
PySpark reads the variable once, at context start, and the JVM takes the
interpreter from each Python function, not from the executor's environment.)

Then, unless the workers run this very interpreter on this machine, a probe
— one Python UDF on one row, run where the data source's workers run —
imports the data source: on a cluster, with an interpreter the user chose,
and on Spark Connect (whose server picks its Python workers' interpreter
from its own ``$PYSPARK_PYTHON``). If that fails, `register` raises
`ExecutorPythonError` naming the interpreter, what it could not import and
the fix, instead of the first read failing in a Java trace.

Kept out: a probe of every executor (one task proves the interpreter's
setup, not every machine's), and a time limit on the probe (on a cluster
with no free executors it waits, as the first read would).
"""

from __future__ import annotations

import os
import shutil
import sys
from contextlib import contextmanager
from typing import Any, Iterator

from kittiwake import errors

PYSPARK_DEFAULT_PYTHON = "python3"  # what PySpark runs when nobody chose
FIX = ("point Spark's Python at an interpreter that has kittiwake on every executor (PYSPARK_PYTHON before the "
       "session starts, or spark.pyspark.python with spark-submit), or pip install 'kittiwake[spark]' into the "
       "Python the executors run")
CONNECT_FIX = ("start the Spark Connect server with PYSPARK_PYTHON set to an interpreter that has kittiwake[spark] "
               "installed (on the server's machine and every executor)")


class ExecutorPythonError(errors.BadRequest):
    """The Python that Spark runs for the data source cannot import it. Code BAD_REQUEST."""


def is_connect(spark: Any) -> bool:
    """Whether `spark` is a Spark Connect session (a client of a remote server)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def is_local_master(master: str) -> bool:
    """Whether executors of `master` run on the driver's machine."""
    return master == "local" or master.startswith(("local[", "local-cluster["))


def chosen_python(spark: Any) -> str | None:
    """The interpreter the user chose for a classic session's Python workers; None when nobody did.
    (``spark.pyspark.python`` counts through spark-submit, which turns it into ``$PYSPARK_PYTHON``
    before PySpark reads it: set in a builder, the JVM and PySpark never read it.)"""
    python = str(spark.sparkContext.pythonExec)
    if python != PYSPARK_DEFAULT_PYTHON:
        return python
    return os.environ.get("PYSPARK_PYTHON") or None


def workers_python(spark: Any) -> str | None:
    """The interpreter `register` gives the data source's workers; None leaves the session's."""
    if is_connect(spark) or chosen_python(spark) is not None:
        return None
    configured = spark.sparkContext.getConf().get("spark.pyspark.python")
    if configured:  # set in a builder, where PySpark itself ignores it
        return str(configured)
    return sys.executable if is_local_master(spark.sparkContext.master) else None


def needs_probe(spark: Any) -> bool:
    """Whether the data source's workers might lack kittiwake: not when they run this very
    interpreter on this machine (e.g. `kittiwake spark-worker`, which sets ``$PYSPARK_PYTHON`` to it)."""
    if is_connect(spark) or not is_local_master(spark.sparkContext.master):
        return True
    python = str(spark.sparkContext.pythonExec)
    return os.path.abspath(shutil.which(python) or python) != os.path.abspath(sys.executable)


@contextmanager
def functions_run(spark: Any, python: str | None) -> Iterator[None]:
    """Python functions made inside run `python` on the workers (a classic session; None: as they were)."""
    if python is None:
        yield
        return
    context = spark.sparkContext
    before = context.pythonExec
    context.pythonExec = python
    try:
        yield
    finally:
        context.pythonExec = before


def probe(spark: Any) -> None:
    """Run one Python UDF where the data source's workers run; raise `ExecutorPythonError` if it
    cannot import the data source (or cannot run at all)."""
    from pyspark.sql.functions import udf

    def import_source(_: int) -> str:  # pickled by value: it must run before kittiwake imports
        import sys as worker_sys

        try:
            import kittiwake.spark.source  # noqa: F401
        except Exception as error:  # the answer, not a failure of the probe
            return f"{worker_sys.executable} (Python {worker_sys.version.split()[0]}): {type(error).__name__}: {error}"
        return ""

    if is_connect(spark):
        where, fix = "the Spark Connect server's Python workers", CONNECT_FIX
    else:
        where, fix = f"the executors' Python ({spark.sparkContext.pythonExec})", FIX
    try:
        [row] = spark.range(1).select(udf(import_source, "string")("id").alias("failure")).collect()
    except Exception as error:  # Py4J, PythonException, SparkConnectGrpcException: one line of it
        raise ExecutorPythonError(f"{where} cannot run the kittiwake data source: {first_line(error)}; {fix}") from None
    if row["failure"]:
        raise ExecutorPythonError(f"{where} cannot import the kittiwake data source: {row['failure']}; {fix}")


def first_line(error: BaseException) -> str:
    """The line of a Spark error that says what went wrong (the last line of a Python traceback
    inside it, else its first line)."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    for line in reversed(lines):
        if "Error:" in line or "Exception:" in line:
            return f"{type(error).__name__}: {line}"[:1000]
    return f"{type(error).__name__}: {lines[0] if lines else ''}"[:1000]

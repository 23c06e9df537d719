"""The MapReduce apps as idiomatic Spark jobs, Kittiwake's twins on PySpark, on built-in functions only.

Owns the three jobs and how a run of one is configured and measured:

* `wordcount`: `explode(split(value, " "))`, `groupBy("word").count()`, written
  as CSV with a tab separator (lines `word\\tcount`);
* `grep`: the lines whose value `contains` the pattern, written as text;
* `sort`: `orderBy("value")`, written as text (Spark's line reader strips the
  records' `\\r\\n`, so each output line is a 98-byte record).

One input file is one partition, as one file is one map task on Kittiwake:
`spark.sql.files.maxPartitionBytes` and `spark.sql.files.openCostInBytes` are
both set to the size of the largest input file (at least `partition_bytes`).
With the default 128 MB a file above it would be split and small files packed
together; a gen-data text file can be a line longer than its nominal size, so
the nominal size would split every file in two; and setting the open cost as
high keeps Spark from packing two files into a partition. The partition count
is checked against the file count before the job runs (planning only, no job).
`spark.sql.shuffle.partitions` is the number of reducers. Spark's other
settings are its defaults: adaptive query execution coalesces small shuffle
partitions (below 64 MB), so a small output has fewer files than reducers —
unless `coalesce_reducers=False`, which turns that off for the run
(`spark.sql.adaptive.coalescePartitions.enabled`) to hold Spark to exactly
`reducers` reduce tasks.

These settings are runtime configuration of the session, set for the run and
restored afterwards, so runs (and tests) can share one session. The measured
time is the job alone, from reading to the written output; the tasks are
counted from Spark's status tracker over the run's job group.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from kittiwake.errors import BadRequest
from kittiwake.mapreduce.outputs import SPARK, check_app, part_files
from kittiwake.mapreduce.spec import APPS, GREP, SORT, WORDCOUNT

FILES_MAX_PARTITION_BYTES = "spark.sql.files.maxPartitionBytes"
FILES_OPEN_COST_BYTES = "spark.sql.files.openCostInBytes"
SHUFFLE_PARTITIONS = "spark.sql.shuffle.partitions"
ADAPTIVE_COALESCE = "spark.sql.adaptive.coalescePartitions.enabled"
_JOB_GROUP_PROPERTIES = ("spark.jobGroup.id", "spark.job.description", "spark.job.interruptOnCancel")


@dataclass(frozen=True)
class SparkRun:
    """One Spark app run: what ran, how long the job took, how it was split."""

    app: str
    seconds: float  # the job alone: from reading the input to the written output
    partitions: int  # of the input DataFrame: one per input file
    tasks: int | None  # tasks Spark ran for the job (every stage), None when its status tracker could not tell
    input_bytes: int
    input_files: int
    reducers: int  # spark.sql.shuffle.partitions
    max_partition_bytes: int  # spark.sql.files.maxPartitionBytes and openCostInBytes during the run
    output_files: int  # part files written


def input_files(input_dir: str | Path) -> list[Path]:
    """The `part-*` files of a gen-data directory, sorted by name (not `_manifest.json`)."""
    folder = Path(input_dir)
    if not folder.is_dir():
        raise BadRequest(f"input directory {folder} does not exist or is not a directory")
    files = sorted((path for path in folder.iterdir() if path.name.startswith("part-") and path.is_file()),
                   key=lambda path: path.name)
    if not files:
        raise BadRequest(f"input directory {folder} holds no part-* files")
    return files


def run_spark(spark: Any, app: str, input_dir: str | Path, out_dir: str | Path, *, partition_bytes: int,
              pattern: str | None = None, reducers: int = 4, coalesce_reducers: bool = True) -> SparkRun:
    """Run `app` on `spark` over the part files of `input_dir`, writing `out_dir` (which must not exist).

    `coalesce_reducers=False` keeps adaptive execution from merging small reduce partitions."""
    if spark is None:
        raise BadRequest("a SparkSession is needed")
    check_app(app)
    _check_positive("partition_bytes", partition_bytes)
    _check_positive("reducers", reducers)
    if not isinstance(coalesce_reducers, bool):
        raise BadRequest(f"coalesce_reducers must be True or False, not {coalesce_reducers!r}")
    if app == GREP:
        if not isinstance(pattern, str) or not pattern:
            raise BadRequest(f"grep needs a non-empty str pattern, not {pattern!r}")
        if "\n" in pattern:
            raise BadRequest("a grep pattern cannot hold a line end")
    elif pattern is not None:
        raise BadRequest(f"only grep takes a pattern, not {app}")
    files = input_files(input_dir)
    out = Path(out_dir)
    if out.exists():
        raise BadRequest(f"output directory {out} already exists (Spark writes it)")
    sizes = [path.stat().st_size for path in files]
    split_bytes = max([partition_bytes, *sizes])
    names = [str(path) for path in files]
    settings = {FILES_MAX_PARTITION_BYTES: str(split_bytes), FILES_OPEN_COST_BYTES: str(split_bytes),
                SHUFFLE_PARTITIONS: str(reducers)}
    if not coalesce_reducers:
        settings[ADAPTIVE_COALESCE] = "false"
    with _runtime_conf(spark, settings):
        partitions = spark.read.text(names).rdd.getNumPartitions()
        if partitions != len(files):
            raise RuntimeError(f"Spark planned {partitions} input partitions for {len(files)} files "
                               f"(maxPartitionBytes = openCostInBytes = {split_bytes})")
        with _job_group(spark.sparkContext, app) as group:
            begin = time.monotonic()
            _write(spark, app, names, str(out), pattern)
            seconds = time.monotonic() - begin
        tasks = _tasks_of_group(spark.sparkContext, group)
    return SparkRun(app=app, seconds=seconds, partitions=partitions, tasks=tasks, input_bytes=sum(sizes),
                    input_files=len(files), reducers=reducers, max_partition_bytes=split_bytes,
                    output_files=len(part_files(out, app, SPARK)))


def _write(spark: Any, app: str, files: list[str], out: str, pattern: str | None) -> None:
    """The job itself: read `files`, compute `app`, write `out`."""
    from pyspark.sql.functions import col, explode, split

    lines = spark.read.text(files)
    if app == WORDCOUNT:
        words = lines.select(explode(split(col("value"), " ")).alias("word"))
        words.groupBy("word").count().write.option("sep", "\t").csv(out)
    elif app == GREP:
        assert pattern is not None  # the job checked grep's pattern before it started
        lines.filter(col("value").contains(pattern)).write.text(out)
    elif app == SORT:
        lines.orderBy("value").write.text(out)
    else:  # check_app keeps this unreachable
        raise BadRequest(f"app must be one of {', '.join(APPS)}, not {app!r}")


class _runtime_conf:
    """Set runtime SQL settings for a block; put back the previous values (or unset) afterwards."""

    def __init__(self, spark: Any, settings: dict[str, str]) -> None:
        self.conf = spark.conf
        self.settings = settings
        self.previous: dict[str, str | None] = {}

    def __enter__(self) -> None:
        for key, value in self.settings.items():
            self.previous[key] = self.conf.get(key, None)  # None: not set, Spark's default applies
            self.conf.set(key, value)

    def __exit__(self, *exc: object) -> None:
        for key, value in self.previous.items():
            if value is None:
                self.conf.unset(key)
            else:
                self.conf.set(key, value)


class _job_group:
    """Run a block's jobs in a new job group of this thread; put the thread's previous group back after."""

    def __init__(self, context: Any, app: str) -> None:
        self.context = context
        self.group = f"kittiwake-mapreduce-{app}-{uuid.uuid4().hex}"
        self.previous: dict[str, str | None] = {}

    def __enter__(self) -> str:
        self.previous = {key: self.context.getLocalProperty(key) for key in _JOB_GROUP_PROPERTIES}
        self.context.setJobGroup(self.group, f"kittiwake mapreduce {self.group}")
        return self.group

    def __exit__(self, *exc: object) -> None:
        for key, value in self.previous.items():
            self.context.setLocalProperty(key, value)


def _tasks_of_group(context: Any, group: str) -> int | None:
    """The tasks run by the jobs of `group` (completed and failed, every stage once); None when unknown.

    Spark's status store is fed by its listener bus asynchronously: wait for the bus to drain first."""
    try:
        context._jsc.sc().listenerBus().waitUntilEmpty()
        tracker = context.statusTracker()
        job_ids = list(tracker.getJobIdsForGroup(group))
        if not job_ids:
            return None
        total = 0
        for stage_id in set(_stage_ids(tracker, job_ids)):
            stage = tracker.getStageInfo(stage_id)
            if stage is None:  # no longer retained
                return None
            total += stage.numCompletedTasks + stage.numFailedTasks
        return total
    except Exception:  # an internal API that moved: the count is a nicety, the run stands
        return None


def _stage_ids(tracker: Any, job_ids: list[int]) -> Iterator[int]:
    for job_id in job_ids:
        job = tracker.getJobInfo(job_id)
        if job is None:
            raise LookupError(f"job {job_id} is no longer retained")
        yield from job.stageIds


def _check_positive(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise BadRequest(f"{name} must be a positive integer, not {value!r}")

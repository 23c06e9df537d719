"""Spark steps: datasets in as DataFrames, DataFrames out as Parquet, one job at a time per thread.

`run_spark_job` is what a Spark worker's slot does with a prepared job:

* inputs: each token's dataset is read into a DataFrame (`read_dataset`:
  Parquet and plain paths with ``spark.read.parquet`` — with the schema the
  dataset carries, if any, so that no job runs to infer it — CSV with its options,
  text as one ``value`` column; an inline list of rows through
  ``createDataFrame``, any other inline value as it is). A merge input is
  ONE DataFrame: the union by column name of every part of the sequence
  (``unionByName(allowMissingColumns=True)``; Spark keeps no row order) —
  or, when every part is Parquet with the same schema (as a Spark step's
  outputs are) and Spark can read them together, one read of all their
  paths: one scan instead of one per part (`merge_parts`; not for a step
  that fuses through the cache, whose kept parts come from memory). A
  missing optional input is None.
* the function runs with the SparkSession first and the inputs by port
  name, inside a FAIR scheduler pool of the slot
  (``spark.scheduler.pool``) and a job group of its own (so a shutdown can
  cancel it) — on Spark Connect, an operation tag (`spark_sessions`);
* outputs: a DataFrame is written as Parquet to
  ``<data_dir>/<run>/<step>/<port>/<indices>/lease-<id>``, a folder of the
  attempt's own (`tokens.output_path`): an attempt that lost its lease and
  still writes (its worker stalled, then went on) never touches the folder
  that the token of the attempt that finished the job names; its token
  references it, schema included; a Dataset is passed on as it is; None and
  other values travel inline.

Fusion into the consumer's plan (`kittiwake.flow.plan_fusion`, for steps
declared with ``fuse="plan"``): such a step's job finishes with a recipe,
unrun, and a consumer builds the DataFrame from it inside its own job.
Fusion through the cache (`kittiwake.flow.fusion`, ``fuse="cache"``): given
the worker's `FusedOutputs`, an output DataFrame that a fusing Spark
consumer step reads is persisted and written from its cache, and kept; an
input this worker kept is read from memory rather than from its Parquet.
"""

from __future__ import annotations

from functools import reduce
from typing import Any, Callable

from kittiwake import errors
from kittiwake.flow.dataset import FUSED_KIND, SCHEMA_OPTION, Dataset, as_dataset
from kittiwake.flow.definition import FUSE_CACHE
from kittiwake.flow.fusion import FusedOutputs, fused_readers
from kittiwake.flow.jobs import PreparedJob, items_of
from kittiwake.flow.plan_fusion import PlanBuilder, deferred_items, defers
from kittiwake.flow.spark_sessions import enter_job, leave_job
from kittiwake.flow.tokens import item_keys, output_path


def read_dataset(spark: Any, dataset: Dataset) -> Any:
    """A DataFrame of `dataset` (see the module docstring); a fused one is built by the job that
    meets it (`run_spark_job`)."""
    if dataset.kind == FUSED_KIND:
        raise errors.BadRequest("a fused step output is built inside its consumer's Spark job, not read")
    if dataset.kind in ("parquet", "path"):
        schema = dataset.options.get(SCHEMA_OPTION)
        if schema is None:  # Spark runs a job to read a footer and infer the schema
            return spark.read.parquet(dataset.uri)
        return spark.read.schema(spark_schema(schema)).parquet(dataset.uri)
    if dataset.kind == "csv":
        return spark.read.options(**{key: str(value) for key, value in dataset.options.items()}).csv(dataset.uri)
    if dataset.kind == "text":
        return spark.read.text(dataset.uri)
    value = dataset.value
    if isinstance(value, list) and value and all(isinstance(row, dict) for row in value):
        return spark.createDataFrame(value)
    if isinstance(value, list) and not value:
        from pyspark.sql.types import StructType

        return spark.createDataFrame([], StructType([]))
    return value


def spark_schema(text: str) -> Any:
    """A schema a dataset carries, as `spark.read.schema` takes it: a StructType from its JSON,
    a DDL string as it is."""
    if text.lstrip().startswith("{"):
        import json

        from pyspark.sql.types import StructType

        return StructType.fromJson(json.loads(text))
    return text


def union(parts: list[Any]) -> Any:
    """One DataFrame of a merge's parts (None parts left out; None when all are)."""
    frames = [part for part in parts if part is not None]
    if not frames:
        return None
    if not all(_is_dataframe(frame) for frame in frames):
        raise errors.BadRequest("a merge input of a Spark step must be DataFrames (or rows) in every part")
    return reduce(lambda left, right: left.unionByName(right, allowMissingColumns=True), frames)


def merge_parts(spark: Any, datasets: list[Dataset], convert: Callable[[Dataset], Any]) -> Any:
    """A merge input's DataFrame: one Parquet read of every part when all are Parquet with one
    schema, else the `union` of each part through `convert`."""
    schemas = {dataset.options.get(SCHEMA_OPTION) for dataset in datasets}
    if len(datasets) > 1 and all(dataset.kind == "parquet" for dataset in datasets) and len(schemas) == 1:
        [schema] = schemas
    else:
        schema = None
    if isinstance(schema, str):
        try:
            return spark.read.schema(spark_schema(schema)).parquet(*[dataset.uri for dataset in datasets])
        except Exception:  # e.g. parts partitioned differently (Spark refuses to list them together)
            pass
    return union([convert(dataset) for dataset in datasets])


def _is_dataframe(value: Any) -> bool:
    return hasattr(value, "schema") and hasattr(value, "write")


def run_spark_job(spark: Any, prepared: PreparedJob, *, pool: str | None = None,
                  fused: FusedOutputs | None = None, plan: bool = True) -> list[dict[str, Dataset]]:
    """Run a prepared Spark job in this thread; returns its output items as datasets. With
    `fused`, inputs kept there are read from memory and outputs that fuse are kept there
    (`kittiwake.flow.fusion`). With `plan`, a job of a step fused into its consumers' plans
    finishes with its recipe, unrun (`kittiwake.flow.plan_fusion`); fused inputs are built
    into this job's plan whatever `plan` says (there is nothing else to read)."""
    step = prepared.step
    if plan and defers(prepared.flow, step):
        deferred = deferred_items(prepared)
        if deferred is not None:
            return deferred
    assert prepared.context is not None
    group = job_group(prepared)
    enter_job(spark, group, f"{step.name} {prepared.job.key}", pool)
    taken: list[str] = []
    builder = PlanBuilder(prepared.flow, prepared.context)

    def convert(dataset: Dataset) -> Any:
        if dataset.kind == FUSED_KIND:
            return builder.build(spark, dataset, convert, merge)
        if fused is not None and step.fuse == FUSE_CACHE:
            frame = fused.take(dataset, step.name)
            if frame is not None:
                taken.append(str(dataset.uri))
                return frame
        return read_dataset(spark, dataset)

    def merge(datasets: list[Dataset]) -> Any:
        if fused is not None and step.fuse == FUSE_CACHE:  # parts this worker kept come from memory
            return union([convert(dataset) for dataset in datasets])
        return merge_parts(spark, datasets, convert)

    try:
        arguments = prepared.arguments(convert, merge)
        value = prepared.call(spark, arguments)
        items = items_of(step, value)
        written: list[dict[str, Dataset]] = []
        keys = [indices for indices, _stack in item_keys(step, prepared.job, len(items))]
        for indices, item in zip(keys, items):
            out: dict[str, Dataset] = {}
            for port, data in item.items():
                if _is_dataframe(data):
                    path = output_path(prepared.context.data_dir, prepared.job.run, step.name, port, indices,
                                       lease=prepared.context.lease)
                    out[port] = write_output(data, path, fused, fused_readers(prepared.flow, step, port))
                else:
                    out[port] = as_dataset(data)
            written.append(out)
        builder.written()
        if builder.stale:
            prepared.unrecorded = f"built {', '.join(builder.stale)} with other code than its recipe names"
        if fused is not None and taken:
            fused.finished(taken, step.name)
        return written
    finally:
        leave_job(spark, group, pool)


def write_output(frame: Any, path: str, fused: FusedOutputs | None = None, readers: int = 0) -> Dataset:
    """Write `frame` as Parquet at `path` (mode overwrite) and return its dataset; with `fused`
    and readers, the frame is kept there for them (persisted, written from the cache)."""
    keep = fused is not None and readers > 0
    if keep:
        assert fused is not None
        frame = fused.keep(path, frame, readers)
    try:
        frame.write.mode("overwrite").parquet(path)
    except BaseException:
        if keep:
            assert fused is not None
            fused.drop(path)
        raise
    if keep:
        assert fused is not None
        fused.written(path)
    return Dataset.parquet(path, schema=frame.schema)


def job_group(prepared: PreparedJob) -> str:
    return f"kittiwake:{prepared.task.queue}/{prepared.task.pid}"

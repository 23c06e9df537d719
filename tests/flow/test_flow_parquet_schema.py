"""A Parquet dataset that carries its schema is read without the Spark job that infers one: the
hand-off between two Spark steps costs no job, and a step's DataFrame output carries its schema."""

from __future__ import annotations

from pathlib import Path

import pytest

from kittiwake.errors import BadRequest
from kittiwake.flow import Dataset
from kittiwake.flow.spark_steps import read_dataset


def jobs_run_by(spark: object, group: str, read: object) -> int:
    context = spark.sparkContext  # type: ignore[attr-defined]
    context.setJobGroup(group, group)
    try:
        read()  # type: ignore[operator]
    finally:
        context.setLocalProperty("spark.jobGroup.id", None)
    return len(context.statusTracker().getJobIdsForGroup(group))


def test_a_parquet_dataset_with_its_schema_is_read_without_a_job(spark_session: object, tmp_path: Path) -> None:
    spark = spark_session
    frame = spark.createDataFrame([{"region": "north", "amount": 3}, {"region": "south", "amount": 4}])  # type: ignore[attr-defined]
    path = str(tmp_path / "parts")
    frame.write.parquet(path)

    assert jobs_run_by(spark, "kittiwake-test-infer", lambda: read_dataset(spark, Dataset.parquet(path))) >= 1
    for schema in (frame.schema, frame.schema.json(), "amount BIGINT, region STRING"):
        carried = Dataset.parquet(path, schema=schema)
        assert Dataset.from_wire(carried.to_wire()) == carried  # plain data on the wire
        read: list[object] = []
        assert jobs_run_by(spark, f"kittiwake-test-{len(str(schema))}",
                           lambda: read.append(read_dataset(spark, carried))) == 0
        rows = sorted((row["region"], row["amount"]) for row in read[0].collect())  # type: ignore[attr-defined]
        assert rows == [("north", 3), ("south", 4)]


def test_a_schema_must_be_a_struct_type_json_or_ddl() -> None:
    with pytest.raises(BadRequest):
        Dataset.parquet("/data/parts", schema=42)
    with pytest.raises(BadRequest):
        Dataset.parquet("/data/parts", schema="  ")

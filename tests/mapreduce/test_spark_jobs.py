"""The Spark twins of the MapReduce apps: same results as the reference, one partition per file, conf restored."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kittiwake.errors import BadRequest
from kittiwake.mapreduce import gen_data, reference
from kittiwake.mapreduce.outputs import canonical_of_spark, is_globally_sorted
from kittiwake.mapreduce.spark_jobs import (
    ADAPTIVE_COALESCE,
    FILES_MAX_PARTITION_BYTES,
    FILES_OPEN_COST_BYTES,
    SHUFFLE_PARTITIONS,
    input_files,
    run_spark,
)

TEXT_PARTITION = 50_000
RECORDS_PARTITION = 20_000
SEED = 7


@pytest.fixture(scope="module")
def text_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("mr-text") / "in"
    gen_data.write(gen_data.plan(gen_data.TEXT, 300_000, TEXT_PARTITION, SEED), folder)
    return folder


@pytest.fixture(scope="module")
def records_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("mr-records") / "in"
    gen_data.write(gen_data.plan(gen_data.RECORDS, 200_000, RECORDS_PARTITION, SEED), folder)
    return folder


def test_wordcount_matches_the_reference_with_one_partition_per_file(spark_session, text_dir: Path, tmp_path: Path):
    files = input_files(text_dir)
    assert [path.name for path in files] == [f"part-{index:05d}.txt" for index in range(6)]
    # the files run a line past the nominal partition size: split at it, each would be two partitions
    assert all(path.stat().st_size > TEXT_PARTITION for path in files[:-1])

    run = run_spark(spark_session, "wordcount", text_dir, tmp_path / "out", partition_bytes=TEXT_PARTITION)

    assert run.partitions == run.input_files == 6
    assert run.input_bytes == sum(path.stat().st_size for path in files)
    assert run.max_partition_bytes == max(path.stat().st_size for path in files)
    assert run.tasks is not None and run.tasks >= run.partitions + 1  # the map tasks and at least one reducer
    assert run.seconds > 0 and run.output_files >= 1
    assert canonical_of_spark("wordcount", tmp_path / "out") == reference.reference("wordcount", files)


def test_grep_matches_the_reference_and_restores_the_session_conf(spark_session, text_dir: Path, tmp_path: Path):
    conf = spark_session.conf
    conf.set(SHUFFLE_PARTITIONS, "7")  # set before the run: put back after it
    assert conf.get(FILES_MAX_PARTITION_BYTES, None) is None  # unset before the run: unset after it
    pattern = gen_data.vocabulary(SEED)[3]  # a frequent word: matches many lines, not all
    try:
        run = run_spark(spark_session, "grep", text_dir, tmp_path / "out", partition_bytes=TEXT_PARTITION,
                        pattern=pattern, reducers=2)
        assert conf.get(SHUFFLE_PARTITIONS) == "7"
        assert conf.get(FILES_MAX_PARTITION_BYTES, None) is None
        assert conf.get(FILES_OPEN_COST_BYTES, None) is None
        assert spark_session.sparkContext.getLocalProperty("spark.jobGroup.id") is None
    finally:
        conf.unset(SHUFFLE_PARTITIONS)
    expected = reference.reference("grep", input_files(text_dir), pattern=pattern)
    manifest = json.loads((text_dir / gen_data.MANIFEST_NAME).read_text())
    assert 0 < expected.lines < sum(entry["lines"] for entry in manifest["files"])
    assert run.partitions == 6
    assert canonical_of_spark("grep", tmp_path / "out") == expected


def test_sort_is_globally_sorted_and_matches_the_reference(spark_session, records_dir: Path, tmp_path: Path):
    run = run_spark(spark_session, "sort", records_dir, tmp_path / "out", partition_bytes=RECORDS_PARTITION,
                    reducers=3, coalesce_reducers=False)
    assert run.partitions == run.input_files == 10
    assert run.output_files == 3  # not coalesced: the order is checked across files
    assert spark_session.conf.get(ADAPTIVE_COALESCE, None) is None
    assert run.input_bytes == 200_000
    canonical = canonical_of_spark("sort", tmp_path / "out")
    assert canonical.lines == 2_000
    assert canonical == reference.reference("sort", input_files(records_dir))
    assert is_globally_sorted(tmp_path / "out", "spark")


def test_bad_arguments_are_refused_before_any_job(spark_session, text_dir: Path, tmp_path: Path):
    out = tmp_path / "out"
    cases = [
        (dict(app="join"), "app must be one of"),
        (dict(input_dir=tmp_path / "missing"), "does not exist"),
        (dict(input_dir=tmp_path), "no part-\\* files"),
        (dict(out_dir=tmp_path), "already exists"),
        (dict(app="grep"), "non-empty str pattern"),
        (dict(pattern="x"), "only grep takes a pattern"),
        (dict(partition_bytes=0), "partition_bytes must be a positive integer"),
        (dict(partition_bytes=-5), "partition_bytes must be a positive integer"),
        (dict(reducers=0), "reducers must be a positive integer"),
        (dict(coalesce_reducers="no"), "coalesce_reducers must be True or False"),
        (dict(spark=None), "SparkSession"),
    ]
    for change, message in cases:
        arguments = dict(spark=spark_session, app="wordcount", input_dir=text_dir, out_dir=out,
                         partition_bytes=TEXT_PARTITION)
        arguments.update(change)
        with pytest.raises(BadRequest, match=message):
            run_spark(**arguments)
    assert not out.exists()

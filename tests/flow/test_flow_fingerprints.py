"""Fingerprints of datasets, steps and jobs (pure functions over files in a temporary folder)."""

from __future__ import annotations

import os
from pathlib import Path

from kittiwake.flow import Dataset, Flow
from kittiwake.flow.fingerprints import dataset_fingerprint, job_fingerprint, step_version


def test_a_folder_fingerprint_changes_with_any_file_under_it(tmp_path: Path) -> None:
    folder = tmp_path / "parts"
    (folder / "sub").mkdir(parents=True)
    (folder / "a.csv").write_text("x\n1\n")
    (folder / "sub" / "b.csv").write_text("x\n2\n")
    dataset = Dataset.path(folder)
    first = dataset_fingerprint(dataset)
    assert first == dataset_fingerprint(Dataset.path(folder))
    (folder / "sub" / "b.csv").write_text("x\n3\n")  # same size: the modification time tells
    os.utime(folder / "sub" / "b.csv", ns=(1, 1))
    assert dataset_fingerprint(dataset) != first
    assert dataset_fingerprint(Dataset.csv(folder)) != dataset_fingerprint(dataset)  # kind and options count


def test_a_glob_has_no_fingerprint(tmp_path: Path) -> None:
    # a stat of the pattern itself failed and gave the same (empty) listing whatever the files it
    # matches held, so a run reused over a changed input
    (tmp_path / "a.csv").write_text("k,v\nx,1\n")
    for pattern in ("*.csv", "?.csv", "[ab].csv", "{a,b}.csv"):
        assert dataset_fingerprint(Dataset.csv(str(tmp_path / pattern))) is None, pattern


def test_files_under_a_linked_folder_count_and_a_link_cycle_ends(tmp_path: Path) -> None:
    real, folder = tmp_path / "real", tmp_path / "input"
    real.mkdir()
    folder.mkdir()
    (real / "day.csv").write_text("x\n1\n")
    (folder / "day1").symlink_to(real, target_is_directory=True)
    (real / "loop").symlink_to(folder, target_is_directory=True)  # input/day1/loop -> input
    first = dataset_fingerprint(Dataset.path(folder))
    (real / "day.csv").write_text("x\n22\n")
    assert dataset_fingerprint(Dataset.path(folder)) != first


def test_inline_values_are_their_own_fingerprint_and_remote_uris_have_none() -> None:
    assert dataset_fingerprint(Dataset.inline({"a": 1})) == dataset_fingerprint(Dataset.inline({"a": 1}))
    assert dataset_fingerprint(Dataset.inline({"a": 1})) != dataset_fingerprint(Dataset.inline({"a": 2}))
    assert dataset_fingerprint(Dataset.parquet("s3a://bucket/table")) is None
    assert job_fingerprint("v", [], {"in": ("required", [Dataset.parquet("s3a://bucket/table")])}) is None


def test_a_job_fingerprint_covers_version_indices_ports_and_order() -> None:
    one, two = Dataset.inline(1), Dataset.inline(2)
    base = job_fingerprint("v1", [0], {"parts": ("sequence", [one, two])})
    assert base == job_fingerprint("v1", [0], {"parts": ("sequence", [one, two])})
    assert base != job_fingerprint("v2", [0], {"parts": ("sequence", [one, two])})
    assert base != job_fingerprint("v1", [1], {"parts": ("sequence", [one, two])})
    assert base != job_fingerprint("v1", [0], {"parts": ("sequence", [two, one])})
    assert base != job_fingerprint("v1", [0], {"other": ("sequence", [one, two])})


def test_a_step_version_is_its_code_unless_declared() -> None:
    flow = Flow("versions")

    @flow.step(inputs={"x": flow.input("x")})
    def first(ctx, x):
        return x

    @flow.step(inputs={"x": flow.input("x")})
    def second(ctx, x):
        return [x]

    assert step_version(first.function) == step_version(first.function)
    assert step_version(first.function) != step_version(second.function)
    assert step_version(first.function, "2025-01") == "declared:2025-01"


def test_a_fused_outputs_fingerprint_is_its_producing_jobs(tmp_path: Path) -> None:
    """Kind ``fused`` (`plan_fusion`): the producer's version, indices and inputs, recursively — not
    the run or key that made the recipe."""
    part = tmp_path / "part.csv"
    part.write_text("x\n1\n")

    def fused(version: str = "v1", run_key: str = "run-a/0", inputs: Dataset | None = None) -> Dataset:
        source = inputs if inputs is not None else Dataset.csv(part)
        return Dataset("fused", None, {"step": "tidy", "port": "out", "version": version, "key": run_key,
                                       "indices": [0], "modes": {"part": "required"},
                                       "inputs": {"part": [source.to_wire()]}})

    first = dataset_fingerprint(fused())
    assert first is not None and first == dataset_fingerprint(fused(run_key="run-b/0"))
    assert dataset_fingerprint(fused(version="v2")) != first
    other = fused()
    assert dataset_fingerprint(Dataset("fused", None, {**other.value, "step": "other"})) != first  # another step
    chained = dataset_fingerprint(fused(inputs=fused()))
    part.write_text("x\n22\n")
    assert dataset_fingerprint(fused()) != first
    assert dataset_fingerprint(fused(inputs=fused())) != chained  # through a chain of fused steps
    assert dataset_fingerprint(fused(inputs=Dataset.parquet("s3a://bucket/t"))) is None
    assert dataset_fingerprint(Dataset("fused", None, "not a recipe")) is None

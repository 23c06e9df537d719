"""The inputs of `kittiwake bench mapreduce`: one gen-data dataset per kind and partition size, and samples.

A dataset lives in `<root>/<kind>-<size>-<partition size>-seed<seed>` (sizes in
bytes). Under a kept `--data-dir` a dataset whose `_manifest.json` names the
same kind, size, partition size and seed, and whose files are all there with
the sizes it lists, is used again; anything else in its place is written anew.
A sample is a directory of symbolic links to a dataset's first part files, so
a small job reads the same bytes as the measured one without a copy.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from kittiwake.errors import BadRequest
from kittiwake.mapreduce import gen_data
from kittiwake.mapreduce.driver import input_files

KIND_OF_APP = {"grep": gen_data.TEXT, "wordcount": gen_data.TEXT, "sort": gen_data.RECORDS}


@dataclass(frozen=True)
class Dataset:
    """One generated input: where, what, and its part files' total bytes."""

    kind: str
    partition_size_bytes: int
    path: Path
    partitions: int
    input_bytes: int
    reused: bool


def dataset_path(root: Path, plan: gen_data.Plan) -> Path:
    return root / f"{plan.kind}-{plan.size_bytes}-{plan.partition_size_bytes}-seed{plan.seed}"


def _manifest_matches(path: Path, plan: gen_data.Plan) -> dict | None:
    """The manifest of a complete dataset of `plan` at `path`, else None."""
    try:
        manifest = json.loads((path / gen_data.MANIFEST_NAME).read_text())
    except (OSError, ValueError):
        return None
    wanted = {"kind": plan.kind, "size_bytes": plan.size_bytes,
              "partition_size_bytes": plan.partition_size_bytes, "seed": plan.seed}
    if any(manifest.get(key) != value for key, value in wanted.items()):
        return None
    try:
        for entry in manifest["files"]:
            if (path / entry["name"]).stat().st_size != entry["bytes"]:
                return None
    except (OSError, KeyError, TypeError):
        return None
    return manifest


def ensure_dataset(root: Path, kind: str, size_bytes: int, partition_size_bytes: int, seed: int,
                   progress: Callable[[int, int], None] = lambda written, total: None) -> Dataset:
    """The dataset of these parameters under `root`: reused when complete, else (re)written.

    `progress` gets (bytes written, bytes to write)."""
    plan = gen_data.plan(kind, size_bytes, partition_size_bytes, seed)
    path = dataset_path(Path(root), plan)
    manifest = _manifest_matches(path, plan)
    reused = manifest is not None
    if manifest is None:
        if path.exists():
            shutil.rmtree(path)
        total = sum(plan.target_bytes(index) for index in range(plan.partitions))
        manifest = gen_data.write(plan, path, lambda written: progress(written, total))
    written = sum(entry["bytes"] for entry in manifest["files"])
    progress(written, written)
    return Dataset(kind, partition_size_bytes, path, manifest["partitions"], written, reused)


def make_sample(dataset: Dataset, out_dir: Path, max_bytes: int, min_files: int = 1) -> list[Path]:
    """Links in `out_dir` (new) to the dataset's first part files: at least `min_files`, then as many as
    keep the total within `max_bytes`; returns the linked files' real paths."""
    if max_bytes < 1 or min_files < 1:
        raise BadRequest("a sample needs a positive size and at least one file")
    files = input_files(dataset.path)
    chosen: list[Path] = []
    total = 0
    for path in files:
        size = path.stat().st_size
        if len(chosen) >= min_files and total + size > max_bytes:
            break
        chosen.append(path)
        total += size
    out_dir.mkdir(parents=True)
    for path in chosen:
        (out_dir / path.name).symlink_to(path.absolute())
    return chosen


def sample_source(datasets: list[Dataset], kind: str, at_least_bytes: int = 1_000_000) -> Dataset:
    """The dataset of `kind` a sample is taken from: the 1 MB one, else the smallest partitions of at
    least `at_least_bytes`, else the largest there is."""
    mine = sorted((dataset for dataset in datasets if dataset.kind == kind), key=lambda d: d.partition_size_bytes)
    if not mine:
        raise BadRequest(f"no {kind} dataset to sample")
    for dataset in mine:
        if dataset.partition_size_bytes >= at_least_bytes:
            return dataset
    return mine[-1]


def size_label(size: int) -> str:
    """`100KB`, `1MB`, `1.5GB`, `512B`: a byte size as the command takes it (decimal units)."""
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        raise BadRequest(f"a size is a number of bytes, not {size!r}")
    for unit, scale in (("GB", 10**9), ("MB", 10**6), ("KB", 10**3)):
        if size >= scale:
            return f"{size / scale:g}{unit}"
    return f"{size}B"

"""Fingerprints for reuse: of a step's code (its version), of a dataset, and of a job's inputs.

A job's fingerprint says "these inputs, this code": two jobs of one step with
the same fingerprint compute the same outputs when the step is deterministic,
so the second may take the first one's (`kittiwake.flow.reuse`). It is a
SHA-256 over:

* the step's version: the `version=` it declares, else a hash of its
  function's source code (`step_version`; the compiled code when the source
  cannot be read). Code the function calls is not part of it: declare a
  version when that changes;
* the job's sequence indices (a step may use its index);
* each input port, in name order, with its mode and the fingerprint of each
  of its tokens' datasets, in sequence order (`dataset_fingerprint`):

  - a file or folder on a local path (``parquet``, ``csv``, ``text``, ``path``
    kinds; ``file:`` URIs): its kind, path and options, and for every file
    under it, its relative path, size and modification time (ns). What is
    not seen: a file rewritten with the same size within one tick of the
    file system's clock, and anything the step reads that its tokens only
    name (a path inside an inline value);
  - an inline value: its kind and value (msgpack bytes);
  - the output of a step fused into its consumers' plans (kind ``fused``, never
    written): the fingerprint of the job that would have written it — its
    step's version, indices and inputs, recursively — with the step's name
    and the port;
  - a URI the worker cannot stat (``hdfs://``, ``s3a://``, ...), or a local
    path holding a glob's characters (``/in/*.csv``, ``{a,b}``: Spark reads
    the files they match, which a ``stat`` of the pattern does not see): None
    — the job has no fingerprint and always runs.

  Files under a folder are found through symbolic links to folders too (as
  Spark and Python read them), each folder once.

Chose stat over content hashes: a re-run should cost a ``stat`` per file, not
a read of every byte of its inputs; a step's outputs written once are not
rewritten, so a reused output keeps its fingerprint and its consumers hit too.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import os
from typing import Any, Callable, Mapping, Sequence

import msgspec

from kittiwake import errors
from kittiwake.flow.dataset import FUSED_KIND, URI_KINDS, Dataset

_encoder = msgspec.msgpack.Encoder(order="sorted")


@functools.lru_cache(maxsize=1024)
def step_version(function: Callable[..., Any], declared: str | None = None) -> str:
    """The declared version, else ``code:`` + a hash of the function's source (or compiled code);
    computed once per function and declaration."""
    if declared is not None:
        return f"declared:{declared}"
    target = inspect.unwrap(function)
    try:
        text = inspect.getsource(target).encode()
    except (OSError, TypeError):
        code = getattr(target, "__code__", None)
        text = repr((code.co_code, code.co_consts, code.co_names)).encode() if code is not None else repr(target).encode()
    return "code:" + hashlib.sha256(text).hexdigest()[:32]


def local_path_of(dataset: Dataset) -> str | None:
    """The dataset's local path, None when its URI is not a local one (or it is inline)."""
    uri = dataset.uri
    if uri is None:
        return None
    if uri.startswith("file://"):
        return uri[len("file://"):]
    if uri.startswith("file:"):
        return uri[len("file:"):]
    if "://" in uri:
        return None
    return uri


def dataset_fingerprint(dataset: Dataset) -> bytes | None:
    """What a dataset's fingerprint is made of (see the module docstring); None: it has none."""
    if dataset.kind == FUSED_KIND:
        return _fused_fingerprint(dataset.value)
    if dataset.kind not in URI_KINDS:
        return _encoder.encode(["inline", dataset.value])
    path = local_path_of(dataset)
    if path is None or any(char in path for char in GLOB_CHARS):
        return None
    return _encoder.encode([dataset.kind, path, dict(dataset.options), files_of(path)])


GLOB_CHARS = "*?[]{}"
"""Characters of the glob patterns Spark (Hadoop) expands in a path."""


def files_of(path: str) -> list[list[Any]]:
    """[[relative path, size, mtime ns], ...] of the file or every file under the folder `path`,
    sorted; [] when there is nothing there."""
    try:
        top = os.stat(path)
    except OSError:
        return []
    if not os.path.isdir(path):
        return [["", top.st_size, top.st_mtime_ns]]
    found: list[list[Any]] = []
    seen: set[tuple[int, int]] = set()  # folders walked, by (device, inode): a link cycle ends here
    for folder, dirs, files in os.walk(path, followlinks=True):
        try:
            here = os.stat(folder)
        except OSError:
            dirs.clear()
            continue
        if (here.st_dev, here.st_ino) in seen:
            dirs.clear()
            continue
        seen.add((here.st_dev, here.st_ino))
        dirs.sort()
        for name in sorted(files):
            full = os.path.join(folder, name)
            try:
                info = os.stat(full)
            except OSError:
                continue
            found.append([os.path.relpath(full, path), info.st_size, info.st_mtime_ns])
    return found


def job_fingerprint(version: str, indices: Sequence[int], ports: Mapping[str, tuple[str, Sequence[Dataset]]]) -> str | None:
    """The job's fingerprint (hex), from its step's version, its indices and port -> (mode,
    datasets in sequence order); None when a dataset has none."""
    digest = hashlib.sha256()
    digest.update(_encoder.encode([version, list(indices)]))
    for port in sorted(ports):
        mode, datasets = ports[port]
        digest.update(_encoder.encode([port, mode, len(datasets)]))
        for dataset in datasets:
            part = dataset_fingerprint(dataset)
            if part is None:
                return None
            digest.update(hashlib.sha256(part).digest())
    return digest.hexdigest()


def _fused_fingerprint(recipe: Any) -> bytes | None:
    """A fused output's fingerprint: its producing job's, from the recipe (`plan_fusion.recipe`)."""
    if not isinstance(recipe, Mapping):
        return None
    try:
        ports = {port: (mode, [Dataset.from_wire(raw) for raw in recipe["inputs"][port]])
                 for port, mode in recipe["modes"].items()}
        job = job_fingerprint(recipe["version"], recipe["indices"], ports)
    except (KeyError, TypeError, AttributeError, errors.BadRequest):
        return None
    return None if job is None else _encoder.encode(["fused", recipe.get("step"), recipe.get("port"), job])

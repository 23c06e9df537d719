"""Which reducer a key goes to: fixed word ranges for wordcount, sampled key ranges for sort.

Both partitioners cut the key space into contiguous ranges, one per reducer
(Albatross §5.4: intermediate results "spread over all of reducers based on
their key-ranges"), so reducer r's output sorts before reducer r+1's and the
part files, read in order, are globally sorted.

* `word_boundaries(reducers)`: the first byte of a word, cut evenly over the
  lowercase letters `a`–`z` (words before `a` go to the first reducer, after
  `z` to the last). Fixed, so every map agrees without a sampling pass; a
  corpus that is not lowercase ASCII stays correct but less balanced.
* `sample_splits(files, reducers)`: TeraSort's sampled range partitioner —
  the driver reads the first keys of evenly spaced input files and takes
  `reducers - 1` quantiles of their 8-byte big-endian prefix. Records whose
  prefix equals a split go to the reducer above it, consistently in every map.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from kittiwake.errors import BadRequest

RECORD_BYTES = 100
MAX_REDUCERS = 1024
SAMPLE_FILES = 100  # files read for the sample, evenly spaced over the input
SAMPLE_RECORDS_PER_FILE = 1_000


def validate_reducers(reducers: object) -> int:
    if not isinstance(reducers, int) or isinstance(reducers, bool) or not 1 <= reducers <= MAX_REDUCERS:
        raise BadRequest(f"reducers must be an integer from 1 to {MAX_REDUCERS}, got {reducers!r}")
    return reducers


def word_boundaries(reducers: int) -> list[bytes]:
    """`reducers - 1` one-byte boundaries over `a`–`z`: reducer r takes words from boundary r-1 (inclusive)
    to boundary r (exclusive)."""
    validate_reducers(reducers)
    return [bytes([ord("a") + 26 * k // reducers]) for k in range(1, reducers)]


def key_prefixes(records: np.ndarray) -> np.ndarray:
    """The first 8 bytes of each row of an (n, 100) uint8 array, as big-endian integers (uint64): their
    order is the order of the keys' first 8 bytes."""
    return np.ascontiguousarray(records[:, :8]).view(">u8").ravel().astype(np.uint64)


def sample_splits(files: Sequence[Path], reducers: int, *, sample_files: int = SAMPLE_FILES,
                  records_per_file: int = SAMPLE_RECORDS_PER_FILE) -> list[int]:
    """`reducers - 1` split points (8-byte key prefixes, ascending) from a sample of `files` of records."""
    validate_reducers(reducers)
    if not files:
        raise BadRequest("no input files to sample")
    if reducers == 1:
        return []
    count = min(len(files), sample_files)
    chosen = [files[i * len(files) // count] for i in range(count)]
    prefixes = []
    for path in chosen:
        with open(path, "rb") as handle:
            data = handle.read(records_per_file * RECORD_BYTES)
        whole = len(data) - len(data) % RECORD_BYTES
        if whole:
            prefixes.append(key_prefixes(np.frombuffer(data[:whole], dtype=np.uint8).reshape(-1, RECORD_BYTES)))
    if not prefixes:
        raise BadRequest("the input files hold no whole 100-byte record to sample")
    sample = np.sort(np.concatenate(prefixes))
    return [int(sample[k * len(sample) // reducers]) for k in range(1, reducers)]


def reducer_of_prefixes(prefixes: np.ndarray, splits: Sequence[int]) -> np.ndarray:
    """The reducer index of each key prefix: how many splits are at or below it."""
    return np.searchsorted(np.asarray(splits, dtype=np.uint64), prefixes, side="right")

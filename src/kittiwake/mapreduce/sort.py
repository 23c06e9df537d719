"""Sort (TeraSort): 100-byte records in the byte order of the whole record, globally.

Map (`map_block`): each record goes to the reducer of its key range
(`partitioners.reducer_of_prefixes` on the 8-byte key prefix against the
sampled splits); a stable numpy argsort groups the block's records by
reducer and each group is one segment, as raw records.

Reduce (`reduce`): the reducer's records are sorted with numpy (`argsort` of
the key's first 8 bytes as big-endian integers); records sharing those — rare
with random keys — are ordered by their whole bytes, so the output order is
exactly bytewise record order (what Spark's ``orderBy("value")`` gives). The
sorted records are gathered into one reused 10 MB buffer a chunk at a time
(`np.take`): on this VM first touching fresh memory costs more than the sort. Reducer r's range lies below
reducer r+1's: the part files in order are the sorted dataset.
"""

from __future__ import annotations

from typing import Iterable, Iterator

import numpy as np

from kittiwake.errors import BadRequest
from kittiwake.mapreduce.partitioners import RECORD_BYTES, key_prefixes, reducer_of_prefixes
from kittiwake.mapreduce.spec import JobSpec

UNIT = RECORD_BYTES  # blocks are cut at whole records
WHOLE_INPUT = True  # the reducer sorts its input as one buffer: gathered so (`tasks`)
OUTPUT_SUFFIX = ".bin"
_WRITE_RECORDS = 100_000  # records per output chunk (10 MB)


def as_records(data: bytes | memoryview) -> np.ndarray:
    if len(data) % RECORD_BYTES:
        raise BadRequest(f"sort input must be whole {RECORD_BYTES}-byte records; {len(data)} bytes is not")
    return np.frombuffer(data, dtype=np.uint8).reshape(-1, RECORD_BYTES)


def map_block(block: bytes, spec: JobSpec) -> list[bytes]:
    """One segment per reducer: the block's records of that reducer's key range."""
    records = as_records(block)
    if not len(records):
        return [b""] * spec.reducers
    owners = reducer_of_prefixes(key_prefixes(records), spec.splits)
    grouped = np.take(records, np.argsort(owners, kind="stable"), axis=0)
    bounds = np.concatenate(([0], np.cumsum(np.bincount(owners, minlength=spec.reducers))))
    return [grouped[bounds[r]:bounds[r + 1]].tobytes() for r in range(spec.reducers)]


def sorted_order(records: np.ndarray) -> np.ndarray:
    """The permutation that puts `records` in bytewise order: by the key's first 8 bytes, then, for
    the rare records sharing them, by the whole record."""
    prefixes = key_prefixes(records)
    order = np.argsort(prefixes)
    ordered = prefixes[order]
    ties = np.flatnonzero(ordered[1:] == ordered[:-1])
    if len(ties):
        starts = ties[np.concatenate(([True], np.diff(ties) > 1))]
        ends = ties[np.concatenate((np.diff(ties) > 1, [True]))] + 2
        for start, end in zip(starts, ends):
            order[start:end] = sorted(order[start:end], key=lambda row: records[row].tobytes())
    return order


def reduce(segments: Iterable[bytes | memoryview], spec: JobSpec) -> Iterator[memoryview]:
    """This reducer's records, sorted, in chunks of one reused buffer (each chunk is valid until the
    next is asked for: write it before that). One segment is used as it is (`tasks` hands the
    reducer its whole input so, `intermediate.gather_segments`); several are joined."""
    parts = list(segments)
    data = parts[0] if len(parts) == 1 else b"".join(parts)
    if not len(data):
        return
    records = as_records(data)
    order = sorted_order(records)
    chunk = np.empty((min(_WRITE_RECORDS, len(records)), RECORD_BYTES), dtype=np.uint8)
    for start in range(0, len(order), _WRITE_RECORDS):
        rows = order[start:start + _WRITE_RECORDS]
        np.take(records, rows, axis=0, out=chunk[:len(rows)])
        yield chunk[:len(rows)].data.cast("B")

"""Sort (TeraSort): 100-byte records in the byte order of the whole record, globally.

Map (`map_block`): each record goes to the reducer of its key range
(`partitioners.reducer_of_prefixes` on the 8-byte key prefix against the
sampled splits); a stable numpy argsort groups the block's records by
reducer and each group is one segment, as raw records.

Reduce (`reduce`): the reducer's records are sorted by key with numpy
(`lexsort` on the key's first 8 and next 2 bytes as big-endian integers);
records with equal 10-byte keys — rare with random keys — are ordered by
their whole bytes, so the output order is exactly bytewise record order
(what Spark's ``orderBy("value")`` gives). Reducer r's range lies below
reducer r+1's: the part files in order are the sorted dataset.
"""

from __future__ import annotations

from typing import Iterable, Iterator

import numpy as np

from kittiwake.errors import BadRequest
from kittiwake.mapreduce.partitioners import RECORD_BYTES, key_prefixes, reducer_of_prefixes
from kittiwake.mapreduce.spec import JobSpec

UNIT = RECORD_BYTES  # blocks are cut at whole records
OUTPUT_SUFFIX = ".bin"
_WRITE_RECORDS = 100_000  # records per output chunk (10 MB)


def as_records(data: bytes) -> np.ndarray:
    if len(data) % RECORD_BYTES:
        raise BadRequest(f"sort input must be whole {RECORD_BYTES}-byte records; {len(data)} bytes is not")
    return np.frombuffer(data, dtype=np.uint8).reshape(-1, RECORD_BYTES)


def map_block(block: bytes, spec: JobSpec) -> list[bytes]:
    """One segment per reducer: the block's records of that reducer's key range."""
    records = as_records(block)
    if not len(records):
        return [b""] * spec.reducers
    owners = reducer_of_prefixes(key_prefixes(records), spec.splits)
    grouped = records[np.argsort(owners, kind="stable")]
    bounds = np.concatenate(([0], np.cumsum(np.bincount(owners, minlength=spec.reducers))))
    return [grouped[bounds[r]:bounds[r + 1]].tobytes() for r in range(spec.reducers)]


def sorted_order(records: np.ndarray) -> np.ndarray:
    """The permutation that puts `records` in bytewise order."""
    high = key_prefixes(records)
    low = np.ascontiguousarray(records[:, 8:10]).view(">u2").ravel()
    order = np.lexsort((low, high))
    same = (high[order][1:] == high[order][:-1]) & (low[order][1:] == low[order][:-1])
    if same.any():  # equal 10-byte keys: order each run by the whole record
        order = order.copy()
        ties = np.flatnonzero(same)
        run_start = ties[0]
        for previous, current in zip(ties, [*ties[1:], None]):
            if current is not None and current == previous + 1:
                continue
            run = slice(run_start, previous + 2)
            order[run] = sorted(order[run], key=lambda row: records[row].tobytes())
            if current is not None:
                run_start = current
    return order


def reduce(segments: Iterable[bytes], spec: JobSpec) -> Iterator[bytes]:
    """This reducer's records, sorted, in chunks."""
    data = b"".join(segments)
    if not data:
        return
    records = as_records(data)
    ordered = records[sorted_order(records)]
    for start in range(0, len(ordered), _WRITE_RECORDS):
        yield ordered[start:start + _WRITE_RECORDS].tobytes()

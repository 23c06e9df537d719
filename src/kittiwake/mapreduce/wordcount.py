"""Word count: how often each word occurs, as `word<TAB>count` lines sorted by word.

Words are what Spark's ``split(value, " ")`` makes of each line: the pieces
between single spaces, empty ones included; lines end at ``\\n``.

Map (`map_block`): the block's words become one Arrow binary array without a
copy — every `\\n` turned into a space, then each word is the bytes up to and
including the space after it — and Arrow's hash kernel counts them
(`value_counts`, C++, the GIL released). The counts are cut into the fixed
word ranges of `partitioners.word_boundaries` and each range is written as an
Arrow IPC stream: the map-side combine keeps a map's output to its distinct
words (a few KB to a few hundred KB).

Reduce (`reduce`): the segments of every map are concatenated and summed per
word (Arrow's hash aggregation), sorted, and written as text.
"""

from __future__ import annotations

from typing import Iterable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kittiwake.mapreduce.partitioners import word_boundaries
from kittiwake.mapreduce.spec import JobSpec

UNIT = b"\n"  # blocks are cut after a line break
OUTPUT_SUFFIX = ".txt"
_SCHEMA = pa.schema([("word", pa.large_binary()), ("count", pa.int64())])
_LINES_PER_CHUNK = 65_536


def count_words(block: bytes) -> pa.Table:
    """word (with its trailing space) → count for one block of whole lines."""
    if not block:
        return _SCHEMA.empty_table()
    spaced = block.replace(b"\n", b" ")
    if not spaced.endswith(b" "):
        spaced += b" "
    ends = np.flatnonzero(np.frombuffer(spaced, dtype=np.uint8) == 0x20) + 1
    offsets = np.zeros(len(ends) + 1, dtype=np.int64)
    offsets[1:] = ends
    words = pa.LargeBinaryArray.from_buffers(
        pa.large_binary(), len(ends), [None, pa.py_buffer(offsets), pa.py_buffer(spaced)]
    )
    counted = pc.value_counts(words)
    return pa.Table.from_arrays([counted.field(0), counted.field(1)], schema=_SCHEMA)


def _ipc(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, _SCHEMA) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def map_block(block: bytes, spec: JobSpec) -> list[bytes]:
    """One IPC segment per reducer (empty bytes for a reducer with no word in this block)."""
    counts = count_words(block)
    if counts.num_rows == 0:
        return [b""] * spec.reducers
    words = counts.column("word")
    segments = []
    bounds: list[bytes | None] = [None, *word_boundaries(spec.reducers), None]
    for low, high in zip(bounds, bounds[1:]):
        mask = None
        if low is not None:
            mask = pc.greater_equal(words, pa.scalar(low, pa.large_binary()))
        if high is not None:
            below = pc.less(words, pa.scalar(high, pa.large_binary()))
            mask = below if mask is None else pc.and_(mask, below)
        part = counts if mask is None else counts.filter(mask)
        segments.append(_ipc(part) if part.num_rows else b"")
    return segments


def reduce(segments: Iterable[bytes], spec: JobSpec) -> Iterator[bytes]:
    """`word<TAB>count` lines, sorted by word, for every word in `segments`."""
    tables = [pa.ipc.open_stream(segment).read_all() for segment in segments]
    if not tables:
        return
    summed = pa.concat_tables(tables).group_by("word").aggregate([("count", "sum")]).sort_by("word")
    words = pc.binary_slice(summed.column("word"), 0, -1).to_pylist()  # drop the trailing space
    counts = summed.column("count_sum").to_pylist()
    for start in range(0, len(words), _LINES_PER_CHUNK):
        yield b"".join(
            b"%s\t%d\n" % (word, count)
            for word, count in zip(words[start:start + _LINES_PER_CHUNK], counts[start:start + _LINES_PER_CHUNK])
        )

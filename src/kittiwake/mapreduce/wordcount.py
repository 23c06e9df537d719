"""Word count: how often each word occurs, as `word<TAB>count` lines sorted by word.

Words are what Spark's ``split(value, " ")`` makes of each line: the pieces
between single spaces, empty ones included; lines end at ``\\n``, a ``\\r``
before it is not part of the line (Spark's line reader, and `reference`), and
a last line without ``\\n`` counts, its last word too (``"x y "`` holds
``x``, ``y`` and an empty word).

Map (`map_block`): the block's words become one Arrow binary array without a
copy — every `\\n` turned into a space, then each word is the bytes up to and
including the space after it — and Arrow's hash kernel counts them
(`value_counts`, C++, the GIL released). The counts are cut into the fixed
word ranges of `partitioners.word_boundaries` by each word's first byte, with
numpy: a lookup table gives each word its reducer, a radix sort of those
one-byte owners groups them, and one gather copies the words' bytes in that
order (Arrow's `take` of the counted table cost more than the grouping it
did: 1.5 of a map's 6.5 ms per MB). Each group is one *run* of raw buffers:
row count and data length (two little-endian int64), each word's length
(int64), the words' bytes, the counts (int64). The map-side combine keeps a
map's output to its distinct words (a few KB to a few hundred KB).

Reduce (`reduce`): the segments of every map are joined into one Arrow table
with a few numpy steps per segment (`decode_segments`), summed per word
(Arrow's hash aggregation), sorted, and written as text.
"""

from __future__ import annotations

import functools
import struct
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
_HEADER = struct.Struct("<qq")


def count_words(block: bytes) -> pa.Table:
    """word (with its trailing space) → count for one block of whole lines."""
    if not block:
        return _SCHEMA.empty_table()
    if b"\r" in block:  # memchr; a CRLF line ends before its \r (blocks never cut a \r\n)
        block = block.replace(b"\r\n", b"\n")
    spaced = block.replace(b"\n", b" ")
    if not block.endswith(b"\n"):  # a last line without \n: its last word, even an empty one, ends here
        spaced += b" "
    ends = np.flatnonzero(np.frombuffer(spaced, dtype=np.uint8) == 0x20) + 1
    offsets = np.zeros(len(ends) + 1, dtype=np.int64)
    offsets[1:] = ends
    words = pa.LargeBinaryArray.from_buffers(
        pa.large_binary(), len(ends), [None, pa.py_buffer(offsets), pa.py_buffer(spaced)]
    )
    counted = pc.value_counts(words)
    return pa.Table.from_arrays([counted.field(0), counted.field(1)], schema=_SCHEMA)


def decode_segments(segments: Iterable[bytes]) -> pa.Table:
    """Every row of `segments` — each one or more runs (the module docstring), back to back —
    as one table: slices per run, the arrays built once for all."""
    lengths, data, numbers = [], [], []
    for segment in segments:
        view = memoryview(segment)
        at = 0
        while at < len(view):  # a map of several blocks appends a run per block to one segment
            rows, size = _HEADER.unpack_from(view, at)
            words_at = at + _HEADER.size + 8 * rows
            lengths.append(view[at + _HEADER.size:words_at])
            data.append(view[words_at:words_at + size])
            at = words_at + size + 8 * rows
            numbers.append(view[words_at + size:at])
    if not lengths:
        return _SCHEMA.empty_table()
    word_lengths = np.frombuffer(b"".join(lengths), dtype=np.int64)
    offsets = np.zeros(len(word_lengths) + 1, dtype=np.int64)
    np.cumsum(word_lengths, out=offsets[1:])
    words = pa.LargeBinaryArray.from_buffers(
        pa.large_binary(), len(word_lengths), [None, pa.py_buffer(offsets), pa.py_buffer(b"".join(data))]
    )
    counts = pa.array(np.frombuffer(b"".join(numbers), dtype=np.int64))
    return pa.Table.from_arrays([words, counts], schema=_SCHEMA)


def map_block(block: bytes, spec: JobSpec) -> list[bytes]:
    """One segment per reducer (empty bytes for a reducer with no word in this block): the block's
    counts grouped by reducer with numpy, each group a run of `decode_segments`' format."""
    counts = count_words(block)
    if counts.num_rows == 0:
        return [b""] * spec.reducers
    words = counts.column("word").chunk(0)
    rows = len(words)
    offsets = np.frombuffer(words.buffers()[1], dtype=np.int64, count=rows + 1, offset=words.offset * 8)
    data = np.frombuffer(words.buffers()[2], dtype=np.uint8)
    values = counts.column("count").chunk(0)
    numbers = np.frombuffer(values.buffers()[1], dtype=np.int64, count=rows, offset=values.offset * 8)
    starts = offsets[:-1]
    owners = _owner_of_first_byte(spec.reducers)[data[starts]]  # every word has its space, so a first byte
    order = np.argsort(owners, kind="stable")  # one-byte keys: a radix sort
    starts, lengths, numbers = starts[order], np.diff(offsets)[order], numbers[order]
    ends = np.cumsum(lengths)
    gathered = data[_ranges(starts, lengths, ends)]
    bounds = np.concatenate(([0], np.cumsum(np.bincount(owners, minlength=spec.reducers))))
    segments = []
    for reducer in range(spec.reducers):
        first, last = int(bounds[reducer]), int(bounds[reducer + 1])
        if first == last:
            segments.append(b"")
            continue
        begin, end = (int(ends[first - 1]) if first else 0), int(ends[last - 1])
        segments.append(b"".join((_HEADER.pack(last - first, end - begin), lengths[first:last].tobytes(),
                                  gathered[begin:end].tobytes(), numbers[first:last].tobytes())))
    return segments


@functools.lru_cache(maxsize=64)
def _owner_of_first_byte(reducers: int) -> np.ndarray:
    """Reducer of a word by its first byte (`partitioners.word_boundaries`), for every byte value."""
    boundaries = np.frombuffer(b"".join(word_boundaries(reducers)), dtype=np.uint8)
    return np.searchsorted(boundaries, np.arange(256), side="right").astype(np.uint8 if reducers <= 256 else np.int64)


def _ranges(starts: np.ndarray, lengths: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """The indices of the byte ranges [start, start + length), one after the other (`ends` = the
    cumulative lengths): a step of one within a range, a jump between ranges. Every length must be
    over 0 (a word always holds its space), or two jumps would land on one index."""
    steps = np.ones(int(ends[-1]), dtype=np.int64)
    steps[0] = starts[0]
    steps[ends[:-1]] = starts[1:] - (starts[:-1] + lengths[:-1] - 1)
    return np.cumsum(steps)


def reduce(segments: Iterable[bytes], spec: JobSpec) -> Iterator[bytes]:
    """`word<TAB>count` lines, sorted by word, for every word in `segments`."""
    table = decode_segments(segments)
    if table.num_rows == 0:
        return
    summed = table.group_by("word").aggregate([("count", "sum")]).sort_by("word")
    words = pc.binary_slice(summed.column("word"), 0, -1).to_pylist()  # drop the trailing space
    counts = summed.column("count_sum").to_pylist()
    for start in range(0, len(words), _LINES_PER_CHUNK):
        yield b"".join(
            b"%s\t%d\n" % (word, count)
            for word, count in zip(words[start:start + _LINES_PER_CHUNK], counts[start:start + _LINES_PER_CHUNK])
        )

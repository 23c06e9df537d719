"""Grep: the lines that contain a literal pattern, in input order.

Map (`map_block`): `bytes.find` walks the block from match to match (C
speed; a line with several matches is taken once) and keeps each matching
line with its `\\n` (a CRLF line without its `\\r`, as Spark's line reader and
`reference` read lines). Each map's matches go to one reducer only
(`JobSpec.reducer_of_map`: contiguous ranges of maps), which concatenates its
maps' matches in map order (Albatross §5.4: "the intermediate result of each
map task only moves to a certain reducer").
"""

from __future__ import annotations

from typing import Iterable, Iterator

from kittiwake.mapreduce.spec import JobSpec

UNIT = b"\n"
OUTPUT_SUFFIX = ".txt"


def matching_lines(block: bytes, pattern: bytes) -> bytes:
    """Every line of `block` that contains `pattern`, each ending in `\\n`: a CRLF line without its
    `\\r` (a pattern holds no `\\r`, so that cannot change which lines match); a last line without
    `\\n` keeps a `\\r` it ends with, as `reference` reads it."""
    found = []
    last = b""
    start = 0
    while True:
        at = block.find(pattern, start)
        if at < 0:
            break
        line_start = block.rfind(b"\n", 0, at) + 1
        line_end = block.find(b"\n", at)
        if line_end < 0:
            last = block[line_start:] + b"\n"
            break
        found.append(block[line_start:line_end + 1])
        start = line_end + 1
    lines = b"".join(found)
    if b"\r" in lines:  # memchr over the matches only
        lines = lines.replace(b"\r\n", b"\n")
    return lines + last if last else lines


def map_block(block: bytes, spec: JobSpec) -> list[bytes]:
    """A single segment: the block's matching lines."""
    return [matching_lines(block, spec.pattern)]


def reduce(segments: Iterable[bytes], spec: JobSpec) -> Iterator[bytes]:
    """The maps' matches, concatenated in the order given."""
    yield from segments

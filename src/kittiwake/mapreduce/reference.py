"""The MapReduce apps in one process of plain Python: the expected output every system is checked against.

Owns what each app computes, stated as simply as possible, over a list of
input files read a line at a time (a line ends at `\\n`; the `\\n`, and a `\\r`
before it, are not part of it — as Spark's line reader sees the gen-data
inputs):

* `wordcount`: per line, `line.split(b" ")` counted with a `Counter` (Spark's
  `split(value, " ")` per line); the output lines are `word\\tcount`.
* `grep`: the lines containing the pattern (bytes; a str is UTF-8 encoded).
* `sort`: every record (a line without its `\\r\\n`) sorted by bytes.

Each returns the `Canonical` of its output (`kittiwake.mapreduce.outputs`),
computed by the same function that reads the systems' outputs. Sort holds every
record in memory: it is meant for inputs of tens of megabytes, not gigabytes.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Iterator, Sequence

from kittiwake.errors import BadRequest
from kittiwake.mapreduce.outputs import GREP, SORT, WORDCOUNT, Canonical, canonical_of_app_lines, check_app


def reference(app: str, files: Sequence[str | Path], pattern: str | bytes | None = None) -> Canonical:
    """The Canonical of `app` over `files`; `pattern` is grep's (and only grep's) argument."""
    check_app(app)
    paths = _check_files(files)
    if app == GREP:
        return grep(paths, _check_pattern(pattern))
    if pattern is not None:
        raise BadRequest(f"only grep takes a pattern, not {app}")
    return wordcount(paths) if app == WORDCOUNT else sort(paths)


def wordcount(files: Sequence[str | Path]) -> Canonical:
    """How often each space-separated word occurs, as the multiset of `word\\tcount` lines."""
    counts: Counter[bytes] = Counter()
    for line in input_lines(_check_files(files)):
        counts.update(line.split(b" "))
    return canonical_of_app_lines(WORDCOUNT, (b"%s\t%d" % (word, count) for word, count in counts.items()))


def grep(files: Sequence[str | Path], pattern: str | bytes) -> Canonical:
    """The lines holding `pattern`, as a multiset."""
    needle = _check_pattern(pattern)
    return canonical_of_app_lines(GREP, (line for line in input_lines(_check_files(files)) if needle in line))


def sort(files: Sequence[str | Path]) -> Canonical:
    """Every record, in byte order."""
    return canonical_of_app_lines(SORT, sorted(input_lines(_check_files(files))))


def input_lines(files: Sequence[Path]) -> Iterator[bytes]:
    """The lines of `files` in order, without `\\n` or `\\r\\n`; a last line without `\\n` counts."""
    for path in files:
        with open(path, "rb") as file:
            for line in file:
                if line.endswith(b"\n"):
                    line = line[:-2] if line.endswith(b"\r\n") else line[:-1]
                yield line


def _check_files(files: Sequence[str | Path]) -> list[Path]:
    if isinstance(files, (str, bytes, Path)):
        raise BadRequest("files must be a list of paths, not a single path")
    paths = [Path(file) for file in files]
    if not paths:
        raise BadRequest("files must name at least one input file")
    for path in paths:
        if not path.is_file():
            raise BadRequest(f"input file {path} does not exist or is not a file")
    return paths


def _check_pattern(pattern: str | bytes | None) -> bytes:
    if isinstance(pattern, str):
        pattern = pattern.encode("utf-8")
    if not isinstance(pattern, bytes) or not pattern:
        raise BadRequest(f"grep needs a non-empty pattern (str or bytes), not {pattern!r}")
    if b"\n" in pattern:
        raise BadRequest("a grep pattern cannot hold a line end")
    return pattern

"""The canonical form of a MapReduce app's output, the one thing compared across systems.

Owns how an output directory is read (which files, in which order, which line
ending) and what of it is compared. A `Canonical` is a line count and the
SHA-256 of the lines, each followed by `\\n`, in an order that depends on the app:

* `wordcount`: the `word\\tcount` lines sorted by bytes (a multiset: which
  reducer wrote a word differs between systems);
* `grep`: the matching lines sorted by bytes (a multiset, for the same reason);
* `sort`: the records in file order, NOT re-sorted: the order is what is being
  checked; each record without its line ending.

`canonical_of_lines` is the one function that feeds lines into the hash; the
plain-Python reference (`kittiwake.mapreduce.reference`) computes its Canonical
with it too, so identical results give identical Canonicals.

Two output layouts are read, in part-file name order, ignoring `_SUCCESS`,
`.crc` and hidden files:

* `native` (Kittiwake's apps): `part-r-00000.txt`, … for wordcount and grep
  (lines ending `\\n`); `part-r-00000.bin`, … for sort (100-byte records ending
  `\\r\\n`).
* `spark`: `part-00000-<uuid>-c000.csv` for wordcount (tab-separated) and
  `part-00000-<uuid>-c000.txt` for grep and sort, lines ending `\\n` (sort
  records are the 98 bytes without `\\r\\n`).

Files are read a line at a time, so a 1 GB sort output is hashed, and its order
checked (`is_globally_sorted`, or both in one pass: `sort_output_check`), in
bounded memory (about 9 s a GB); wordcount and grep outputs are small enough to
sort in memory.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator

from kittiwake.errors import BadRequest
from kittiwake.mapreduce.spec import GREP, SORT, WORDCOUNT, validate_app

NATIVE = "native"
SPARK = "spark"
STYLES = (NATIVE, SPARK)
_SUFFIXES = {
    (NATIVE, WORDCOUNT): ".txt",
    (NATIVE, GREP): ".txt",
    (NATIVE, SORT): ".bin",
    (SPARK, WORDCOUNT): ".csv",
    (SPARK, GREP): ".txt",
    (SPARK, SORT): ".txt",
}


@dataclass(frozen=True)
class Canonical:
    """An output as compared: how many lines, and the SHA-256 (hex) of each line followed by `\\n`."""

    lines: int
    sha256: str


def canonical_of_lines(lines: Iterable[bytes]) -> Canonical:
    """The Canonical of `lines` (bytes without their line ending) in the order given."""
    digest = hashlib.sha256()
    count = 0
    for line in lines:
        digest.update(line)
        digest.update(b"\n")
        count += 1
    return Canonical(count, digest.hexdigest())


def canonical_of_app_lines(app: str, lines: Iterable[bytes]) -> Canonical:
    """The Canonical of `app`'s output `lines`: sorted first for wordcount and grep, as given for sort."""
    check_app(app)
    if app == SORT:
        return canonical_of_lines(lines)
    return canonical_of_lines(sorted(lines))


def canonical_of_spark(app: str, out_dir: str | Path) -> Canonical:
    """The Canonical of the output Spark wrote for `app` into `out_dir`."""
    return canonical_of_app_lines(app, output_lines(app, out_dir, SPARK))


def canonical_of_native(app: str, out_dir: str | Path) -> Canonical:
    """The Canonical of the output Kittiwake's app `app` wrote into `out_dir`."""
    return canonical_of_app_lines(app, output_lines(app, out_dir, NATIVE))


def is_globally_sorted(app_out_dir: str | Path, style: str) -> bool:
    """Whether a sort output (`style` native or spark) holds its records in non-decreasing byte order
    across all its part files, read in name order."""
    previous = None
    for record in output_lines(SORT, app_out_dir, style):
        if previous is not None and record < previous:
            return False
        previous = record
    return True


def sort_output_check(app_out_dir: str | Path, style: str) -> tuple[Canonical, bool]:
    """A sort output's Canonical and whether it is globally sorted, in one pass over it."""
    previous: bytes | None = None
    in_order = True

    def watched(records: Iterator[bytes]) -> Iterator[bytes]:
        nonlocal previous, in_order
        for record in records:
            if in_order and previous is not None and record < previous:
                in_order = False
            previous = record
            yield record

    canonical = canonical_of_lines(watched(output_lines(SORT, app_out_dir, style)))
    return canonical, in_order


def part_files(out_dir: str | Path, app: str, style: str) -> list[Path]:
    """The part files of an output directory in name order, checked to carry `app`'s suffix in `style`.

    `_SUCCESS`, `.crc` and hidden files are skipped; any other file is an error."""
    check_app(app)
    check_style(style)
    folder = Path(out_dir)
    if not folder.is_dir():
        raise BadRequest(f"output directory {folder} does not exist or is not a directory")
    suffix = _SUFFIXES[(style, app)]
    files = []
    for path in sorted(folder.iterdir(), key=lambda path: path.name):
        name = path.name
        if name.startswith((".", "_")) or name.endswith(".crc"):
            continue
        if not path.is_file() or not name.startswith("part-") or not name.endswith(suffix):
            raise BadRequest(f"{path} is not a {style} {app} part file (part-*{suffix})")
        files.append(path)
    return files


def output_lines(app: str, out_dir: str | Path, style: str) -> Iterator[bytes]:
    """The lines of an output directory, file by file in name order, without their line endings."""
    ending = b"\r\n" if (style, app) == (NATIVE, SORT) else b"\n"
    for path in part_files(out_dir, app, style):
        yield from _file_lines(path, ending)


def _file_lines(path: Path, ending: bytes) -> Iterator[bytes]:
    """The lines of `path`, each of which must end with `ending`, without it."""
    with open(path, "rb") as file:
        for number, line in enumerate(file, start=1):
            if not line.endswith(ending):
                raise ValueError(f"{path} line {number} does not end with {ending!r}")
            yield line[: -len(ending)]


def check_app(app: str) -> None:
    validate_app(app)


def check_style(style: str) -> None:
    if style not in STYLES:
        raise BadRequest(f"output style must be one of {', '.join(STYLES)}, not {style!r}")

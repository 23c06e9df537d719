"""A map task's intermediate output: kept in memory, spilled to disk past a threshold, and where it lives.

A map task adds byte segments for each reducer (`MapOutput.add`). They stay
in the process's memory until the buffered bytes pass `spill_bytes`; then the
buffer is written to one spill file on disk (`spill_dir`) and emptied. When
the map ends (`finish`) what is left goes to one file in `memory_dir` — on
Linux a directory of ``/dev/shm``, memory that another process of the same
machine can read — if nothing spilled, or to a last spill file otherwise
(Albatross §5.4: "unless the size of the output exceeds the available memory
limit, the worker writes the intermediate results to the memory").

Every file is written under a name of its own (the map index and a random
suffix, so two deliveries of one map never share a file) and renamed into
place complete; `finish` returns the `Location` — each file's path and the
(offset, length) of every reducer's segment in it — only once every file is
in place. The map task records that location in the broker, so a map killed
at any point leaves at most unreferenced files, never a half-written one that
a reducer could read. A reducer reads its segments with `read_segments`, or
all of them at once into one buffer with `gather_segments` (each read straight
into its place: no joining copy, for a reducer that needs its input whole).

Intermediate files are read by path: reducers on another machine need the
directories on a shared file system (the driver removes them when the job
ends).
"""

from __future__ import annotations

import builtins
import os
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field

import msgspec
import numpy as np
from pathlib import Path
from typing import Iterator

from kittiwake.errors import BadRequest


class SegmentFile(msgspec.Struct, frozen=True, array_like=True):
    """One intermediate file: its path and, per reducer, the (offset, length) of that reducer's bytes."""

    path: str
    segments: tuple[tuple[int, int], ...]


class Location(msgspec.Struct, frozen=True, array_like=True):
    """Where a map's output lives: its files in the order written (spills first)."""

    files: tuple[SegmentFile, ...]
    spilled: int = 0  # how many of the files went to disk because the buffer was full
    bytes: int = 0  # in this class's body, `bytes` is this field: the type is `builtins.bytes`

    def encode(self) -> builtins.bytes:
        """The location as compact JSON (arrays, not maps: a reducer decodes one per map)."""
        return _ENCODER.encode(self)

    @classmethod
    def decode(cls, data: builtins.bytes) -> Location:
        try:
            return _DECODER.decode(data)
        except msgspec.DecodeError as error:
            raise BadRequest(f"not an intermediate location: {error}") from None


_ENCODER = msgspec.json.Encoder()
_DECODER = msgspec.json.Decoder(Location)


@dataclass
class MapOutput:
    """The output of one map task for `reducers` reducers, buffered then spilled (see the module)."""

    name: str  # the file name stem, e.g. "map-00042"
    reducers: int
    memory_dir: Path
    spill_dir: Path
    spill_bytes: int
    make_dirs: bool = True  # False: the directories must exist (a map task's: the job's, made by its driver)
    _buffers: list[list[bytes]] = field(init=False)
    _buffered: int = field(init=False, default=0)
    _files: list[SegmentFile] = field(init=False, default_factory=list)
    _total: int = field(init=False, default=0)
    _spilled: int = field(init=False, default=0)
    _token: str = field(init=False, default_factory=lambda: uuid.uuid4().hex[:12])

    def __post_init__(self) -> None:
        if self.reducers < 1:
            raise BadRequest("a map output needs at least one reducer")
        if self.spill_bytes < 1:
            raise BadRequest("spill_bytes must be at least 1")
        self._buffers = [[] for _ in range(self.reducers)]

    def add(self, reducer: int, data: bytes) -> None:
        """Append `data` to reducer `reducer`'s segment; spills when the buffer passes `spill_bytes`."""
        if not 0 <= reducer < self.reducers:
            raise BadRequest(f"reducer {reducer} out of range 0..{self.reducers - 1}")
        if not data:
            return
        self._buffers[reducer].append(data)
        self._buffered += len(data)
        if self._buffered > self.spill_bytes:
            self._write(self.spill_dir, spill=True)

    def finish(self) -> Location:
        """Write what is buffered (to memory if nothing spilled) and say where everything is."""
        if self._buffered or not self._files:
            self._write(self.spill_dir if self._files else self.memory_dir, spill=bool(self._files))
        return Location(tuple(self._files), self._spilled, self._total)

    def discard(self) -> None:
        """Remove every file this output wrote, and its directories if that leaves them empty."""
        for file in self._files:
            Path(file.path).unlink(missing_ok=True)
        for directory in (self.memory_dir, self.spill_dir):
            try:
                directory.rmdir()
            except OSError:  # not empty (another map's files), or not there
                pass
        self._files = []

    def _write(self, directory: Path, *, spill: bool) -> None:
        if self.make_dirs:
            directory.mkdir(parents=True, exist_ok=True)
        elif not directory.is_dir():
            raise BadRequest(f"intermediate directory {directory} is gone (its job ended)")
        path = directory / f"{self.name}-{self._token}-{len(self._files)}.seg"
        partial = path.with_name(path.name + ".partial")
        segments = []
        offset = 0
        with open(partial, "wb") as handle:
            for chunks in self._buffers:
                length = 0
                for chunk in chunks:
                    handle.write(chunk)
                    length += len(chunk)
                segments.append((offset, length))
                offset += length
        os.replace(partial, path)
        self._files.append(SegmentFile(str(path), tuple(segments)))
        self._total += offset
        self._buffers = [[] for _ in range(self.reducers)]
        self._buffered = 0
        self._spilled += spill


def read_segments(location: Location, reducer: int) -> Iterator[bytes]:
    """Reducer `reducer`'s non-empty segments of one map's output, in the order they were written."""
    for file in location.files:
        offset, length = _segment(file, reducer)
        if length:
            with open(file.path, "rb") as handle:
                handle.seek(offset)
                data = handle.read(length)
            if len(data) != length:
                raise BadRequest(f"{file.path} is shorter than its location says")
            yield data


def _segment(file: SegmentFile, reducer: int) -> tuple[int, int]:
    """(offset, length) of reducer `reducer`'s segment in `file`."""
    if reducer >= len(file.segments):
        raise BadRequest(f"{file.path} has no segment for reducer {reducer}")
    return file.segments[reducer]


def gather_segments(locations: Iterable[Location], reducer: int) -> memoryview:
    """Reducer `reducer`'s segments of every map output, in order, read into one buffer: its size
    summed from the locations first, then each segment read straight into its place."""
    wanted: list[tuple[str, int, int]] = []
    for location in locations:
        for file in location.files:
            offset, length = _segment(file, reducer)
            if length:
                wanted.append((file.path, offset, length))
    buffer = np.empty(sum(length for _, _, length in wanted), dtype=np.uint8).data.cast("B")  # not zeroed
    at = 0
    for path, offset, length in wanted:
        with open(path, "rb", buffering=0) as handle:
            handle.seek(offset)
            got = 0
            while got < length:  # a raw read may return less than asked
                read = handle.readinto(buffer[at + got:at + length])
                if not read:
                    raise BadRequest(f"{path} is shorter than its location says")
                got += read
        at += length
    return buffer

"""Input data of the MapReduce apps: a word corpus or TeraSort records, in partition files, from a seed.

Owns the layout of the generated input and how it is drawn; `kittiwake gen-data`
is its command.

* `text`: lines of 10–20 words separated by one space, ending in `\\n`. The
  words come from a vocabulary of 50,000 distinct lowercase words of 2–12
  letters drawn from the seed; the word of rank r (1-based, in drawing order)
  has probability proportional to 1 / r**1.1 (Zipf). Files `part-NNNNN.txt`,
  each holding whole lines: lines are added until the file reaches its target
  size, so a file is at most one line longer than its target.
* `records`: the 100-byte ASCII records of gensort (the TeraSort input
  generator): a 10-byte key of printable ASCII (space to `~`), two spaces, the
  record number as 32 hex digits, two spaces, 52 filler bytes (the record
  number's 13 low nibbles as letters `A`–`P`, each four times), `\\r\\n`.
  Files `part-NNNNN.bin`, each a whole number of records.

A dataset of `size` bytes in partitions of `partition_size` bytes has
ceil(size / partition_size) partitions (for records: whole records of each,
the last partition taking what is left).

Determinism: partition i draws from `random.Random` seeded with the seed and i
(and the vocabulary from the seed alone), so a partition can be generated on
its own, in any order or in parallel, and the same kind, sizes and seed give
byte-identical files. numpy only turns those random bytes into words and
records (searchsorted, arithmetic), so the output depends on Python's Mersenne
Twister, not on numpy's generators.

`_manifest.json` beside the files, written last, says what is there.
"""

from __future__ import annotations

import functools
import json
import math
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import numpy as np

from kittiwake.errors import BadRequest

TEXT = "text"
RECORDS = "records"
KINDS = (TEXT, RECORDS)
VOCABULARY_WORDS = 50_000
WORD_LETTERS = (2, 12)
ZIPF_EXPONENT = 1.1
LINE_WORDS = (10, 20)
RECORD_BYTES = 100
KEY_BYTES = 10
MANIFEST_NAME = "_manifest.json"
MIN_PARTITION_BYTES = RECORD_BYTES  # a partition holds at least one record or one line
BLOCK_WORDS = 131_072  # words drawn at a time: about 1 MB of text, bounded memory, a smooth progress bar
BLOCK_RECORDS = 10_000  # records drawn at a time: 1 MB
_LETTERS = "abcdefghijklmnopqrstuvwxyz"
_HEX = np.frombuffer(b"0123456789ABCDEF", dtype=np.uint8)
_FILLER = np.frombuffer(b"ABCDEFGHIJKLMNOP", dtype=np.uint8)


@dataclass(frozen=True)
class Plan:
    """What to generate: kind, total and per-partition size in bytes, seed; validated by `plan`."""

    kind: str
    size_bytes: int
    partition_size_bytes: int
    seed: int

    @property
    def partitions(self) -> int:
        if self.kind == RECORDS:
            return math.ceil(self.total_records / self.records_per_partition)
        return math.ceil(self.size_bytes / self.partition_size_bytes)

    @property
    def total_records(self) -> int:
        return self.size_bytes // RECORD_BYTES

    @property
    def records_per_partition(self) -> int:
        return self.partition_size_bytes // RECORD_BYTES

    def file_name(self, index: int) -> str:
        return f"part-{index:05d}.{'txt' if self.kind == TEXT else 'bin'}"

    def target_bytes(self, index: int) -> int:
        """The size partition `index` aims at: text files reach it and stop after the line that does."""
        self._check_index(index)
        if self.kind == RECORDS:
            return self.records_in(index) * RECORD_BYTES
        return min(self.partition_size_bytes, self.size_bytes - index * self.partition_size_bytes)

    def records_in(self, index: int) -> int:
        self._check_index(index)
        first = index * self.records_per_partition
        return min(self.records_per_partition, self.total_records - first)

    def _check_index(self, index: int) -> None:
        if not 0 <= index < self.partitions:
            raise BadRequest(f"partition index must be within 0..{self.partitions - 1}, not {index}")


def plan(kind: str, size_bytes: int, partition_size_bytes: int, seed: int) -> Plan:
    """A validated `Plan`; BadRequest names the argument that is wrong."""
    if kind not in KINDS:
        raise BadRequest(f"kind must be one of {', '.join(KINDS)}, not {kind!r}")
    for name, value in (("size", size_bytes), ("partition size", partition_size_bytes), ("seed", seed)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise BadRequest(f"{name} must be an integer, not {value!r}")
    if partition_size_bytes < MIN_PARTITION_BYTES:
        raise BadRequest(f"the partition size must be at least {MIN_PARTITION_BYTES} bytes, not {partition_size_bytes}")
    if partition_size_bytes > size_bytes:
        raise BadRequest(f"the partition size ({partition_size_bytes} bytes) must not exceed the size "
                         f"({size_bytes} bytes)")
    return Plan(kind, size_bytes, partition_size_bytes, seed)


def _partition_random(kind: str, seed: int, index: int) -> random.Random:
    # A string seed (hashed with SHA-512 by `random`) keeps (seed, index) pairs apart: with
    # `seed + index`, partition 1 of seed 0 would be partition 0 of seed 1.
    return random.Random(f"kittiwake gen-data {kind} seed={seed} partition={index}")


def _scaled(rng: random.Random, count: int, bound: int) -> np.ndarray:
    """`count` integers in [0, bound) from 16 random bits each (bias under bound / 65536)."""
    bits = np.frombuffer(rng.randbytes(2 * count), dtype="<u2").astype(np.uint32)
    return (bits * bound) >> 16


@functools.lru_cache(maxsize=4)
def vocabulary(seed: int) -> tuple[str, ...]:
    """The `VOCABULARY_WORDS` distinct words of `seed`, most frequent first."""
    rng = random.Random(f"kittiwake gen-data vocabulary seed={seed}")
    words: dict[str, None] = {}
    while len(words) < VOCABULARY_WORDS:
        words["".join(rng.choices(_LETTERS, k=rng.randint(*WORD_LETTERS)))] = None
    return tuple(words)


@functools.lru_cache(maxsize=4)
def _text_tables(seed: int) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Per word: itself followed by a space (index r) or a line end (index r + V); their lengths;
    and the Zipf distribution's cumulative probabilities by rank."""
    words = vocabulary(seed)
    table = [word + " " for word in words] + [word + "\n" for word in words]
    lengths = np.array([len(entry) for entry in table], dtype=np.int64)
    weights = 1.0 / np.arange(1, len(words) + 1, dtype=np.float64) ** ZIPF_EXPONENT
    cumulative = np.cumsum(weights) / weights.sum()
    cumulative[-1] = 1.0
    return table, lengths, cumulative


def text_chunks(seed: int, index: int, target_bytes: int) -> Iterator[bytes]:
    """The bytes of text partition `index`: whole lines until `target_bytes` is reached."""
    if target_bytes < 1:
        raise BadRequest(f"target bytes must be positive, not {target_bytes}")
    table, lengths, cumulative = _text_tables(seed)
    vocabulary_size = len(table) // 2
    rng = _partition_random(TEXT, seed, index)
    low, high = LINE_WORDS
    remaining = target_bytes
    while remaining > 0:
        # Words are 8 bytes on average with their separator: draw a little more than `remaining`
        # needs, so a small partition costs no full block.
        block_words = min(BLOCK_WORDS, remaining // 6 + 2 * high)
        uniforms = (np.frombuffer(rng.randbytes(8 * block_words), dtype="<u8") >> 11) * 2.0**-53
        ranks = np.searchsorted(cumulative, uniforms, side="right")
        line_words = low + _scaled(rng, block_words // low, high - low + 1)
        line_ends = np.cumsum(line_words)
        line_ends = line_ends[line_ends <= block_words]
        ranks = ranks[: line_ends[-1]]
        ranks[line_ends - 1] += vocabulary_size
        line_end_offsets = np.cumsum(lengths[ranks])[line_ends - 1]
        last_line = int(np.searchsorted(line_end_offsets, remaining, side="left"))
        if last_line < len(line_ends):
            ranks = ranks[: line_ends[last_line]]
        chunk = "".join([table[rank] for rank in ranks.tolist()]).encode("ascii")
        remaining -= len(chunk)
        yield chunk


def record_chunks(seed: int, index: int, first_record: int, records: int) -> Iterator[bytes]:
    """The bytes of records partition `index`: `records` records numbered from `first_record`."""
    if first_record < 0 or records < 0:
        raise BadRequest(f"first record and record count must not be negative, not {first_record}, {records}")
    rng = _partition_random(RECORDS, seed, index)
    hex_shifts = np.arange(15, -1, -1, dtype=np.uint64) * np.uint64(4)
    filler_shifts = np.arange(12, -1, -1, dtype=np.uint64) * np.uint64(4)
    done = 0
    while done < records:
        count = min(BLOCK_RECORDS, records - done)
        numbers = np.arange(first_record + done, first_record + done + count, dtype=np.uint64)[:, None]
        block = np.empty((count, RECORD_BYTES), dtype=np.uint8)
        block[:, :KEY_BYTES] = (32 + _scaled(rng, count * KEY_BYTES, 95)).reshape(count, KEY_BYTES)
        block[:, 10:12] = ord(" ")
        block[:, 12:28] = ord("0")  # the high 64 bits of gensort's 128-bit record number
        block[:, 28:44] = _HEX[(numbers >> hex_shifts) & np.uint64(15)]
        block[:, 44:46] = ord(" ")
        block[:, 46:98] = np.repeat(_FILLER[(numbers >> filler_shifts) & np.uint64(15)], 4, axis=1)
        block[:, 98] = ord("\r")
        block[:, 99] = ord("\n")
        done += count
        yield block.tobytes()


def partition_chunks(plan: Plan, index: int) -> Iterator[bytes]:
    """The bytes of partition `index` of `plan`, a block at a time."""
    if plan.kind == TEXT:
        return text_chunks(plan.seed, index, plan.target_bytes(index))
    return record_chunks(plan.seed, index, index * plan.records_per_partition, plan.records_in(index))


def partition_bytes(plan: Plan, index: int) -> bytes:
    """The whole of partition `index` of `plan`."""
    return b"".join(partition_chunks(plan, index))


def write(plan: Plan, out_dir: str | Path, progress: Callable[[int], None] = lambda written: None) -> dict:
    """Write every partition of `plan` and `_manifest.json` into `out_dir` (new or empty); return the manifest.

    `progress` is called with the bytes written so far after each block."""
    out = Path(out_dir)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise BadRequest(f"{out} must be a new or empty directory")
    out.mkdir(parents=True, exist_ok=True)
    files = []
    written = 0
    for index in range(plan.partitions):
        name = plan.file_name(index)
        file_bytes = lines = 0
        with open(out / name, "wb") as file:
            for chunk in partition_chunks(plan, index):
                file.write(chunk)
                file_bytes += len(chunk)
                lines += chunk.count(b"\n")
                written += len(chunk)
                progress(written)
        entry: dict[str, int | str] = {"name": name, "bytes": file_bytes}
        if plan.kind == TEXT:
            entry["lines"] = lines
        else:
            entry["first_record"] = index * plan.records_per_partition
            entry["records"] = plan.records_in(index)
        files.append(entry)
    manifest: dict = {
        "kind": plan.kind,
        "seed": plan.seed,
        "size_bytes": plan.size_bytes,
        "partition_size_bytes": plan.partition_size_bytes,
        "partitions": plan.partitions,
        "bytes_written": written,
        "files": files,
    }
    if plan.kind == TEXT:
        manifest.update(vocabulary_words=VOCABULARY_WORDS, zipf_exponent=ZIPF_EXPONENT, line_words=list(LINE_WORDS))
    else:
        manifest.update(record_bytes=RECORD_BYTES, records=plan.total_records)
    (out / MANIFEST_NAME).write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest

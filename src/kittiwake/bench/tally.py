"""The null task every system of `kittiwake bench peers` runs, its payload, and the tally it leaves.

Every system runs the same function body, `null_task(payload)`: it takes the
1 KB payload (`make_payload`), does nothing with it, and returns nothing. To count what ran
and when, without a second broker on the path, it appends one record of 24
bytes — its start and end, `time.time()` as two little-endian doubles, then
the process id and the thread's native id that ran it, two unsigned 32-bit
integers — to the tally file named by `$KITTIWAKE_BENCH_TALLY`, with one
`write` on a descriptor opened `O_APPEND`. An append of a few bytes is
atomic, so worker threads and forked worker processes (RQ forks one per
task) may share the file; the cost is one system call per task, the same for
every system and far below any broker's round trip. `sleep_task(seconds)`
(`kittiwake bench workers`) sleeps between its start and its end and leaves
the same record.

The benchmark reads the file from outside: its size says how many tasks ran
(`count`), its records when the first started and the last ended
(`span`), a new record's start is the moment a sampled task began
(`start_of`), and a record's process and thread name the worker slot that
ran it (`records`). Wall-clock time is the one clock every process shares.
"""

from __future__ import annotations

import os
import random
import string
import struct
import threading
import time
from pathlib import Path
from typing import NamedTuple

from kittiwake.bench.settings import DATA_BYTES

TALLY_ENV = "KITTIWAKE_BENCH_TALLY"
PAYLOAD_SEED = 1024
RECORD = struct.Struct("<ddII")  # started, ended (time.time()), process id, thread's native id


def make_payload(size: int = DATA_BYTES) -> str:
    """The task's argument: `size` ASCII characters (a str, so every serializer takes it as it is)."""
    rng = random.Random(PAYLOAD_SEED)
    return "".join(rng.choices(string.ascii_letters + string.digits, k=size))


class TaskRun(NamedTuple):
    """One task's record: when it started and ended, and the slot (process, thread) that ran it."""

    started: float
    ended: float
    pid: int
    thread: int

_descriptor: int | None = None
_descriptor_key: tuple[int, str] = (0, "")  # the process and the file it was opened for
_descriptor_lock = threading.Lock()  # threads of a worker count at once: one reopens, none writes meanwhile


def _new_lock_in_child() -> None:
    global _descriptor_lock
    _descriptor_lock = threading.Lock()  # a fork may copy the lock held by a thread the child lacks


os.register_at_fork(after_in_child=_new_lock_in_child)


def _tally_descriptor() -> int:
    """This process's descriptor of the tally file (a forked child, or a new file named in the
    environment, opens its own)."""
    global _descriptor, _descriptor_key
    path = os.environ.get(TALLY_ENV)
    if not path:
        raise RuntimeError(f"${TALLY_ENV} names no tally file")
    key = (os.getpid(), path)
    if _descriptor is None or _descriptor_key != key:
        if _descriptor is not None:  # this process's copy of the old file's descriptor
            os.close(_descriptor)
        _descriptor = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        _descriptor_key = key
    return _descriptor


def _append(started: float) -> None:
    record = RECORD.pack(started, time.time(), os.getpid(), threading.get_native_id())
    with _descriptor_lock:
        os.write(_tally_descriptor(), record)


def null_task(payload: str | bytes) -> None:
    """The benchmark's task: takes a payload, does nothing, returns nothing (and is counted)."""
    _append(time.time())


def sleep_task(seconds: float) -> None:
    """A task that sleeps `seconds` and is counted like the null task."""
    started = time.time()
    time.sleep(seconds)
    _append(started)


# ------------------------------------------------------------ the reading side


def count(path: Path) -> int:
    """How many tasks have run so far."""
    try:
        return os.stat(path).st_size // RECORD.size
    except FileNotFoundError:
        return 0


def records(path: Path, first: int = 0) -> list[TaskRun]:
    """The record of every task from record `first` on, in the order they ended."""
    try:
        with open(path, "rb") as tally:
            tally.seek(first * RECORD.size)
            data = tally.read()
    except FileNotFoundError:
        return []
    whole = len(data) // RECORD.size * RECORD.size
    return [TaskRun(*RECORD.unpack_from(data, offset)) for offset in range(0, whole, RECORD.size)]


def span(path: Path, first: int = 0) -> tuple[float, float] | None:
    """When the first of the tasks from record `first` on started and the last ended."""
    found = records(path, first)
    if not found:
        return None
    return min(run.started for run in found), max(run.ended for run in found)


def start_of(path: Path, index: int) -> float | None:
    """When task number `index` (0-based, in the order they ended) started; None before it ran."""
    found = records(path, index)
    return found[0].started if found else None

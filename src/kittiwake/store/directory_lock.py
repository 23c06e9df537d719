"""The lock that gives an SQLite data directory to one process at a time: a broker, a copy or a migrate.

A broker keeps its queues in memory and takes that for the truth, so two
brokers on one directory would lease the same tasks to different workers and
each finish them. Whoever opens the store through `location.open_store` first
takes `broker.lock` in the directory: `flock(LOCK_EX | LOCK_NB)` on that file,
held open for as long as the store is, with the holder's pid and role
("broker", "kittiwake copy" ...) written in it. A second opener is refused at
once with `DirectoryInUse` (code STORE_IN_USE) naming them, as PostgreSQL
refuses a second broker on a `brokers=one` schema (`postgres_presence`).

Why flock:

* The kernel drops the lock when the last descriptor of the open file closes,
  which every way a process ends does, SIGKILL and a power cut included: there
  is no stale lock to clean up, and a file left behind by a dead process blocks
  nobody (the next holder writes over what it says; a release empties it).
  So the file is never removed: removing it would race (an opener that opened the old file just
  before could lock it while a third locks the new one), and what it says
  matters only while it is locked.
* It belongs to the open file description, not to the process (unlike
  `fcntl`'s byte-range locks, which a second open in the same process would
  share and any close of the file would drop): two `Broker`s in one process
  are refused as two processes are.
* The descriptor is opened with O_CLOEXEC, so a program the holder runs does
  not inherit it and keep the directory locked after the holder is gone.
  (A fork without exec would share it; Kittiwake's child processes use
  `spawn`.)

Limits: the lock is advisory, so only Kittiwake's own openers take it (the
sqlite3 shell or a `cp` of the file are not stopped). Linux emulates flock on
NFS with byte-range locks: two processes are still told apart there, two
openers in one process are not. The file is created owner-only (0600), so
another local user cannot open it and hold the lock to keep the broker from
starting.
"""

from __future__ import annotations

import errno
import fcntl
import os
import time
from pathlib import Path
from types import TracebackType

from kittiwake.errors import StoreInUse

LOCK_FILE_NAME = "broker.lock"
BROKER = "broker"  # the role a serving broker writes; any other role is a tool's name
LOCK_FILE_MODE = 0o600
MAX_LOCK_FILE_BYTES = 4096  # what is read of a lock file someone else wrote
MAX_ROLE_CHARS = 64
READ_TRIES = 10  # the holder writes its pid just after it locks: an empty file is read again
READ_PAUSE_SECS = 0.005


class DirectoryInUse(StoreInUse, ValueError):
    """Another opener (another process, or another store in this one) holds the data directory's
    lock; `holder_pid` and `holder` are what it wrote, None where unreadable. A `ValueError` too, as
    `postgres_presence.BrokerConflict` is: the commands report a refused start
    as they report a bad argument, one line and exit status 1."""

    def __init__(self, directory: Path, holder_pid: int | None, holder: str | None) -> None:
        self.directory = directory
        self.holder_pid = holder_pid
        self.holder = holder
        self.pid_text = f"pid {holder_pid}" if holder_pid is not None else "pid unknown"
        if holder == BROKER:
            message = (f"data directory {directory} is served by another broker ({self.pid_text}): a data "
                       "directory has one broker; stop that one first, or give this one a directory of its own")
        else:
            message = (f"data directory {directory} is in use by {holder or 'another process'} ({self.pid_text}): "
                       "one process at a time opens a data directory; stop it first, or let it finish")
        super().__init__(message)


class DirectoryLock:
    """The lock of one data directory, held from `lock_directory` until `release` (or the process's end)."""

    def __init__(self, directory: Path, fd: int) -> None:
        self.directory = directory
        self._fd: int | None = fd

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        """Let the directory go; again is nothing. Never raises: a failing disk must not keep it locked."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            os.ftruncate(fd, 0)  # a pid read later would name a process that no longer holds it
        except OSError:
            pass
        try:
            fcntl.flock(fd, fcntl.LOCK_UN)  # closing alone would not, were the file shared by a fork
        except OSError:
            pass
        os.close(fd)

    def __enter__(self) -> DirectoryLock:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.release()


def lock_directory(directory: str | os.PathLike[str], holder: str) -> DirectoryLock:
    """Take the lock of the existing `directory` for this process as `holder` ("broker", "kittiwake copy" ...).

    Raises `DirectoryInUse` when another opener holds it, or OSError when the file cannot be
    opened or locked (a read-only directory)."""
    path = Path(os.path.abspath(directory))
    fd = os.open(path / LOCK_FILE_NAME, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, LOCK_FILE_MODE)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise
            raise DirectoryInUse(path, *_read_holder(fd)) from None
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n{_clean_role(holder)}\n".encode(), 0)
        except OSError:
            pass  # a full disk: the lock is what counts, a refused opener then reads "pid unknown"
    except BaseException:
        os.close(fd)  # drops the lock too, if it was taken
        raise
    return DirectoryLock(path, fd)


def _read_holder(fd: int) -> tuple[int | None, str | None]:
    """The pid and role the lock's holder wrote; None for what cannot be read as such."""
    text = ""
    for attempt in range(READ_TRIES):
        text = os.pread(fd, MAX_LOCK_FILE_BYTES, 0).decode(errors="replace")
        if text or attempt == READ_TRIES - 1:
            break
        time.sleep(READ_PAUSE_SECS)  # locked just now, its pid not written yet
    lines = text.splitlines()
    pid_text = lines[0].strip() if lines else ""
    pid = int(pid_text) if pid_text.isascii() and pid_text.isdecimal() else None
    role = _clean_role(lines[1]) if pid is not None and len(lines) > 1 else ""
    return pid, role or None


def _clean_role(role: str) -> str:
    """A role fit for one line of a message: printable, short."""
    return "".join(char for char in role if char.isprintable()).strip()[:MAX_ROLE_CHARS]

"""The commit log on disk: append a record and sync it, start a fresh log, read one back.

The I/O edge of `commit_log` (whose module says the format). One `LogFile`
per store, in its directory, named `commit.log`.

* `append(payload)` writes one record at the end and, with `sync`, fdatasyncs
  it: when it returns, the record survives a power cut; it returns the
  record's ticket. When the write or the sync fails, the file is cut back to
  where it ended before (and synced) so that the failed record can never be
  replayed; if even that fails, the log is `damaged`: every later append first
  tries the cut again and fails while it cannot, so nothing is appended after
  a record of unknown fate. What the caller is told about the failed record
  (`outcome_known`) follows: known (not applied) once the cut is synced.
* `start(first_ticket)` makes a new, empty log in place of the old one, whole
  or not at all: the header goes to a temporary name, is synced, renamed over
  `commit.log`, and the directory synced. Until that directory sync succeeds,
  appends refuse (a record synced into a file whose name a power cut could
  undo would be lost with it); the next `start` or append tries it again.
* `read(directory)` returns the `commit_log.Scan` of the log there, or None
  when there is none.

Faults: `fault(stage)` is called before each step ("write", "sync", "cut",
"start", "dir_sync"; the store adds "checkpoint") and may raise `OSError`; the broker passes nothing, tests inject
disk failures through it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

from kittiwake.store import commit_log

LOG_NAME = "commit.log"
_TEMPORARY = LOG_NAME + ".new"

FaultHook = Callable[[str], None]


def _no_fault(stage: str) -> None:
    return None


def read(directory: Path) -> commit_log.Scan | None:
    """The log in `directory` (records and torn tail), or None when there is none."""
    try:
        data = (directory / LOG_NAME).read_bytes()
    except FileNotFoundError:
        return None
    if not data:  # never written (a name made durable before its data cannot happen here, but be lenient)
        return None
    return commit_log.scan(data)


def remove(directory: Path, *, sync: bool) -> None:
    """Delete the log (once the store holds everything in it) and make the removal durable."""
    try:
        os.unlink(directory / LOG_NAME)
    except FileNotFoundError:
        return
    if sync:
        _sync_directory(directory)


def _sync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class LogFile:
    """The open commit log of one store directory."""

    def __init__(self, directory: Path, *, sync: bool = True, fault: FaultHook | None = None) -> None:
        self.directory = directory
        self.path = directory / LOG_NAME
        self.sync = sync
        self.fault = fault or _no_fault
        self._fd: int | None = None
        self.end = 0  # bytes of whole, synced records and header
        self.next_ticket = 1
        self.damaged = False  # a failed append could not be cut back
        self._directory_unsynced = False  # a new log's name may not be durable yet
        self.appends = 0

    @property
    def records(self) -> int:
        """Records appended since the last `start`."""
        return self.appends

    def start(self, first_ticket: int) -> None:
        """Replace the log with an empty one whose first record will carry `first_ticket`."""
        self.fault("start")
        temporary = self.directory / _TEMPORARY
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            header = commit_log.encode_header(first_ticket)
            _write_all(fd, header)
            if self.sync:
                os.fsync(fd)
            os.rename(temporary, self.path)
        except BaseException:
            os.close(fd)
            raise
        old, self._fd = self._fd, fd
        if old is not None:
            os.close(old)
        self.end = len(header)
        self.next_ticket = first_ticket
        self.damaged = False
        self.appends = 0
        self._directory_unsynced = self.sync
        self._sync_directory()

    def _sync_directory(self) -> None:
        if self._directory_unsynced:
            self.fault("dir_sync")
            _sync_directory(self.directory)
            self._directory_unsynced = False

    def append(self, payload: bytes) -> int:
        """Write one record and sync it; its ticket. Raises OSError, the log as it was before."""
        fd = self._fd
        if fd is None:
            raise OSError("the commit log is not open")
        if self.damaged:
            self._cut_back(fd)
        self._sync_directory()
        ticket = self.next_ticket
        record = commit_log.encode_record(ticket, payload)
        try:
            self.fault("write")
            os.lseek(fd, self.end, os.SEEK_SET)
            _write_all(fd, record)
            if self.sync:
                self.fault("sync")
                os.fdatasync(fd)
        except OSError:
            try:
                self._cut_back(fd)
            except OSError:
                pass  # damaged: the next append tries again first
            raise
        self.end += len(record)
        self.next_ticket = ticket + 1
        self.appends += 1
        return ticket

    def _cut_back(self, fd: int) -> None:
        """Drop whatever follows the last acknowledged record, durably."""
        self.damaged = True
        self.fault("cut")
        os.ftruncate(fd, self.end)
        if self.sync:
            os.fdatasync(fd)
        self.damaged = False

    def close(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]

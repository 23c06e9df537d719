"""What kind of storage failure an exception is: the disk is full, it failed, it is read-only, the file is damaged.

A store turns the errors of its own disk into `errors.StorageFailure` with
`storage_failure`, so that nothing above the stores knows which database
raised them. The broker treats every `StorageFailure` raised while reading or
committing the same way: it rolls back, rebuilds its engine from what is
durable and answers `UNAVAILABLE` (`kittiwake.broker.passes`). This module
names the failure, so that the reply, the log and the start-up error tell an
operator what to fix, and says whether a failed commit's outcome is known.

SQLite reports a failing disk as `sqlite3.OperationalError` (or
`DatabaseError` for a page it cannot make sense of) with a result code:
`SQLITE_FULL` for ENOSPC and EDQUOT, `SQLITE_IOERR_*` for EIO (on a write, an
fsync, a read...), `SQLITE_READONLY_*` for a read-only file. A read-only
directory shows at start as `SQLITE_CANTOPEN`, which says nothing of why:
`diagnose_directory` looks at the file system. The code is matched first; an
error built without one (a test's fault injector, an older driver) is matched
on SQLite's fixed message. A plain `OSError` is matched on its errno.
"""

from __future__ import annotations

import errno
import os
import sqlite3
from pathlib import Path

from kittiwake.errors import StorageFailure, StorageFault

__all__ = ["StorageFault", "classify", "diagnose_directory", "outcome_known", "storage_failure"]


# SQLite's primary result codes (the low byte of an extended code).
_BY_SQLITE_CODE = {
    sqlite3.SQLITE_FULL: StorageFault.FULL,
    sqlite3.SQLITE_IOERR: StorageFault.IO_ERROR,
    sqlite3.SQLITE_READONLY: StorageFault.READ_ONLY,
    sqlite3.SQLITE_PERM: StorageFault.READ_ONLY,
    sqlite3.SQLITE_CORRUPT: StorageFault.CORRUPT,
    sqlite3.SQLITE_NOTADB: StorageFault.CORRUPT,
}

# SQLite's messages for the same codes (sqlite3ErrStr), for errors that carry no code.
_BY_SQLITE_MESSAGE = (
    ("database or disk is full", StorageFault.FULL),
    ("disk i/o error", StorageFault.IO_ERROR),
    ("readonly database", StorageFault.READ_ONLY),
    ("access permission denied", StorageFault.READ_ONLY),
    ("database disk image is malformed", StorageFault.CORRUPT),
    ("file is not a database", StorageFault.CORRUPT),
)

_BY_ERRNO = {
    errno.ENOSPC: StorageFault.FULL,
    errno.EDQUOT: StorageFault.FULL,
    errno.EFBIG: StorageFault.FULL,
    errno.EIO: StorageFault.IO_ERROR,
    errno.EROFS: StorageFault.READ_ONLY,
    errno.EACCES: StorageFault.READ_ONLY,
    errno.EPERM: StorageFault.READ_ONLY,
}


def classify(error: BaseException) -> StorageFault | None:
    """The kind of storage failure `error` is, or None when it is not a storage error (a bug)."""
    if isinstance(error, sqlite3.Error):
        code = getattr(error, "sqlite_errorcode", None)
        if isinstance(code, int):
            fault = _BY_SQLITE_CODE.get(code & 0xFF)
            if fault is not None:
                return fault
        message = str(error).lower()
        for text, fault in _BY_SQLITE_MESSAGE:
            if text in message:
                return fault
        return StorageFault.OTHER
    if isinstance(error, OSError):
        return _BY_ERRNO.get(error.errno or 0, StorageFault.OTHER)
    return None


def outcome_known(fault: StorageFault | None) -> bool:
    """Whether a commit that failed this way certainly left nothing on disk.

    A full disk or a read-only file stops SQLite before it writes the commit
    record. An I/O error may come from the fsync after the whole transaction
    was written: the file may hold it (and a restart may find it) although the
    broker could not confirm it, so the outcome is unknown, as for a cut
    connection. Anything else raised by a commit is unknown too."""
    return fault in (StorageFault.FULL, StorageFault.READ_ONLY)


def storage_failure(error: BaseException, *, committing: bool = False) -> StorageFailure:
    """The `StorageFailure` a store raises for an error of its disk; `committing`: `commit()` raised it,
    so its outcome may be unknown (`outcome_known`). Raise it `from error`, keeping the cause."""
    fault = classify(error) or StorageFault.OTHER
    return StorageFailure(str(error), fault=fault, outcome_known=not committing or outcome_known(fault))


def diagnose_directory(directory: str | os.PathLike[str]) -> StorageFault | None:
    """What is visibly wrong with the file system of a data directory (or of its nearest existing
    parent, if it is not made yet): read-only, or no space left."""
    path = Path(directory).absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    try:
        stats = os.statvfs(path)
    except OSError:
        return None
    if stats.f_flag & os.ST_RDONLY:
        return StorageFault.READ_ONLY
    if stats.f_bavail == 0:
        return StorageFault.FULL
    return None

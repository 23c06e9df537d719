"""Making the data directory so that it outlives a power cut, not only the files in it.

Creating a directory writes a name into its parent, and on POSIX that name is
on disk only once the parent is fsynced (fsync(2): syncing a file does not sync
its entry in a directory). SQLite syncs the directory it makes its journal and
WAL files in, never that directory's parents. So a store that created its own
directory and acknowledged writes could lose the directory, and every
acknowledged task in it, at a power cut; a journaling file system that commits
metadata in order hides this, others need not.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path


def make_durable_directory(directory: str | os.PathLike[str]) -> Path:
    """Create `directory` and any missing parents, fsyncing each parent a name was made in, and the
    directory's own parent every time (a previous run may have made it and died before that sync).
    Returns the directory as an absolute path; raises FileExistsError if a file is in the way."""
    path = Path(os.path.abspath(directory))
    missing: list[Path] = []
    ancestor = path
    while not ancestor.exists():
        missing.append(ancestor)
        ancestor = ancestor.parent
    for new in reversed(missing):
        try:
            new.mkdir()
        except FileExistsError:
            pass  # made meanwhile by another process: its name still needs the sync below
        sync_directory(new.parent)
    if not path.is_dir():
        raise FileExistsError(errno.EEXIST, "not a directory", str(path))
    if not missing:
        sync_directory(path.parent)
    return path


def sync_directory(directory: Path) -> None:
    """fsync a directory, so the names made in it are on disk; a file system that cannot (EINVAL) is let be."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno != errno.EINVAL:
            raise
    finally:
        os.close(fd)

"""A lazy filesystem for power-loss tests: FUSE over a backing directory that keeps only what was synced.

Run as a process (`python -m support.lazyfs BACKING MOUNTPOINT`, with `tests/`
on the path; `support.lazy_mount.LazyMount` does it for tests). The backing
directory plays the disk: it holds exactly what would survive a power cut.
Everything else lives in this process's memory, as a page cache would:

* **File data.** Writes and truncations are held per file
  (`support.lazy_files.UnsyncedFile`) and seen by every reader through the
  mount; `fsync` or `fdatasync` of the file, through any of its handles,
  writes them to the backing file. Closing a file does not sync it.
* **Names.** Creating a file or directory, unlinking, renaming and removing a
  directory change the backing directory at once (so the mount shows them),
  and are journaled with how to undo them. An fsync of the parent directory
  makes them durable (a rename needs both parents synced); at a cut the ones
  not yet durable are undone, newest first: a created file disappears, an
  unlinked one comes back (it is kept aside in `<BACKING>.unlinked` until
  then), a rename goes back. This is the POSIX rule: fsync of a file does not
  persist its directory entry (fsync(2)). SQLite follows it: it syncs the
  directory after creating a journal or WAL file.
* **Not modelled**: permissions, owners and times (applied at once, durable);
  hard and symbolic links (refused); reordering of synced writes (a sync is
  durable when it returns, as with a disk that honours flushes).

A power cut is a line on standard input: ``cut`` drops everything unsynced;
``cut torn SEED SHARE`` first lets each unsynced block and truncation reach
the disk with probability SHARE (the kernel's writeback before the lights went
out), the choice drawn from SEED. The process then writes ``cut <json>`` and
exits at once without unmounting, like a machine losing power: the mount is
dead until unmounted, and the page cache of the kernel goes with it. The end of
standard input (the controlling test died) is a plain cut. ``stats`` answers
``stats <json>`` with counters. The mount is made with `auto_unmount`, so it
goes away when this process does, however it ends.

The -shm file SQLite maps into memory works because the mount does not use
direct I/O: the kernel pages it and writes it back through `write`.
"""

from __future__ import annotations

import errno
import itertools
import json
import os
import random
import shutil
import stat
import sys
import threading
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

from support.lazy_files import SyncPlan, UnsyncedFile

STAT_FIELDS = (
    "st_mode", "st_ino", "st_dev", "st_nlink", "st_uid", "st_gid", "st_size",
    "st_atime_ns", "st_mtime_ns", "st_ctime_ns", "st_blocks", "st_blksize",
)
STATVFS_FIELDS = (
    "f_bsize", "f_frsize", "f_blocks", "f_bfree", "f_bavail", "f_files", "f_ffree", "f_favail", "f_flag", "f_namemax",
)


class OpenFile:
    """One file's backing descriptor and unsynced layer, shared by all its handles."""

    __slots__ = ("fd", "unsynced", "handles")

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.unsynced = UnsyncedFile(os.fstat(fd).st_size)
        self.handles = 0

    def read_synced(self, offset: int, size: int) -> bytes:
        return os.pread(self.fd, size, offset)

    def apply(self, plan: SyncPlan) -> None:
        if plan.truncate_to is not None:
            os.ftruncate(self.fd, plan.truncate_to)
        for offset, data in plan.blocks.items():
            os.pwrite(self.fd, data, offset)
        if plan.final_size is not None:
            os.ftruncate(self.fd, plan.final_size)


@dataclass(slots=True)
class NameChange:
    """A namespace change not yet made durable: the directories whose fsync it awaits and how to undo it.

    `kind` is ``create`` (undo: remove `path`), ``unlink`` (undo: bring `aside`
    back to `path`) or ``rename`` (undo: move `path` back to `source`, then
    bring `aside`, the replaced target, back to `path`)."""

    kind: str
    path: str
    awaiting: set[str]
    source: str | None = None
    aside: str | None = None


@dataclass(slots=True)
class Counters:
    writes: int = 0
    written_bytes: int = 0
    truncates: int = 0
    fsyncs: int = 0
    synced_bytes: int = 0
    directory_fsyncs: int = 0
    name_changes: int = 0
    durable_name_changes: int = 0


def _parent(path: str) -> str:
    return str(PurePosixPath(path).parent)


class LazyFilesystem:
    """The FUSE operations (mfusepy's `Operations` protocol) over `backing`; one mutex serialises them."""

    use_ns = True  # times in nanoseconds

    def __init__(self, backing: str, unlinked: str) -> None:
        self.backing = os.path.realpath(backing)
        self.unlinked = os.path.realpath(unlinked)  # where unlinked entries wait until their unlink is durable
        os.makedirs(self.unlinked, exist_ok=True)
        self.mutex = threading.RLock()
        self.files: dict[str, OpenFile] = {}  # view path -> file, while open or holding unsynced data
        self.handles: dict[int, OpenFile] = {}
        self.next_handle = itertools.count(1)
        self.journal: list[NameChange] = []
        self.aside_names = itertools.count(1)
        self.counters = Counters()

    # ------------------------------------------------------------- helpers

    def real(self, path: str) -> str:
        return self.backing + path if path != "/" else self.backing

    def _file(self, path: str) -> OpenFile:
        file = self.files.get(path)
        if file is None:
            file = self.files[path] = OpenFile(os.open(self.real(path), os.O_RDWR))
        return file

    def _open_handle(self, file: OpenFile) -> int:
        handle = next(self.next_handle)
        self.handles[handle] = file
        file.handles += 1
        return handle

    def _forget_if_idle(self, file: OpenFile) -> None:
        """Close a file nobody has open and that holds nothing unsynced, under whatever name it has now."""
        if file.handles == 0 and not file.unsynced.dirty:
            for path in [path for path, known in self.files.items() if known is file]:
                del self.files[path]
            os.close(file.fd)

    def _set_aside(self, path: str) -> str:
        aside = os.path.join(self.unlinked, str(next(self.aside_names)))
        os.rename(self.real(path), aside)
        return aside

    def _journal(self, change: NameChange) -> None:
        self.journal.append(change)
        self.counters.name_changes += 1

    def _move_open_files(self, old: str, new: str) -> None:
        for path in [p for p in self.files if p == old or p.startswith(old + "/")]:
            self.files[new + path[len(old):]] = self.files.pop(path)

    # ------------------------------------------------------- attributes

    def getattr(self, path: str, fh: int | None = None) -> dict[str, Any]:
        with self.mutex:
            file = self.handles.get(fh) if fh else self.files.get(path)
            st = os.fstat(file.fd) if file is not None else os.lstat(self.real(path))
            attrs = {name.replace("_ns", ""): getattr(st, name) for name in STAT_FIELDS}
            if file is not None:
                attrs["st_size"] = file.unsynced.size
            return attrs

    def access(self, path: str, amode: int) -> int:
        with self.mutex:
            if not os.access(self.real(path), amode):
                raise OSError(errno.EACCES, "access denied")
            return 0

    def chmod(self, path: str, mode: int) -> int:
        with self.mutex:
            os.chmod(self.real(path), mode)
            return 0

    def chown(self, path: str, uid: int, gid: int) -> int:
        with self.mutex:
            os.chown(self.real(path), uid, gid)
            return 0

    def utimens(self, path: str, times: tuple[int, int] | None = None) -> int:
        with self.mutex:
            os.utime(self.real(path), ns=times)
            return 0

    def statfs(self, path: str) -> dict[str, int]:
        with self.mutex:
            st = os.statvfs(self.real(path))
            return {name: getattr(st, name) for name in STATVFS_FIELDS}

    # --------------------------------------------------------- file data

    def create(self, path: str, mode: int, flags: int = 0) -> int:
        with self.mutex:
            fd = os.open(self.real(path), os.O_RDWR | os.O_CREAT | os.O_EXCL, mode)
            self._journal(NameChange("create", path, {_parent(path)}))
            self.files[path] = file = OpenFile(fd)
            return self._open_handle(file)

    def open(self, path: str, flags: int) -> int:
        with self.mutex:
            return self._open_handle(self._file(path))

    def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
        with self.mutex:
            file = self.handles[fh]
            return file.unsynced.read(offset, size, file.read_synced)

    def write(self, path: str, data: bytes, offset: int, fh: int) -> int:
        with self.mutex:
            file = self.handles[fh]
            file.unsynced.write(offset, data, file.read_synced)
            self.counters.writes += 1
            self.counters.written_bytes += len(data)
            return len(data)

    def truncate(self, path: str, length: int, fh: int | None = None) -> int:
        with self.mutex:
            file = self._file(path)
            file.unsynced.truncate(length)
            self.counters.truncates += 1
            self._forget_if_idle(file)
            return 0

    def fsync(self, path: str, datasync: int, fh: int) -> int:
        with self.mutex:
            file = self.handles[fh]
            plan = file.unsynced.sync_plan()
            file.apply(plan)
            file.unsynced.mark_synced()
            self.counters.fsyncs += 1
            self.counters.synced_bytes += plan.written_bytes
            return 0

    def flush(self, path: str, fh: int) -> int:
        return 0  # close(2) is not a sync

    def release(self, path: str, fh: int) -> int:
        with self.mutex:
            file = self.handles.pop(fh)
            file.handles -= 1
            self._forget_if_idle(file)
            return 0

    # ------------------------------------------------------------- names

    def readdir(self, path: str, fh: int) -> list[str]:
        with self.mutex:
            return [".", "..", *os.listdir(self.real(path))]

    def mkdir(self, path: str, mode: int) -> int:
        with self.mutex:
            os.mkdir(self.real(path), mode)
            self._journal(NameChange("create", path, {_parent(path)}))
            return 0

    def unlink(self, path: str) -> int:
        with self.mutex:
            aside = self._set_aside(path)
            self._journal(NameChange("unlink", path, {_parent(path)}, aside=aside))
            file = self.files.pop(path, None)
            if file is not None and file.handles == 0:
                os.close(file.fd)  # its unsynced data dies with the name
            return 0

    def rmdir(self, path: str) -> int:
        with self.mutex:
            if os.listdir(self.real(path)):
                raise OSError(errno.ENOTEMPTY, "directory not empty")
            return self.unlink(path)

    def rename(self, old: str, new: str) -> int:
        with self.mutex:
            aside = None
            if os.path.lexists(self.real(new)):
                if os.path.isdir(self.real(new)) and os.listdir(self.real(new)):
                    raise OSError(errno.ENOTEMPTY, "directory not empty")
                aside = self._set_aside(new)
                replaced = self.files.pop(new, None)
                if replaced is not None and replaced.handles == 0:
                    os.close(replaced.fd)
            os.rename(self.real(old), self.real(new))
            self._journal(NameChange("rename", new, {_parent(old), _parent(new)}, source=old, aside=aside))
            self._move_open_files(old, new)
            return 0

    def fsyncdir(self, path: str, datasync: int, fh: int) -> int:
        with self.mutex:
            self.counters.directory_fsyncs += 1
            still: list[NameChange] = []
            for change in self.journal:
                change.awaiting.discard(path)
                if change.awaiting:
                    still.append(change)
                    continue
                self.counters.durable_name_changes += 1
                if change.aside is not None:
                    _remove(change.aside)  # the unlink or the replacement is final now
            self.journal = still
            return 0

    def link(self, target: str, source: str) -> int:
        raise OSError(errno.EPERM, "hard links are not modelled")

    def symlink(self, target: str, source: str) -> int:
        raise OSError(errno.EPERM, "symbolic links are not modelled")

    # -------------------------------------------------------------- cuts

    def cut(self, rng: random.Random | None, keep_share: float) -> dict[str, Any]:
        """A power cut: what reaches the disk (nothing, or a torn share), then undo of the names not durable.
        Called with the mutex held by the control thread; the process exits right after."""
        kept_bytes = 0
        dropped_bytes = 0
        files = {id(file): file for file in [*self.files.values(), *self.handles.values()]}
        for file in files.values():
            dropped_bytes += file.unsynced.unsynced_bytes
            if rng is not None and file.unsynced.dirty:
                plan = file.unsynced.torn_plan(rng, keep_share)
                file.apply(plan)
                kept_bytes += plan.written_bytes
        undone = 0
        for change in reversed(self.journal):
            self._undo(change)
            undone += 1
        return {
            "unsynced_bytes": dropped_bytes,
            "torn_kept_bytes": kept_bytes,
            "name_changes_undone": undone,
            **self.stats(),
        }

    def _undo(self, change: NameChange) -> None:
        real = self.real(change.path)
        if change.kind == "create":
            _remove(real)
        elif change.kind == "unlink":
            assert change.aside is not None
            os.rename(change.aside, real)
        else:
            assert change.source is not None
            os.rename(real, self.real(change.source))
            if change.aside is not None:
                os.rename(change.aside, real)

    def stats(self) -> dict[str, Any]:
        counters = self.counters
        return {
            "writes": counters.writes,
            "written_bytes": counters.written_bytes,
            "truncates": counters.truncates,
            "fsyncs": counters.fsyncs,
            "synced_bytes": counters.synced_bytes,
            "directory_fsyncs": counters.directory_fsyncs,
            "name_changes": counters.name_changes,
            "durable_name_changes": counters.durable_name_changes,
            "pending_name_changes": len(self.journal),
        }


def _remove(path: str) -> None:
    try:
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.unlink(path)
    except FileNotFoundError:
        pass


def control(filesystem: LazyFilesystem) -> None:
    """Read commands from standard input until a cut; see the module docstring."""
    for line in sys.stdin:
        words = line.split()
        if words == ["stats"]:
            with filesystem.mutex:
                _say("stats", filesystem.stats())
        elif words == ["cut"] or (len(words) == 4 and words[:2] == ["cut", "torn"]):
            try:
                rng = random.Random(int(words[2])) if len(words) == 4 else None
                keep_share = float(words[3]) if len(words) == 4 else 0.0
            except ValueError:
                _say("error", {"bad command": line.strip()})
                continue
            filesystem.mutex.acquire()  # held until exit: no operation runs after the power went
            _say("cut", filesystem.cut(rng, keep_share))
            os._exit(0)
        elif words:
            _say("error", {"unknown command": line.strip()})
    with filesystem.mutex:
        filesystem.cut(None, 0.0)
    os._exit(0)


def _say(word: str, payload: dict[str, Any]) -> None:
    sys.stdout.write(f"{word} {json.dumps(payload, sort_keys=True)}\n")
    sys.stdout.flush()


def main(argv: list[str]) -> None:
    if len(argv) != 2:
        sys.exit("usage: python -m support.lazyfs BACKING MOUNTPOINT")
    import mfusepy

    backing, mountpoint = argv
    filesystem = LazyFilesystem(backing, os.path.realpath(backing) + ".unlinked")
    threading.Thread(target=control, args=(filesystem,), name="lazyfs-control", daemon=True).start()
    # Foreground and multithreaded (the mutex serialises the model); auto_unmount
    # removes the mount when this process ends, whatever kills it.
    mfusepy.FUSE(filesystem, mountpoint, foreground=True, fsname="lazyfs", auto_unmount=True)


if __name__ == "__main__":
    main(sys.argv[1:])

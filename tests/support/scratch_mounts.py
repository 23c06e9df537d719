"""Small real file systems for storage-fault tests: a size-limited tmpfs, and ext4 on a loop-mounted image.

Mounting needs root and a kernel that lets this machine mount. Where it
cannot, a test skips with the reason, except under CI=true, where it fails
instead: CI runs as root on a machine that can, and a fault test that quietly
skips there proves nothing. Every mount is unmounted when its `with` block
ends, whatever happened inside (lazily if something still holds it open).

Besides mounting, the faults themselves: `fill` takes every free byte with a
filler file, and `shut_down` makes ext4 fail every later read, write and
fsync with EIO, as a dying disk does (`EXT4_IOC_SHUTDOWN`). It shuts down
the way `xfs_io -c shutdown` does by default: the file system is frozen
(everything written so far reaches the device), then shut down, then thawed,
so the fault falls at one instant. The variant that skips the flush
(`EXT4_GOING_FLAGS_NOLOGFLUSH`) is not an instant: an fsync that returns
while it runs can report success for data the aborted journal then drops.
Plain SQLite shows it without Kittiwake (a commit acknowledged by COMMIT,
missing after the remount, in 2 of 40 trials on this machine), so it would
test the file system, not the broker.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import shutil
import struct
import subprocess
from pathlib import Path
from typing import Iterator, NoReturn

import pytest

EXT4_IOC_SHUTDOWN = 0x8004587D  # _IOR('X', 125, __u32)
EXT4_GOING_FLAGS_DEFAULT = 0x0  # freeze (flush everything), shut down, thaw
FILL_CHUNK_BYTES = 1 << 20


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def cannot(reason: str) -> NoReturn:
    """Skip the test with `reason`, or fail it under CI."""
    if in_ci():
        pytest.fail(f"{reason} (CI=true: this test must run here)")
    pytest.skip(reason)


def _run(*command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, capture_output=True, text=True, timeout=60)


def _mount(*arguments: str, what: str) -> None:
    if os.geteuid() != 0:
        cannot(f"mounting {what} needs root")
    if shutil.which("mount") is None:
        cannot("no mount command on this machine")
    result = _run("mount", *arguments)
    if result.returncode != 0:
        cannot(f"cannot mount {what} here: {result.stderr.strip() or result.returncode}")


def unmount(directory: Path) -> None:
    """Unmount, lazily if a process still holds a file there (it is gone from the tree at once)."""
    if _run("umount", str(directory)).returncode != 0:
        _run("umount", "-l", str(directory))


@contextlib.contextmanager
def tmpfs(directory: Path, size_bytes: int) -> Iterator[Path]:
    """A tmpfs of `size_bytes` mounted on `directory` (made if missing)."""
    directory.mkdir(parents=True, exist_ok=True)
    _mount("-t", "tmpfs", "-o", f"size={size_bytes}", "tmpfs", str(directory), what=f"a tmpfs on {directory}")
    try:
        yield directory
    finally:
        unmount(directory)


@contextlib.contextmanager
def ext4(directory: Path, image: Path, size_bytes: int) -> Iterator[Path]:
    """A fresh ext4 file system in the file `image`, loop-mounted on `directory`."""
    if shutil.which("mkfs.ext4") is None:
        cannot("no mkfs.ext4 on this machine (Debian: e2fsprogs)")
    directory.mkdir(parents=True, exist_ok=True)
    with open(image, "wb") as file:
        file.truncate(size_bytes)
    result = _run("mkfs.ext4", "-q", "-F", str(image))
    if result.returncode != 0:
        cannot(f"mkfs.ext4 failed: {result.stderr.strip()}")
    try:
        mount_ext4(directory, image)
        try:
            yield directory
        finally:
            unmount(directory)
    finally:
        image.unlink(missing_ok=True)


def mount_ext4(directory: Path, image: Path) -> None:
    """Mount an ext4 image again (after `unmount`); its journal is replayed."""
    _mount("-o", "loop", str(image), str(directory), what=f"an ext4 image on {directory}")


def remount(directory: Path, options: str) -> None:
    """Remount with new options, such as "ro" or "rw"; fails the test if the kernel refuses."""
    result = _run("mount", "-o", f"remount,{options}", str(directory))
    assert result.returncode == 0, f"remount,{options} of {directory} failed: {result.stderr.strip()}"


def fill(directory: Path) -> Path:
    """Write a filler file in `directory` until the file system is full; its path."""
    filler = directory / "filler"
    chunk = b"\0" * FILL_CHUNK_BYTES
    with open(filler, "wb", buffering=0) as file:
        size = FILL_CHUNK_BYTES
        while size:
            try:
                file.write(chunk[:size])
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                size //= 2  # the last few blocks
    return filler


def shut_down(directory: Path) -> None:
    """Make the ext4 file system mounted on `directory` fail every later I/O with EIO."""
    descriptor = os.open(directory, os.O_RDONLY)
    try:
        fcntl.ioctl(descriptor, EXT4_IOC_SHUTDOWN, struct.pack("I", EXT4_GOING_FLAGS_DEFAULT))
    finally:
        os.close(descriptor)

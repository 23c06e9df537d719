"""The lazy filesystem, mounted: what survives a power cut and what does not, one rule per test.

Each test mounts `support.lazyfs` (skipped with the reason where FUSE cannot
mount, failed under CI=true), does file operations through the mount, cuts the
power and mounts again to read what the backing directory kept.
"""

from __future__ import annotations

import os
import random
import sqlite3
from pathlib import Path
from typing import Iterator

import pytest

from support.lazy_files import BLOCK_BYTES
from support.lazy_mount import LazyMount, require_fuse


@pytest.fixture
def mount(tmp_path: Path) -> Iterator[LazyMount]:
    require_fuse()
    with LazyMount(tmp_path / "disk", tmp_path / "mnt") as lazy:
        yield lazy


def power_cycle(mount: LazyMount, **cut: object) -> dict:
    report = mount.cut(**cut)  # type: ignore[arg-type]
    mount.mount()
    return report


def sync_directory(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_file(path: Path, data: bytes, *, sync: str | None = None) -> None:
    """Create or overwrite `path`; `sync` is None, "fsync" or "fdatasync"."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, data)
        if sync == "fsync":
            os.fsync(fd)
        elif sync == "fdatasync":
            os.fdatasync(fd)
    finally:
        os.close(fd)


@pytest.mark.parametrize("sync", ["fsync", "fdatasync"])
def test_synced_data_survives_a_cut_and_later_unsynced_writes_do_not(mount: LazyMount, sync: str) -> None:
    path = mount.path / "file"
    write_file(path, b"synced", sync=sync)
    sync_directory(mount.path)
    with open(path, "r+b") as f:
        f.seek(0, os.SEEK_END)
        f.write(b" then not")
    assert path.read_bytes() == b"synced then not"  # readers see unsynced data before the cut
    report = power_cycle(mount)
    assert path.read_bytes() == b"synced"
    assert report["unsynced_bytes"] > 0


def test_an_unsynced_truncation_is_undone_by_a_cut(mount: LazyMount) -> None:
    path = mount.path / "file"
    write_file(path, b"0123456789", sync="fsync")
    sync_directory(mount.path)
    os.truncate(path, 3)
    assert path.read_bytes() == b"012"
    power_cycle(mount)
    assert path.read_bytes() == b"0123456789"


def test_a_new_name_lasts_only_once_its_directory_is_synced(mount: LazyMount) -> None:
    kept, gone = mount.path / "kept", mount.path / "gone"
    write_file(kept, b"data", sync="fsync")
    sync_directory(mount.path)
    write_file(gone, b"data", sync="fsync")  # fsync of a file does not persist its name
    report = power_cycle(mount)
    assert kept.read_bytes() == b"data"
    assert not gone.exists()
    assert report["name_changes_undone"] == 1


def test_unsynced_unlink_and_rename_are_undone_by_a_cut(mount: LazyMount) -> None:
    for name in ("unlinked", "renamed", "replaced"):
        write_file(mount.path / name, name.encode(), sync="fsync")
    sync_directory(mount.path)
    (mount.path / "unlinked").unlink()
    os.rename(mount.path / "renamed", mount.path / "replaced")
    assert sorted(os.listdir(mount.path)) == ["replaced"]
    power_cycle(mount)
    assert {name: (mount.path / name).read_bytes() for name in sorted(os.listdir(mount.path))} == {
        "renamed": b"renamed", "replaced": b"replaced", "unlinked": b"unlinked",
    }


def test_unsynced_data_follows_its_file_through_a_rename_and_a_close(mount: LazyMount) -> None:
    write_file(mount.path / "old", b"written before the rename")  # not synced; closed
    os.rename(mount.path / "old", mount.path / "new")
    assert (mount.path / "new").read_bytes() == b"written before the rename"
    fd = os.open(mount.path / "new", os.O_RDONLY)
    os.fsync(fd)  # any handle syncs what the file holds
    os.close(fd)
    sync_directory(mount.path)
    power_cycle(mount)
    assert os.listdir(mount.path) == ["new"]
    assert (mount.path / "new").read_bytes() == b"written before the rename"


def test_synced_unlink_and_rename_last(mount: LazyMount) -> None:
    write_file(mount.path / "a", b"a", sync="fsync")
    write_file(mount.path / "b", b"b", sync="fsync")
    sync_directory(mount.path)
    (mount.path / "a").unlink()
    os.rename(mount.path / "b", mount.path / "c")
    sync_directory(mount.path)
    power_cycle(mount)
    assert os.listdir(mount.path) == ["c"]
    assert not list(Path(str(mount.backing) + ".unlinked").iterdir())  # nothing kept aside any more


def test_a_torn_cut_lets_some_unsynced_blocks_through_and_not_others(mount: LazyMount) -> None:
    path = mount.path / "file"
    blocks = 64
    write_file(path, bytes(blocks * BLOCK_BYTES), sync="fsync")
    sync_directory(mount.path)
    with open(path, "r+b") as f:
        f.write(b"\xff" * (blocks * BLOCK_BYTES))
    report = power_cycle(mount, rng=random.Random(3), torn_share=0.5)
    data = path.read_bytes()
    written = [data[i * BLOCK_BYTES:(i + 1) * BLOCK_BYTES] == b"\xff" * BLOCK_BYTES for i in range(blocks)]
    assert all(data[i * BLOCK_BYTES:(i + 1) * BLOCK_BYTES] in (bytes(BLOCK_BYTES), b"\xff" * BLOCK_BYTES)
               for i in range(blocks)), "a block reached the disk in part"
    assert 0 < sum(written) < blocks
    assert report["torn_kept_bytes"] == sum(written) * BLOCK_BYTES


@pytest.mark.parametrize(("synchronous", "rows_after_cut"), [("FULL", 50), ("NORMAL", 0)])
def test_sqlite_in_wal_mode_keeps_its_commits_only_when_it_syncs_them(
    mount: LazyMount, synchronous: str, rows_after_cut: int
) -> None:
    """The broker's SQLite set-up on the mount: WAL, with the -shm file mapped in memory."""
    path = mount.path / "queue.db"
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute(f"PRAGMA synchronous={synchronous}")
    db.execute("CREATE TABLE tasks (n INTEGER)")
    for n in range(50):
        db.execute("INSERT INTO tasks VALUES (?)", (n,))
    assert db.execute("SELECT count(*) FROM tasks").fetchone() == (50,)
    power_cycle(mount)  # the connection is never closed: the process died with the power
    db = sqlite3.connect(path, isolation_level=None)
    try:
        rows = db.execute("SELECT count(*) FROM tasks").fetchone()[0]
    except sqlite3.OperationalError:  # not even the table was synced
        rows = 0
    finally:
        db.close()
    assert rows == rows_after_cut


def test_close_unmounts_even_after_the_filesystem_process_died(tmp_path: Path) -> None:
    require_fuse()
    mount = LazyMount(tmp_path / "disk", tmp_path / "mnt")
    try:
        assert mount.proc is not None
        mount.proc.kill()
        mount.proc.wait()
    finally:
        mount.close()
    assert str(mount.path) not in Path("/proc/self/mountinfo").read_text()

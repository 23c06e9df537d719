"""Naming storage failures: the errors SQLite and the OS raise on a full, failing or read-only disk, and nothing else;
and the SQLite store raising them as `errors.StorageFailure`, so that nothing above it sees `sqlite3`."""

from __future__ import annotations

import errno
import sqlite3
from pathlib import Path

import pytest

from kittiwake import errors
from kittiwake.engine import PutTask
from kittiwake.model import Task
from kittiwake.store.faults import StorageFault, classify, diagnose_directory, outcome_known, storage_failure
from kittiwake.store.sqlite import SqliteStore


def raised(statement: str, database: str = ":memory:", *setup: str) -> sqlite3.Error:
    db = sqlite3.connect(database, uri=database.startswith("file:"))
    for line in setup:
        db.execute(line)
    with pytest.raises(sqlite3.Error) as caught:
        db.execute(statement)
    return caught.value


def test_a_real_full_database_is_full() -> None:
    error = raised("INSERT INTO t VALUES (zeroblob(100000))", ":memory:", "PRAGMA max_page_count=2", "CREATE TABLE t(x)")
    assert "database or disk is full" in str(error)
    assert classify(error) is StorageFault.FULL


def test_a_real_read_only_database_is_read_only() -> None:
    error = raised("CREATE TABLE t(x)", "file::memory:?mode=ro")
    assert classify(error) is StorageFault.READ_ONLY


@pytest.mark.parametrize(
    ("message", "fault"),
    [
        ("disk I/O error", StorageFault.IO_ERROR),
        ("database or disk is full", StorageFault.FULL),
        ("attempt to write a readonly database", StorageFault.READ_ONLY),
        ("database disk image is malformed", StorageFault.CORRUPT),
        ("file is not a database", StorageFault.CORRUPT),
        ("database is locked", StorageFault.OTHER),
    ],
)
def test_an_error_without_a_result_code_is_named_by_its_message(message: str, fault: StorageFault) -> None:
    assert classify(sqlite3.OperationalError(message)) is fault


def test_the_result_code_wins_over_the_message() -> None:
    error = sqlite3.OperationalError("something else")
    error.sqlite_errorcode = sqlite3.SQLITE_IOERR_FSYNC  # type: ignore[attr-defined]
    assert classify(error) is StorageFault.IO_ERROR


@pytest.mark.parametrize(
    ("number", "fault"),
    [
        (errno.ENOSPC, StorageFault.FULL),
        (errno.EDQUOT, StorageFault.FULL),
        (errno.EIO, StorageFault.IO_ERROR),
        (errno.EROFS, StorageFault.READ_ONLY),
        (errno.EMFILE, StorageFault.OTHER),
    ],
)
def test_os_errors_are_named_by_errno(number: int, fault: StorageFault) -> None:
    assert classify(OSError(number, "x")) is fault


def test_a_bug_is_not_a_storage_failure() -> None:
    assert classify(ValueError("a bug")) is None
    assert classify(KeyError("a bug")) is None


def test_only_a_full_or_read_only_disk_leaves_a_failed_commit_known_not_applied() -> None:
    assert outcome_known(StorageFault.FULL) and outcome_known(StorageFault.READ_ONLY)
    assert not outcome_known(StorageFault.IO_ERROR)
    assert not outcome_known(StorageFault.OTHER)
    assert not outcome_known(None)


def test_a_healthy_directory_shows_nothing_wrong(tmp_path: Path) -> None:
    assert diagnose_directory(tmp_path) is None
    assert diagnose_directory(tmp_path / "not" / "made" / "yet") is None


def test_a_failed_commit_is_a_storage_failure_whose_outcome_the_fault_decides() -> None:
    full = storage_failure(sqlite3.OperationalError("database or disk is full"), committing=True)
    assert isinstance(full, errors.Unavailable) and full.code == "UNAVAILABLE"
    assert (full.fault, full.outcome_known) == (StorageFault.FULL, True)
    fsync = sqlite3.OperationalError("disk I/O error")
    fsync.sqlite_errorcode = sqlite3.SQLITE_IOERR_FSYNC  # type: ignore[attr-defined]
    assert (storage_failure(fsync, committing=True).fault, storage_failure(fsync, committing=True).outcome_known) == (
        StorageFault.IO_ERROR, False)
    assert storage_failure(fsync).outcome_known  # a read or a write that failed left nothing behind


def test_the_sqlite_store_raises_a_full_database_as_a_storage_failure(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path, durability="os")
    try:
        pages = store._db.execute("PRAGMA page_count").fetchone()[0]
        store._db.execute(f"PRAGMA max_page_count={pages + 2}")  # a disk with two pages left
        store.write([PutTask(Task("full", "1", b"x" * 200_000, 1_000.0))])
        with pytest.raises(errors.StorageFailure) as caught:
            store.commit()
        assert (caught.value.fault, caught.value.outcome_known) == (StorageFault.FULL, True)
        assert isinstance(caught.value.__cause__, sqlite3.Error)
        store.rollback()
        assert store.scan("full", None, 10) == []
    finally:
        store.close()


def test_the_sqlite_store_raises_a_damaged_file_at_open_as_a_storage_failure(tmp_path: Path) -> None:
    (tmp_path / "kittiwake.db").write_bytes(b"this is no database at all " * 200)
    with pytest.raises(errors.StorageFailure) as caught:
        SqliteStore(tmp_path)
    assert caught.value.fault is StorageFault.CORRUPT

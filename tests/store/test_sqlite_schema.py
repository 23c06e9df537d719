"""An SQLite data directory whose schema a newer Kittiwake wrote is refused, unchanged, with the stable
code SCHEMA_TOO_NEW: by the store itself, by `kittiwake migrate` and `kittiwake copy` (the CLI's
`error CODE: message` line, exit status 1, no traceback) and by a broker starting on it (its one
`cannot start` line, exit status 1)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

from kittiwake import errors
from kittiwake.cli.main import cli
from kittiwake.store import statements as sql
from kittiwake.store.sqlite import SqliteStore
from support.broker_process import BrokerDidNotStart, BrokerProcess

NEWER = sql.SCHEMA_VERSION + 1


def newer_store(directory: Path) -> Path:
    """A store at `directory` made by this Kittiwake, then marked as written by a newer one."""
    SqliteStore(str(directory)).close()
    path = directory / "kittiwake.db"
    db = sqlite3.connect(path)
    try:
        db.execute(f"PRAGMA user_version={NEWER}")
        db.commit()
    finally:
        db.close()
    return path


def user_version(path: Path) -> int:
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return int(db.execute("PRAGMA user_version").fetchone()[0])
    finally:
        db.close()


def test_the_store_refuses_a_newer_schema_with_its_code(tmp_path: Path) -> None:
    path = newer_store(tmp_path / "data")
    with pytest.raises(errors.SchemaTooNew, match=f"schema version {NEWER}; this Kittiwake knows up to") as refused:
        SqliteStore(str(tmp_path / "data"))
    assert refused.value.code == "SCHEMA_TOO_NEW"
    assert user_version(path) == NEWER


@pytest.mark.parametrize("command", ["migrate", "copy-from", "copy-to"])
def test_migrate_and_copy_say_schema_too_new_in_one_line(tmp_path: Path, command: str) -> None:
    path = newer_store(tmp_path / "data")
    store = f"sqlite://{tmp_path / 'data'}"
    other = f"sqlite://{tmp_path / 'other'}"
    if command == "copy-to":
        SqliteStore(str(tmp_path / "other")).close()  # an empty source of this version
        args = ["copy", "--from", other, "--to", store]
    elif command == "copy-from":
        args = ["copy", "--from", store, "--to", other]
    else:
        args = ["migrate", "--store", store]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output and isinstance(result.exception, SystemExit), result.exception
    assert f"error SCHEMA_TOO_NEW: {path} has schema version {NEWER}" in result.output, result.output
    assert user_version(path) == NEWER  # nothing changed


def test_a_broker_on_a_newer_schema_says_why_in_one_line(tmp_path: Path) -> None:
    newer_store(tmp_path / "data")
    with pytest.raises(BrokerDidNotStart) as refused:
        BrokerProcess(tmp_path / "data")
    stderr = refused.value.log_tail
    assert refused.value.returncode == 1, stderr
    assert f"cannot start: SCHEMA_TOO_NEW: {tmp_path / 'data' / 'kittiwake.db'} has schema version {NEWER}" in stderr
    assert "Traceback" not in stderr, stderr

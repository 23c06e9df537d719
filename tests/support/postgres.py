"""The PostgreSQL server of the tests: where it is, and a fresh schema per test.

`KITTIWAKE_TEST_POSTGRES` names the database (default: the local server's
`test` database as user `postgres`, trust authentication). `fresh_schema()`
yields (dsn, schema name) for a schema no one else uses and drops it after;
when the server cannot be reached the test skips saying so, or fails when
CI=true (CI must run these tests), as the Spark tests do.
"""

from __future__ import annotations

import os
import uuid
from contextlib import contextmanager
from typing import Iterator

import pytest

DSN_ENV = "KITTIWAKE_TEST_POSTGRES"
DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/test"


def test_dsn() -> str:
    return os.environ.get(DSN_ENV, DEFAULT_DSN)


def unreachable_reason(dsn: str) -> str | None:
    """Why the tests cannot use the server at `dsn`, or None when they can."""
    try:
        import psycopg
    except ImportError:
        return "psycopg is not installed (the `postgres` extra)"
    try:
        with psycopg.connect(dsn, connect_timeout=3):
            return None
    except psycopg.Error as exc:
        return f"PostgreSQL at {dsn} is unreachable (set {DSN_ENV}): {str(exc).strip()}"


def require_server() -> str:
    """The test server's DSN; skips the test when it is unreachable (fails under CI=true)."""
    dsn = test_dsn()
    reason = unreachable_reason(dsn)
    if reason is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true and {reason}")
        pytest.skip(reason)
    return dsn


@contextmanager
def fresh_schema() -> Iterator[tuple[str, str]]:
    """(dsn, schema): a schema name unused so far, dropped with everything in it afterwards."""
    import psycopg
    from psycopg import sql

    dsn = require_server()
    schema = "kwtest_" + uuid.uuid4().hex[:16]
    try:
        yield dsn, schema
    finally:
        with psycopg.connect(dsn, autocommit=True) as db:
            db.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))

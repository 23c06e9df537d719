"""Fixtures and options shared by every test package.

* `broker`: a real broker subprocess on a fresh data directory, killed at teardown; with
  KITTIWAKE_TEST_BROKER_STORE=postgresql, on a fresh schema of the test PostgreSQL server
  (`postgresql-many`: the same, as one of several brokers, `brokers=many`).
* `--soak`: enables tests marked `soak` (long runs); without it they are skipped.
* `spark_session`: one PySpark `local[2]` session for the whole run (Spark starts a JVM
  in seconds); skipped, with the reason, where PySpark or Java is missing (failed under CI=true).

`tests/` is put on `sys.path` so test modules can `from support.broker_process import ...`.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Iterator

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from support.broker_process import BrokerProcess  # noqa: E402


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--soak", action="store_true", default=False, help="run the long tests marked soak")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--soak"):
        return
    skip = pytest.mark.skip(reason="a soak test: run with --soak")
    for item in items:
        # the marker itself, not `"soak" in item.keywords`: keywords hold the names of every
        # parent node too, so a checkout in a directory named "soak" would skip the whole suite
        if item.get_closest_marker("soak") is not None:
            item.add_marker(skip)


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    """A broker subprocess on `tmp_path / "data"`, on a free port; with
    KITTIWAKE_TEST_BROKER_STORE=postgresql, on a fresh schema of the test PostgreSQL server instead
    (`support.postgres`), so the tests that use this fixture run on that store too."""
    kind = os.environ.get("KITTIWAKE_TEST_BROKER_STORE")
    if kind in ("postgresql", "postgresql-many"):
        from support.postgres import fresh_schema

        brokers = "&brokers=many" if kind == "postgresql-many" else ""
        with fresh_schema() as (dsn, schema):
            url = f"{dsn}{'&' if '?' in dsn else '?'}schema={schema}{brokers}"
            process = BrokerProcess(tmp_path / "data", store_url=url)
            try:
                yield process
            finally:
                process.kill()
        return
    process = BrokerProcess(tmp_path / "data")
    try:
        yield process
    finally:
        process.kill()


@pytest.fixture(scope="session")
def spark_session() -> Iterator[object]:
    """A SparkSession shared by every test that asks for it, stopped at the end of the run."""
    from kittiwake.bench.spark_peer import spark_available, start_spark

    reason = spark_available()
    if reason is not None:
        if os.environ.get("CI") == "true":  # the pipelines run on Spark: CI must run these
            pytest.fail(f"CI=true and Spark cannot start: {reason}")
        pytest.skip(reason)
    session = start_spark()
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture(scope="session")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> object:
    """A test CA and a server certificate for localhost / 127.0.0.1, made with openssl (skips without it)."""
    from support.tls_certificates import make_certificates

    return make_certificates(tmp_path_factory.mktemp("tls"))

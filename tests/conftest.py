"""Fixtures and options shared by every test package.

* `broker`: a real broker subprocess on a fresh data directory, killed at teardown; with
  KITTIWAKE_TEST_BROKER_STORE=postgresql, on a fresh schema of the test PostgreSQL server
  (`postgresql-many`: the same, as one of several brokers, `brokers=many`).
* `--soak`: enables tests marked `soak` (long runs); without it they are skipped.
* `spark_session`: one PySpark `local[2]` session for the whole run (Spark starts a JVM
  in seconds); skipped, with the reason, where PySpark or Java is missing (failed under CI=true).
* Bytecode: where Python is told not to write bytecode (PYTHONDONTWRITEBYTECODE, -B), every
  Python the tests start (brokers, workers, commands: about a thousand) would compile Kittiwake's
  modules from source again, 0.1-0.2 s each; they share a bytecode cache in pytest's cache
  directory instead (PYTHONPYCACHEPREFIX; a throwaway folder under -p no:cacheprovider), so
  nothing is written beside the sources still.
* JVMs: every JVM the tests start (the shared session's, the demo's, a standalone cluster's) runs
  without the optimising compiler (JDK_JAVA_OPTIONS, unless set already): tiny jobs in JVMs that
  live seconds spend their time starting and warming up, and get through both in about a third
  less time so.

`tests/` is put on `sys.path` so test modules can `from support.broker_process import ...`.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Iterator

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from support.broker_process import BrokerProcess  # noqa: E402


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--soak", action="store_true", default=False, help="run the long tests marked soak")


_THROWAWAY_PYCACHE = pytest.StashKey[Path]()
QUICK_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def pytest_configure(config: pytest.Config) -> None:
    os.environ.setdefault("JDK_JAVA_OPTIONS", QUICK_JVM)
    if sys.flags.dont_write_bytecode and "PYTHONPYCACHEPREFIX" not in os.environ:
        cache = getattr(config, "cache", None)
        if cache is not None:
            folder = cache.mkdir("pycache")
        else:  # -p no:cacheprovider: a folder for this run only
            folder = config.stash[_THROWAWAY_PYCACHE] = Path(tempfile.mkdtemp(prefix="kittiwake-tests-pycache-"))
        os.environ["PYTHONPYCACHEPREFIX"] = str(folder)
        os.environ.pop("PYTHONDONTWRITEBYTECODE", None)


def pytest_unconfigure(config: pytest.Config) -> None:
    from support import broker_launcher

    broker_launcher.close()
    folder = config.stash.get(_THROWAWAY_PYCACHE, None)
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)


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
    from kittiwake.testing.spark_session import spark_available, start_spark

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

"""Spark's own processes for tests, started from the PySpark wheel: a Spark Connect server, a
standalone master and its workers.

`spark_home()` is the pip-installed `pyspark` package, which holds `bin/spark-class`,
`bin/spark-submit` and every jar (the Connect server's included). A `SparkDaemon` is one such JVM
in its own process group with its output in a log file; `wait_for(pattern)` waits, bounded, for a
line of its log; `stop()` ends the group (SIGTERM, then SIGKILL). `require_spark()` skips a test
where PySpark or Java is missing (fails it under CI=true, as the `spark_session` fixture does).
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Mapping, Sequence

import pytest

START_TIMEOUT_SECS = 150.0
CONNECT_SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"


def require_spark() -> None:
    from kittiwake.testing.spark_session import spark_available

    reason = spark_available()
    if reason is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true and Spark cannot start: {reason}")
        pytest.skip(reason)


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


class SparkDaemon:
    """`argv` (a `spark-class` or `spark-submit` command line) in its own process group, logging to `log_path`."""

    def __init__(self, log_path: Path, argv: Sequence[str], env: Mapping[str, str]) -> None:
        self.log_path = log_path
        with open(log_path, "wb") as log:
            self.proc = subprocess.Popen(list(argv), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         env=dict(env), start_new_session=True)

    def wait_for(self, pattern: str, timeout: float = START_TIMEOUT_SECS) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        while True:
            match = re.search(pattern, self.log_path.read_text(errors="replace"))
            if match:
                return match
            assert self.proc.poll() is None, f"{self.log_path.name} exited:\n{self.log_tail()}"
            assert time.monotonic() < deadline, \
                f"{self.log_path.name}: no {pattern!r} in {timeout} s:\n{self.log_tail()}"
            time.sleep(0.2)

    def log_tail(self, chars: int = 3000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:]

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(20)
            except ProcessLookupError:
                pass

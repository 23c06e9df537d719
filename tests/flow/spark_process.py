"""`kittiwake spark-worker` in a subprocess (its own JVM), in its own process group, so a test can
SIGKILL all of it like a machine dying."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Sequence

TESTS_DIR = Path(__file__).resolve().parent.parent
READY = re.compile(r"kittiwake spark-worker (\S+) pid (\d+) ready")
START_TIMEOUT_SECS = 120.0


class SparkWorkerProcess:
    """``python -m kittiwake --url URL spark-worker FLOW... ARGS``, its output in `log_path`."""

    def __init__(self, url: str, log_path: Path, flows: Sequence[str], *args: str,
                 env: dict[str, str] | None = None) -> None:
        self.log_path = log_path
        environment = dict(os.environ)
        environment["PYTHONPATH"] = os.pathsep.join([str(TESTS_DIR), environment.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        environment.update(env or {})
        command = [sys.executable, "-m", "kittiwake", "--url", url, "spark-worker", *flows, "--wait-secs", "0.2", *args]
        with open(log_path, "ab") as log:
            self.proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         env=environment, start_new_session=True)
        self.id: str | None = None

    def wait_ready(self, timeout: float = START_TIMEOUT_SECS) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            match = READY.search(self.log_path.read_text(errors="replace"))
            if match:
                self.id = match.group(1)
                return self.id
            if self.proc.poll() is not None:
                raise RuntimeError(f"spark-worker exited with {self.proc.returncode}:\n{self.log_tail()}")
            time.sleep(0.1)
        raise RuntimeError(f"spark-worker not ready within {timeout} s:\n{self.log_tail()}")

    def kill(self) -> None:
        """SIGKILL the whole process group: the worker and its JVM."""
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait(30)

    def terminate(self, timeout: float = 60.0) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "(no log)"

"""The processes the pipeline demo runs beside itself: a broker, a spark-worker, python workers.

Each is the ordinary command (`python -m kittiwake.broker`, `kittiwake
spark-worker`, `kittiwake worker`) started as a subprocess, its log in a
file of the demo's folder; the broker through `kittiwake.testing`'s `BrokerProcess`
(which also reports the broker's CPU time). `Services` starts them, waits for the broker's
listening line and the spark-worker's ``ready`` line (its JVM starts while
the dataset is generated), and stops them with SIGTERM — the graceful stop
every one of them has — killing only what does not exit in time.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from queue import Empty, Queue
from typing import IO, Mapping, Sequence

from kittiwake.testing import BrokerProcess

STOP_TIMEOUT_SECS = 60.0
READY_MARK = " ready"


class Service:
    """One subprocess whose stdout is scanned for a line and whose stderr goes to a log file."""

    def __init__(self, name: str, command: Sequence[str], log_path: Path, env: Mapping[str, str] | None = None) -> None:
        self.name = name
        self.log_path = log_path
        log = open(log_path, "ab")
        self.process = subprocess.Popen(list(command), stdout=subprocess.PIPE, stderr=log, text=True, bufsize=1,
                                        env={**os.environ, **(env or {})})
        log.close()
        self._lines: Queue[str | None] = Queue()
        threading.Thread(target=self._read, args=(self.process.stdout,), daemon=True).start()

    def _read(self, stream: IO[str] | None) -> None:
        assert stream is not None
        with open(self.log_path, "a") as log:
            for line in stream:
                log.write(line)
                log.flush()
                self._lines.put(line)
        self._lines.put(None)

    def wait_for(self, mark: str, timeout: float) -> None:
        """Block until a stdout line contains `mark`; RuntimeError if the process exits or time runs out."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self._lines.get(timeout=max(0.01, deadline - time.monotonic()))
            except Empty:
                raise RuntimeError(f"{self.name} was not ready within {timeout:.0f} s{self.log_tail()}") from None
            if line is None:
                raise RuntimeError(f"{self.name} exited (code {self.process.wait()}){self.log_tail()}")
            if mark in line:
                return

    def log_tail(self, chars: int = 3000) -> str:
        try:
            text = self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""
        return f"; its log ({self.log_path}) ends with:\n{text}" if text else ""

    def stop(self) -> int | None:
        """SIGTERM, then SIGKILL after `STOP_TIMEOUT_SECS`; the exit code."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(STOP_TIMEOUT_SECS)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode


class Services:
    """A broker (unless a URL is given), a spark-worker and a python worker for one flow module."""

    def __init__(self, root: Path, url: str | None = None) -> None:
        self.root = root
        self.broker: BrokerProcess | None = None
        self.url = url
        self.workers: list[Service] = []
        self.spark: Service | None = None

    def start_broker(self) -> str:
        if self.url is None:
            self.broker = BrokerProcess(self.root / "broker-data", args=["--durability", "fsync", "--http-port", "0"],
                                        log_path=self.root / "broker.log")
            self.broker.start()
            self.url = self.broker.url
        return self.url

    @property
    def dashboard_url(self) -> str | None:
        """The broker's dashboard (its --http-port), when the demo started the broker."""
        if self.broker is None or self.broker.http_port is None:
            return None
        return f"http://{self.broker.host}:{self.broker.http_port}/"

    def _kittiwake(self, *arguments: str) -> list[str]:
        assert self.url is not None
        return [sys.executable, "-m", "kittiwake", "--url", self.url, *arguments]

    def start_spark_worker(self, flow: str, master: str, concurrency: int, conf: Mapping[str, str]) -> Service:
        settings = [option for key, value in conf.items() for option in ("--conf", f"{key}={value}")]
        self.spark = Service("the spark-worker", self._kittiwake(
            "spark-worker", flow, "--master", master, "--concurrency", str(concurrency), *settings),
            self.root / "spark-worker.log", env={"KITTIWAKE_LOG_LEVEL": "WARNING"})
        return self.spark

    def start_python_workers(self, flow: str, processes: int, concurrency: int) -> Service:
        worker = Service("the python worker", self._kittiwake(
            "worker", flow, "--processes", str(processes), "--concurrency", str(concurrency)),
            self.root / "python-worker.log", env={"KITTIWAKE_LOG_LEVEL": "WARNING"})
        self.workers.append(worker)
        return worker

    def worker_pids(self) -> list[int]:
        """The python workers' processes: each command's supervisor and its children."""
        pids: list[int] = []
        for service in self.workers:
            pids.append(service.process.pid)
            try:
                children = Path(f"/proc/{service.process.pid}/task/{service.process.pid}/children").read_text()
            except OSError:
                continue
            pids += [int(pid) for pid in children.split()]
        return pids

    def check_alive(self) -> None:
        """RuntimeError, with its log's end, if a worker or the broker has exited."""
        for service in [*self.workers, *([self.spark] if self.spark else [])]:
            if service.process.poll() is not None:
                raise RuntimeError(f"{service.name} exited (code {service.process.returncode}){service.log_tail()}")
        if self.broker is not None and self.broker.returncode is not None:
            raise RuntimeError(f"the broker exited (code {self.broker.returncode}); its log ends with:\n"
                               f"{self.broker.log_tail()}")

    def stop(self) -> None:
        """Workers first (they finish what they hold), then the broker."""
        for service in [*self.workers, *([self.spark] if self.spark else [])]:
            service.stop()
        if self.broker is not None and self.broker.alive():
            try:
                self.broker.terminate(STOP_TIMEOUT_SECS)
            except subprocess.TimeoutExpired:
                self.broker.kill()

    def broker_cpu_secs(self) -> float | None:
        return self.broker.cpu_secs() if self.broker is not None else None

"""Real worker processes for tests: `kittiwake worker` in a subprocess, and the app fixture.

`WorkerProcess` starts ``python -m kittiwake --url URL worker worker.apps:app
...`` in its own process group (so a test can SIGKILL the whole worker, the
supervisor and its processes, like a machine dying), with its output in a log
file beside the broker's (`prefix=` runs it under a command such as `ip netns exec NS`, on a
host of its own); `wait_ready` waits for every worker process's
ready line, `worker_pids` reads their process ids from it.

`WorkerFleet` runs several such commands and SIGKILLs them at random for the
kill tests: one worker process (its supervisor starts another), the
supervisor alone (its processes stop gracefully on their own), or the whole
command like a machine dying (a new command replaces it).

`connected_app` points the test app (`worker.apps.app`) at the test's broker
and closes it afterwards, so each test has a fresh app id and reply queue.
"""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Iterator, Sequence

TESTS_DIR = Path(__file__).resolve().parent.parent
READY = re.compile(r"kittiwake worker (\S+) pid (\d+) ready")
APP = "worker.apps:app"


class WorkerProcess:
    """`kittiwake worker` against a broker; kill it, stop it, read its log."""

    def __init__(
        self,
        url: str,
        log_path: Path,
        *args: str,
        app: str | None = APP,
        env: dict[str, str] | None = None,
        processes: int = 1,
        wait: bool = True,
        prefix: Sequence[str] = (),
    ) -> None:
        self.log_path = log_path
        self.processes = processes
        environment = dict(os.environ)
        environment["PYTHONPATH"] = os.pathsep.join([str(TESTS_DIR), environment.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        environment.setdefault("KITTIWAKE_LOG_LEVEL", "INFO")
        environment.update(env or {})
        command = [*prefix, sys.executable, "-m", "kittiwake", "--url", url, "worker"]
        if app is not None:
            command.append(app)
        command += ["--processes", str(processes), "--wait-secs", "0.5", "--delayed-poll-secs", "0.2",
                    "--registry-secs", "0.5", *args]
        self.log_offset = log_path.stat().st_size if log_path.exists() else 0
        with open(log_path, "ab") as log:
            log.write(f"--- {' '.join(command)}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=environment,
                cwd=str(TESTS_DIR), start_new_session=True,
            )
        if wait:
            self.wait_ready(processes)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[self.log_offset :]

    def ready_lines(self) -> list[tuple[str, int]]:
        return [(match.group(1), int(match.group(2))) for match in READY.finditer(self.log())]

    def wait_ready(self, count: int, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while len(self.ready_lines()) < count:
            if self.proc.poll() is not None:
                raise RuntimeError(f"worker exited with {self.proc.returncode}\n{self.log()[-3000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"worker not ready within {timeout} s\n{self.log()[-3000:]}")
            time.sleep(0.02)

    def worker_pids(self) -> list[int]:
        return [pid for _, pid in self.ready_lines()]

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL the supervisor and every worker process at once: nothing gets to clean up."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(timeout=30)

    def terminate(self, timeout: float = 60.0) -> int:
        """SIGTERM the supervisor (it stops its processes gracefully) and wait for its exit status."""
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=timeout)

    def __enter__(self) -> WorkerProcess:
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self.alive():
            self.kill()


def process_alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie, killed but not yet reaped by its parent, does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


# what `WorkerFleet.kill` does, by name
KILL_PROCESS = "process"  # SIGKILL one worker process; the supervisor respawns it
KILL_SUPERVISOR = "supervisor"  # SIGKILL the supervisor; its processes stop gracefully; a new command starts
KILL_MACHINE = "machine"  # SIGKILL the supervisor and its processes at once; a new command starts
KILL_KINDS = (KILL_PROCESS, KILL_SUPERVISOR, KILL_MACHINE)


class WorkerFleet:
    """`count` worker commands with the same arguments, killed at random and replaced (see the docstring)."""

    def __init__(self, url: str, tmp_path: Path, *args: str, count: int = 1, processes: int = 1,
                 env: dict[str, str] | None = None) -> None:
        self.url = url
        self.tmp_path = tmp_path
        self.args = args
        self.processes = processes
        self.env = env
        self.commands: list[WorkerProcess] = []
        self.retired: list[WorkerProcess] = []
        self.killed_pids: set[int] = set()
        self.kills: Counter[str] = Counter()
        for _ in range(count):
            self.commands.append(self._start(wait=True))

    def _start(self, *, wait: bool) -> WorkerProcess:
        started = len(self.commands) + len(self.retired)
        return WorkerProcess(self.url, self.tmp_path / f"worker-{started}.log", *self.args, processes=self.processes,
                             env=self.env, wait=wait)

    def live_worker_pids(self) -> list[int]:
        return [pid for command in self.commands for pid in command.worker_pids() if process_alive(pid)]

    def kill(self, rng: random.Random, kind: str | None = None) -> str:
        """SIGKILL something (`kind`, or one of `KILL_KINDS` at random); returns what was killed."""
        kind = kind or rng.choice(KILL_KINDS)
        pids = self.live_worker_pids()
        if kind == KILL_PROCESS and pids:
            pid = rng.choice(pids)
            self.killed_pids.add(pid)
            os.kill(pid, signal.SIGKILL)
        else:
            kind = KILL_MACHINE if kind == KILL_PROCESS else kind
            command = self.commands.pop(rng.randrange(len(self.commands)))
            if kind == KILL_MACHINE:
                self.killed_pids.update(pid for pid in command.worker_pids() if process_alive(pid))
                command.kill()
            else:
                os.kill(command.proc.pid, signal.SIGKILL)
                command.proc.wait(timeout=30)
            self.retired.append(command)
            self.commands.append(self._start(wait=False))
        self.kills[kind] += 1
        return kind

    def logs(self) -> str:
        return "".join(command.log() for command in self.retired + self.commands)

    def close(self) -> None:
        """Kill everything still running: whole process groups (a killed supervisor's processes
        still stopping, or one still starting, are in its group), then any worker process left."""
        for command in self.commands + self.retired:
            command.kill()
            for pid in command.worker_pids():
                if process_alive(pid):
                    os.kill(pid, signal.SIGKILL)

    def __enter__(self) -> WorkerFleet:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def workers(url: str, tmp_path: Path, *args: str, **options: object) -> WorkerProcess:
    return WorkerProcess(url, tmp_path / "worker.log", *args, **options)  # type: ignore[arg-type]


def read_lines(path: Path) -> list[str]:
    try:
        return path.read_text().splitlines()
    except FileNotFoundError:
        return []


def wait_for(condition, timeout: float = 30.0, every: float = 0.05, message: str = "condition"):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {message}")
        time.sleep(every)


def connected_app(url: str, app: object = None) -> Iterator[object]:
    """The test app (or `app`) pointed at `url`, closed afterwards."""
    if app is None:
        from worker import apps

        app = apps.app
    app.url = url  # type: ignore[attr-defined]
    try:
        yield app
    finally:
        app.close()  # type: ignore[attr-defined]


__all__: Sequence[str] = [
    "KILL_KINDS", "WorkerFleet", "WorkerProcess", "connected_app", "process_alive", "read_lines", "wait_for", "workers",
]

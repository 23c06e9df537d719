"""The worker commands of one system, started and stopped as a group of subprocesses.

Each command (`kittiwake worker …`, `celery … worker`, `rq worker-pool`, …)
starts in a session of its own, so its whole tree — Celery's prefork
children, RQ's work horses, Dramatiq's and Huey's worker processes — is one
process group the benchmark can end without touching anything else. Linux
also sends the command SIGTERM should the benchmark itself die
(`PR_SET_PDEATHSIG`), so a killed benchmark leaves no worker behind either.

`pause` and `resume` stop and continue every group (SIGSTOP, SIGCONT): a
benchmark can start the workers, let them warm up, pause them while it
submits a backlog and time the drain from the moment it resumes them. A
signal is delivered when its process next runs, so `pause` returns only once
every process of the groups is seen stopped in /proc (within
`PAUSE_WAIT_SECS`): on a busy machine a worker not yet stopped could
otherwise take and start a task of the backlog before the resume.
`stop` is each tool's own graceful shutdown first (SIGTERM to the command,
which stops its children), then SIGKILL to whatever is left of the group.
Output goes to one log file per system, shown when something fails.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Mapping, Sequence

STOP_SECS = 20.0  # for a tool's graceful shutdown, then SIGKILL
PAUSE_WAIT_SECS = 5.0  # for every process of the groups to be seen stopped after SIGSTOP
PR_SET_PDEATHSIG = 1


def _end_with_parent() -> None:
    """In the child before exec: SIGTERM when the benchmark's process goes away."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


class WorkerGroup:
    """Commands started together, in sessions of their own, and stopped together."""

    def __init__(self, commands: Sequence[Sequence[str]], env: Mapping[str, str], log_path: Path,
                 stop_secs: float = STOP_SECS) -> None:
        self.commands = [list(command) for command in commands]
        self.stop_secs = stop_secs
        self.env = dict(env)
        self.log_path = log_path
        self.processes: list[subprocess.Popen[bytes]] = []
        self.started_at = 0.0  # time.time() just before the first command started

    def start(self) -> None:
        self.started_at = time.time()
        with open(self.log_path, "ab") as log:
            for command in self.commands:
                self.processes.append(subprocess.Popen(
                    command, env=self.env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                    start_new_session=True, preexec_fn=_end_with_parent,
                ))

    def failed(self) -> str | None:
        """Why a command ended while it should be serving, or None while all run."""
        for process in self.processes:
            code = process.poll()
            if code is not None:
                command = process.args
                assert isinstance(command, list)  # started from a list of arguments (`start`)
                what = " ".join(str(part) for part in command[1:4])
                return f"{what} exited with code {code}{self.log_tail()}"
        return None

    def pause(self) -> None:
        """SIGSTOP every command's whole group: the workers keep their connections and their state,
        and run nothing until `resume`; returns once every process of them is stopped."""
        self._signal_groups(signal.SIGSTOP)
        deadline = time.monotonic() + PAUSE_WAIT_SECS
        while any(state not in "tTZX" for state in self._states().values()) and time.monotonic() < deadline:
            time.sleep(0.005)

    def _members(self) -> list[int]:
        """The processes of the groups now (each command's process group is its pid)."""
        return list(self._states())

    def _states(self) -> dict[int, str]:
        """pid -> state letter (/proc/PID/stat) of every process of the groups now."""
        groups = {process.pid for process in self.processes}
        states: dict[int, str] = {}
        for entry in os.listdir("/proc") if os.path.isdir("/proc") else ():
            if entry.isdigit():
                fields = _stat_fields(int(entry))  # [state, ppid, pgrp, ...]
                if len(fields) > 2 and int(fields[2]) in groups:
                    states[int(entry)] = fields[0]
        return states

    def resume(self) -> float:
        """SIGCONT every group paused by `pause`; time.time() just before."""
        resumed_at = time.time()
        self._signal_groups(signal.SIGCONT)
        return resumed_at

    def _signal_groups(self, signum: int) -> None:
        for process in self.processes:
            try:
                os.killpg(process.pid, signum)
            except (ProcessLookupError, PermissionError):
                pass

    def stop(self) -> None:
        """Each command's graceful shutdown, then SIGKILL to what is left of its group."""
        self._signal_groups(signal.SIGCONT)  # a paused group could not shut down
        for process in self.processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + self.stop_secs
        for process in self.processes:
            try:
                process.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        for process in self.processes:
            try:
                os.killpg(process.pid, signal.SIGKILL)  # the group is the command's session
            except (ProcessLookupError, PermissionError):
                pass
            if process.poll() is None:
                process.wait()
        self.processes = []

    def log_tail(self, characters: int = 2000) -> str:
        try:
            text = self.log_path.read_text(errors="replace")[-characters:]
        except OSError:
            return ""
        return f"; its log ends with:\n{text}" if text.strip() else ""


def _stat_fields(pid: int) -> list[str]:
    """/proc/PID/stat after the command name (which may hold spaces): [state, ppid, pgrp, ...]."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as file:
            return file.read().rpartition(")")[2].split()
    except OSError:
        return []

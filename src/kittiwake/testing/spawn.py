"""How `BrokerProcess` starts a broker's process: the `Spawn` hook and its default, a subprocess.

A `Spawn` takes the command (`python -m kittiwake.broker ARGS`) and the two files its stdout and
stderr are appended to, and returns the started process as a `Spawned`: the part of
`subprocess.Popen` the launcher uses (pid, poll, wait, send_signal). `spawn_subprocess` is the
default. A test suite that starts hundreds of brokers can pass its own — Kittiwake's own suite
forks them from a process that has the broker imported already, which listens about ten times
sooner — as long as the process behaves as `python -m kittiwake.broker` would: same exit
statuses, stdin on /dev/null, output appended to the files.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Protocol
from collections.abc import Callable, Sequence


class Spawned(Protocol):
    """A started broker process, as much of `subprocess.Popen` as `BrokerProcess` uses."""

    @property
    def pid(self) -> int: ...

    def poll(self) -> int | None:
        """The exit status once it exited (-N after signal N), else None."""
        ...

    def wait(self, timeout: float | None = None) -> int:
        """The exit status, once it exited; `subprocess.TimeoutExpired` after `timeout` seconds."""
        ...

    def send_signal(self, signal: int, /) -> None: ...


Spawn = Callable[[Sequence[str], Path, Path], Spawned]  # (command, stdout file, stderr file) -> the process


def spawn_subprocess(
    command: Sequence[str], stdout_path: Path, stderr_path: Path, *, preexec_fn: Callable[[], object] | None = None
) -> Spawned:
    """`command` as a subprocess: stdin on /dev/null, stdout and stderr appended to the two files.

    `preexec_fn` runs in the child before the broker starts (to lower a limit, say), as Popen's does."""
    with open(stdout_path, "ab") as stdout, open(stderr_path, "ab") as stderr:
        return subprocess.Popen(
            list(command), stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr, preexec_fn=preexec_fn
        )

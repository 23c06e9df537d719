"""Autoscaling worker processes (CloudKon §3.2.3): `kittiwake worker ... --autoscale MIN:MAX`.

The supervisor samples its queues' backlog (tasks waiting, not leased:
``size - leased`` from `list_queues`) every ``every_secs`` and asks a
`ScalePolicy` how many worker processes it wants:

* one more while the queues grow — the backlog did not shrink over the
  last ``window_secs`` (tasks arrive at least as fast as they are taken), or
  more tasks wait than the processes have slots;
* one fewer, down to MIN, after the backlog stayed empty for ``idle_secs``
  (and again after each further idle spell); the supervisor retires a process
  whose registry record shows it holds nothing, with SIGTERM, so nothing is lost;
* otherwise as many as now.

Wanting more than MAX: the count is capped at MAX, and ``--scale-cmd`` (a
shell command) runs with ``KITTIWAKE_DESIRED`` set to the count wanted, each
time that count changes — the hook for asking a cluster manager for nodes.
"""

from __future__ import annotations

import logging
import os
import re
import subprocess
from collections import deque
from dataclasses import dataclass

from kittiwake.client.interfaces import QueueClient

log = logging.getLogger("kittiwake.worker.autoscale")

DEFAULT_WINDOW_SECS = 2.0
DEFAULT_IDLE_SECS = 10.0
DEFAULT_EVERY_SECS = 0.5


def parse_range(text: str) -> tuple[int, int]:
    """"MIN:MAX" → (MIN, MAX), 0 <= MIN <= MAX, MAX >= 1."""
    match = re.fullmatch(r"\s*(\d+)\s*:\s*(\d+)\s*", text)
    if match is None:
        raise ValueError(f"--autoscale {text!r} is not like 1:8")
    low, high = int(match.group(1)), int(match.group(2))
    if high < 1 or low > high:
        raise ValueError(f"--autoscale {text!r}: need 0 <= MIN <= MAX and MAX >= 1")
    return low, high


@dataclass(slots=True)
class Decision:
    processes: int  # what to run here, within MIN..MAX
    wanted: int  # what the load asks for (above MAX: for --scale-cmd)


class ScalePolicy:
    """Decides the number of worker processes from backlog samples (see the module docstring)."""

    def __init__(self, minimum: int, maximum: int, *, slots_per_process: int = 1,
                 window_secs: float = DEFAULT_WINDOW_SECS, idle_secs: float = DEFAULT_IDLE_SECS) -> None:
        self.minimum, self.maximum = minimum, maximum
        self.slots_per_process = slots_per_process
        self.window_secs, self.idle_secs = window_secs, idle_secs
        self._samples: deque[tuple[float, int]] = deque()
        self._idle_since: float | None = None

    def decide(self, now: float, backlog: int, processes: int) -> Decision:
        self._samples.append((now, backlog))
        while len(self._samples) > 2 and now - self._samples[1][0] >= self.window_secs:
            self._samples.popleft()
        oldest_at, oldest = self._samples[0]
        full_window = now - oldest_at >= self.window_secs
        growing = backlog > 0 and ((full_window and backlog >= oldest) or backlog > processes * self.slots_per_process)
        if backlog > 0:
            self._idle_since = None
        elif self._idle_since is None:
            self._idle_since = now
        if growing:
            self._samples.clear()  # judge the new count on a fresh window
            self._samples.append((now, backlog))
            wanted = processes + 1
        elif self._idle_since is not None and now - self._idle_since >= self.idle_secs:
            self._idle_since = now
            wanted = processes - 1
        else:
            wanted = processes
        return Decision(max(self.minimum, min(self.maximum, wanted)), max(self.minimum, wanted))


def backlog(client: QueueClient, queues: list[str]) -> int:
    """Tasks waiting and not leased in `queues` (their local queues ``<queue>@<node>`` included)."""
    pattern = "^(" + "|".join(re.escape(name) for name in queues) + r")(@[A-Za-z0-9_.:/-]+)?$"
    return sum(max(0, info.size - info.leased) for info in client.list_queues(pattern))


def run_scale_command(command: str, wanted: int) -> None:
    """Run `--scale-cmd` with KITTIWAKE_DESIRED=wanted, in the background."""
    log.info("wanting %d worker processes: running %s", wanted, command)
    environment = dict(os.environ, KITTIWAKE_DESIRED=str(wanted))
    try:
        subprocess.Popen(command, shell=True, env=environment, stdin=subprocess.DEVNULL)
    except OSError as error:
        log.warning("--scale-cmd %s: %s", command, error)

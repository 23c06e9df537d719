"""What ran, as the tasks of kill tests write it, and the checks those tests make on it.

A task under test appends ``start <tag> <pid> <time>`` when its run begins and
``end <tag> <pid> <time>`` when it returns (one short line per write, so the
appends of concurrent processes never interleave); a gang rank writes
``<tag>/<gang id>/<rank>`` as its tag. A run whose process was SIGKILLed has
a start and no end. `parse` pairs the lines into `Run`s per tag.

The checks, as in the queue checker (`support/checker.py`), count and explain
rather than just assert:

* `order_violations`: an edge (parent, child) whose child started before any
  run of its parent had ended — never legal;
* `overlaps`: edges whose child started while a *repeat* of its parent was
  still to end (legal at least once: the repeat is explained below);
* `repeats`: each run of a tag after its first, with the reason — ``killed``
  (an earlier run's process was SIGKILLed), ``lease_lost`` (the worker logged
  losing that task's lease: it stalled past its lease, another took it), or
  ``unexplained``.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

KILLED = "killed"
LEASE_LOST = "lease_lost"
UNEXPLAINED = "unexplained"


@dataclass(slots=True)
class Run:
    """One run of a task: in which process, from when, and until when (None: it never ended)."""

    pid: int
    started_at: float
    ended_at: float | None = None


def parse(path: Path) -> dict[str, list[Run]]:
    """Runs per tag in the order they started."""
    runs: dict[str, list[Run]] = {}
    open_runs: dict[tuple[str, int], list[Run]] = {}
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return {}
    for line in lines:
        kind, tag, pid_text, stamp_text = line.split()
        pid, stamp = int(pid_text), float(stamp_text)
        if kind == "start":
            run = Run(pid, stamp)
            runs.setdefault(tag, []).append(run)
            open_runs.setdefault((tag, pid), []).append(run)
        elif kind == "end":
            pending = open_runs.get((tag, pid))
            if not pending:
                raise AssertionError(f"an end without a start: {line!r}")
            pending.pop(0).ended_at = stamp
        else:
            raise AssertionError(f"not a run line: {line!r}")
    for tag_runs in runs.values():
        tag_runs.sort(key=lambda run: run.started_at)
    return runs


def completed(runs: dict[str, list[Run]]) -> set[str]:
    return {tag for tag, tag_runs in runs.items() if any(run.ended_at is not None for run in tag_runs)}


def first_end(tag_runs: list[Run]) -> float | None:
    return min((run.ended_at for run in tag_runs if run.ended_at is not None), default=None)


def order_violations(runs: dict[str, list[Run]], edges: Iterable[tuple[str, str]]) -> list[str]:
    """Edges whose child started before any run of its parent ended (or whose parent never ran)."""
    violations = []
    for parent, child in edges:
        if child not in runs:
            continue
        ended = first_end(runs.get(parent, []))
        started = runs[child][0].started_at
        if ended is None or started < ended:
            violations.append(f"{child} started at {started:.6f}, its parent {parent} first ended at {ended}")
    return violations


def overlaps(runs: dict[str, list[Run]], edges: Iterable[tuple[str, str]]) -> int:
    """Edges whose child started before a repeat of its parent ended (explained by `repeats`)."""
    count = 0
    for parent, child in edges:
        if child in runs and parent in runs:
            last = max((run.ended_at for run in runs[parent] if run.ended_at is not None), default=0.0)
            count += runs[child][0].started_at < last
    return count


def repeats(runs: dict[str, list[Run]], killed_pids: set[int], lease_lost: set[str]) -> tuple[Counter[str], list[str]]:
    """Reasons for every run after a tag's first; (counts by reason, tags with an unexplained repeat)."""
    reasons: Counter[str] = Counter()
    unexplained: list[str] = []
    for tag, tag_runs in runs.items():
        for earlier, _ in zip(tag_runs, tag_runs[1:]):
            if earlier.pid in killed_pids:
                reasons[KILLED] += 1
            elif tag in lease_lost:
                reasons[LEASE_LOST] += 1
            else:
                reasons[UNEXPLAINED] += 1
                unexplained.append(tag)
    return reasons, unexplained

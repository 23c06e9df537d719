"""Worker slots' timelines, rebuilt from the tally: efficiency and idle-while-waiting.

Sans-IO: the tally's records (`tally.TaskRun`: start, end, process, thread)
and the submitter's acknowledgements (when each `enqueue_many` chunk was
answered, and how many tasks it held) in, numbers out. A slot is one
(process id, thread) pair: `kittiwake worker` runs each task on its slot's
own thread, so the pair names the slot for the whole run.

* efficiency = the tasks' run time, summed, ÷ (slots × (first start → last
  end)): 1.0 when every slot ran a task every moment between the two.
* idle while waiting: a slot is idle outside its tasks' runs (from the
  first acknowledgement to the last end; a slot that ran nothing is idle
  throughout), and a task waits from its acknowledgement until it starts.
  Tasks are not told apart: at a moment `t`, tasks wait while more have
  been acknowledged by `t` than have started by `t`. The figure is the
  longest stretch during which one slot was idle while a task waited — the
  promise a worker keeps is that this is never much more than one lease
  round trip — and the sum of every such stretch over every slot.

A task may start a moment before the submitter reads its chunk's answer;
until that answer the count of waiting tasks is low by the tasks already
started, so the figure can only err on the kind side, and only for that
moment.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

from kittiwake.bench.tally import TaskRun

Interval = tuple[float, float]
Slot = tuple[int, int]  # process id, thread native id


def busy_secs(runs: Iterable[TaskRun]) -> float:
    """The tasks' run time, summed."""
    return sum(run.ended - run.started for run in runs)


def efficiency(runs: Sequence[TaskRun], slots: int) -> float | None:
    """Run time ÷ (slots × (first start → last end)); None without runs or slots."""
    if not runs or slots < 1:
        return None
    makespan = max(run.ended for run in runs) - min(run.started for run in runs)
    if makespan <= 0:
        return None
    return busy_secs(runs) / (slots * makespan)


def by_slot(runs: Iterable[TaskRun]) -> dict[Slot, list[TaskRun]]:
    """Each slot's runs in the order they started."""
    slots: dict[Slot, list[TaskRun]] = {}
    for run in runs:
        slots.setdefault((run.pid, run.thread), []).append(run)
    for slot_runs in slots.values():
        slot_runs.sort(key=lambda run: run.started)
    return slots


def waiting_intervals(acknowledged: Sequence[tuple[float, int]], starts: Iterable[float]) -> list[Interval]:
    """When at least one task had been acknowledged and not yet started, as sorted disjoint intervals.

    `acknowledged` is (time, tasks) per chunk; `starts` every task's start."""
    events = sorted([(at, count) for at, count in acknowledged] + [(at, -1) for at in starts])
    intervals: list[Interval] = []
    waiting = 0
    opened: float | None = None
    index = 0
    while index < len(events):
        moment = events[index][0]
        while index < len(events) and events[index][0] == moment:  # every event of one moment at once
            waiting += events[index][1]
            index += 1
        if waiting > 0 and opened is None:
            opened = moment
        elif waiting <= 0 and opened is not None:
            if moment > opened:
                intervals.append((opened, moment))
            opened = None
    return intervals


def idle_intervals(runs: Sequence[TaskRun], window: Interval) -> list[Interval]:
    """When one slot ran nothing within `window`, given its runs in the order they started."""
    begin, end = window
    idle: list[Interval] = []
    cursor = begin
    for run in runs:
        if run.started > cursor:
            idle.append((cursor, min(run.started, end)))
        cursor = max(cursor, run.ended)
        if cursor >= end:
            break
    if cursor < end:
        idle.append((cursor, end))
    return [(start, stop) for start, stop in idle if stop > start]


def intersect(first: Sequence[Interval], second: Sequence[Interval]) -> list[Interval]:
    """The overlap of two sorted lists of disjoint intervals."""
    found: list[Interval] = []
    i = j = 0
    while i < len(first) and j < len(second):
        start = max(first[i][0], second[j][0])
        stop = min(first[i][1], second[j][1])
        if stop > start:
            found.append((start, stop))
        if first[i][1] < second[j][1]:
            i += 1
        else:
            j += 1
    return found


@dataclass(frozen=True)
class SlotTimeline:
    """One slot: its runs in the order they started, and when it was idle while a task waited."""

    name: str  # "pid/thread", or "idle slot N" for a slot that ran no task
    runs: list[TaskRun]
    idle_while_waiting: list[Interval]


def slot_timelines(runs: Sequence[TaskRun], acknowledged: Sequence[tuple[float, int]],
                   slots: int) -> list[SlotTimeline]:
    """Every slot's timeline from the first acknowledgement to the last end, `slots` of them at
    least: those that ran nothing are idle throughout."""
    if slots < 1:
        raise ValueError("slots must be at least 1")
    grouped = sorted(by_slot(runs).items())
    names = [(f"{pid}/{thread}", slot_runs) for (pid, thread), slot_runs in grouped]
    names += [(f"idle slot {number}", []) for number in range(len(names) + 1, slots + 1)]
    if not runs or not acknowledged:
        return [SlotTimeline(name, slot_runs, []) for name, slot_runs in names]
    begin = min(at for at, _ in acknowledged)
    window = (begin, max(begin, max(run.ended for run in runs)))
    waiting = waiting_intervals(acknowledged, (run.started for run in runs))
    return [SlotTimeline(name, slot_runs, intersect(idle_intervals(slot_runs, window), waiting))
            for name, slot_runs in names]


@dataclass(frozen=True)
class IdleWhileWaiting:
    """The longest stretch one slot was idle while a task waited, and the sum of them all."""

    longest_secs: float
    longest_slot: str | None  # the slot's name (`SlotTimeline.name`)
    longest_from_secs: float | None  # where the longest began, from the first acknowledgement
    total_secs: float  # over every slot
    stretches_over_limit: int  # stretches longer than the limit asked for
    slots_seen: int  # slots that ran at least one task


def idle_while_waiting(runs: Sequence[TaskRun], acknowledged: Sequence[tuple[float, int]], slots: int,
                       limit_secs: float) -> IdleWhileWaiting:
    """Idle-while-waiting over `slots` slots; see the module docstring."""
    timelines = slot_timelines(runs, acknowledged, slots)
    begin = min((at for at, _ in acknowledged), default=0.0)
    longest, longest_slot, longest_from, total, over = 0.0, None, None, 0.0, 0
    for timeline in timelines:
        for start, stop in timeline.idle_while_waiting:
            length = stop - start
            total += length
            over += length > limit_secs
            if length > longest:
                longest, longest_slot, longest_from = length, timeline.name, start - begin
    seen = sum(1 for timeline in timelines if timeline.runs)
    return IdleWhileWaiting(longest, longest_slot, longest_from, total, over, seen)

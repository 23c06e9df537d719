"""`bench.workers.slots`: efficiency and idle-while-waiting rebuilt from tally records (pure, no I/O)."""

from __future__ import annotations

import pytest

from kittiwake.bench.tally import TaskRun
from kittiwake_benchmarks.workers import slots


def run(started: float, ended: float, slot: int) -> TaskRun:
    return TaskRun(started, ended, 100, slot)


def test_efficiency_is_run_time_over_slots_times_first_start_to_last_end() -> None:
    assert slots.efficiency([run(0, 1, 1), run(0, 1, 2)], 2) == 1.0
    assert slots.efficiency([run(0, 1, 1), run(0, 0.5, 2)], 2) == 0.75
    assert slots.efficiency([run(0, 1, 1)], 2) == 0.5  # a slot that ran nothing counts
    assert slots.efficiency([], 2) is None


def test_tasks_wait_from_their_chunks_answer_until_they_start() -> None:
    assert slots.waiting_intervals([(0.0, 2)], [1.0, 3.0]) == [(0.0, 3.0)]
    assert slots.waiting_intervals([(0.0, 1), (5.0, 1)], [1.0, 6.0]) == [(0.0, 1.0), (5.0, 6.0)]
    assert slots.waiting_intervals([(1.0, 1)], [0.5]) == []  # it started before the submitter read the answer
    assert slots.waiting_intervals([(0.0, 2)], [0.0, 0.0]) == []


def test_a_slot_is_idle_outside_its_runs_within_the_window() -> None:
    runs = [run(1, 2, 1), run(3, 4, 1)]
    assert slots.idle_intervals(runs, (0.0, 5.0)) == [(0.0, 1.0), (2.0, 3.0), (4.0, 5.0)]
    assert slots.idle_intervals(runs, (1.0, 4.0)) == [(2.0, 3.0)]
    assert slots.idle_intervals([], (0.0, 5.0)) == [(0.0, 5.0)]


def test_intersect_keeps_only_the_overlap() -> None:
    assert slots.intersect([(0, 2), (3, 5)], [(1, 4)]) == [(1, 2), (3, 4)]
    assert slots.intersect([(0, 1)], [(1, 2)]) == []


def test_the_longest_stretch_a_slot_was_idle_while_a_task_waited() -> None:
    # three tasks answered at 0: slot 1 runs two back to back, slot 2 one short one; the third
    # task waits from 0 to 1, while slot 2 is idle from 0.5
    runs = [run(0, 1, 1), run(1, 2, 1), run(0, 0.5, 2)]
    found = slots.idle_while_waiting(runs, [(0.0, 3)], 2, limit_secs=0.2)
    assert found.longest_secs == pytest.approx(0.5) and found.longest_slot == "100/2"
    assert found.longest_from_secs == pytest.approx(0.5) and found.total_secs == pytest.approx(0.5)
    assert found.stretches_over_limit == 1 and found.slots_seen == 2
    # a third slot that never ran a task was idle the whole time the task waited
    found = slots.idle_while_waiting(runs, [(0.0, 3)], 3, limit_secs=0.2)
    assert found.longest_secs == pytest.approx(1.0) and found.longest_slot == "idle slot 3"
    assert found.total_secs == pytest.approx(1.5) and found.slots_seen == 2


def test_no_slot_idle_while_nothing_waits() -> None:
    runs = [run(0, 1, 1), run(0, 0.1, 2)]  # slot 2 idles from 0.1, but every task had started
    found = slots.idle_while_waiting(runs, [(0.0, 2)], 2, limit_secs=0.02)
    assert found.longest_secs == 0.0 and found.longest_slot is None and found.total_secs == 0.0
    with pytest.raises(ValueError):
        slots.idle_while_waiting(runs, [(0.0, 2)], 0, limit_secs=0.02)

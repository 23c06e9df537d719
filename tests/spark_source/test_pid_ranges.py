"""Cutting a queue into pid ranges from `peek` probes (`kittiwake.spark.pid_ranges`), against a
sorted list standing in for the queue: the ranges cover every pid exactly once, whatever the pids;
evenly spread pids give parts of about equal size; the probes stay few."""

from __future__ import annotations

import bisect
import random
import uuid

from hypothesis import example, given, settings
from hypothesis import strategies as st

from kittiwake.model import fifo_pid
from kittiwake.spark import pid_ranges


class SortedQueue:
    """The pids of one queue, probed as `peek(from_pid=x, n=1)` would, counting the probes."""

    def __init__(self, pids: list[str]) -> None:
        self.pids = sorted(set(pids))
        self.probes = 0

    def probe(self, from_pid: str | None) -> str | None:
        self.probes += 1
        index = 0 if from_pid is None else bisect.bisect_left(self.pids, from_pid)
        return self.pids[index] if index < len(self.pids) else None

    def split(self, parts: int) -> list[list[str]]:
        spans = pid_ranges.ranges(pid_ranges.boundaries(self.probe, parts))
        return [
            [pid for pid in self.pids if (start is None or pid >= start) and (stop is None or pid < stop)]
            for start, stop in spans
        ]


pid_text = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x2FF).filter(str.isprintable), min_size=1, max_size=12)


@settings(max_examples=200, deadline=None)
@given(st.lists(pid_text, min_size=0, max_size=60), st.integers(1, 9))
def test_the_ranges_cover_every_pid_exactly_once(pids: list[str], parts: int) -> None:
    queue = SortedQueue(pids)
    cuts = pid_ranges.boundaries(queue.probe, parts)
    assert cuts == sorted(set(cuts)) and set(cuts) <= set(queue.pids)
    assert len(cuts) <= parts - 1
    assert not queue.pids or queue.pids[0] not in cuts  # the first pid never starts a second range
    parts_read = queue.split(parts)
    assert [pid for part in parts_read for pid in part] == queue.pids
    assert all(parts_read[1:]), "a range after the first starts at a real pid, so it is never empty"


def test_fifo_pids_split_into_parts_of_about_equal_size() -> None:
    start = 1_795_000_000_000_000
    queue = SortedQueue([fifo_pid(start + 37 * index) for index in range(10_000)])
    sizes = [len(part) for part in queue.split(4)]
    assert len(sizes) == 4 and sum(sizes) == 10_000
    assert all(2_000 <= size <= 3_000 for size in sizes), sizes
    assert queue.probes < 200


def test_named_pids_split_evenly_too() -> None:
    queue = SortedQueue([f"order-{index:06d}" for index in range(0, 50_000, 7)])
    sizes = [len(part) for part in queue.split(5)]
    assert len(sizes) == 5 and all(abs(size - len(queue.pids) / 5) < len(queue.pids) / 10 for size in sizes), sizes


def test_one_pid_one_part_and_an_empty_queue_have_no_cuts() -> None:
    assert pid_ranges.boundaries(SortedQueue(["only"]).probe, 4) == []
    assert pid_ranges.boundaries(SortedQueue([]).probe, 4) == []
    assert pid_ranges.boundaries(SortedQueue(["a", "b"]).probe, 1) == []
    assert pid_ranges.ranges([]) == [(None, None)]


def test_pids_beyond_ascii_still_split_correctly() -> None:
    queue = SortedQueue([f"\u00e9t\u00e9-{index:03d}" for index in range(100)] + ["z\u4e16\u754c"])
    parts = queue.split(3)
    assert [pid for part in parts for pid in part] == queue.pids


def test_consecutive_fifo_pids_across_a_carry_split_evenly() -> None:
    # 400 pids a microsecond apart around a multiple of 100 ms: every decimal place from the
    # fifth carries inside the range, which no spread of FIFO pids should notice
    start = 1_795_515_379_400_000 - 200
    queue = SortedQueue([fifo_pid(start + index) for index in range(400)])
    sizes = [len(part) for part in queue.split(5)]
    assert len(sizes) == 5 and all(60 <= size <= 100 for size in sizes), sizes


@settings(max_examples=200, deadline=None)
@given(st.integers(10**15, 10**17 - 10**6), st.integers(50, 5_000), st.integers(2, 8))
@example(10**16 - 2, 5_000, 5)  # a carry through every place: the last pid must be walked whole
@example(10**8 - 100, 400, 5)
@example(1_249_999_999_999_993, 50, 8)
@example(1_249_999_999_999_762, 249, 8)
def test_consecutive_fifo_pids_split_evenly_wherever_they_start(start: int, count: int, parts: int) -> None:
    queue = SortedQueue([fifo_pid(start + index) for index in range(count)])
    sizes = [len(part) for part in queue.split(parts)]
    assert len(sizes) == parts, sizes
    assert all(abs(size - count / parts) <= count / parts / 4 + 2 for size in sizes), sizes


def test_app_task_ids_and_uuids_split_evenly() -> None:
    rng = random.Random(7)
    start = 1_795_000_000_000_000  # app task ids (`envelope.new_ids`): 14 hex digits of µs, 64 random bits
    app_ids = SortedQueue([f"{start + 9_000 * index:014x}{rng.getrandbits(64):016x}" for index in range(10_000)])
    uuids = SortedQueue([str(uuid.UUID(int=rng.getrandbits(128))) for _ in range(5_000)])
    for queue in (app_ids, uuids):
        sizes = [len(part) for part in queue.split(5)]
        count = len(queue.pids)
        assert len(sizes) == 5 and all(abs(size - count / 5) < count / 10 for size in sizes), sizes
        assert queue.probes < 400

"""The read budget, sans-IO: readers stop and resume as the bytes held across connections demand.

The last test is a seeded simulation: readers with frames of random sizes, some
of which stall one byte short until the frame timeout cuts them, read what the
budget lets them; after every step the bytes held stay within the documented
bound, and every frame that is not stalled completes. A failure prints its seed.
"""

from __future__ import annotations

import random

import pytest

from kittiwake.broker.read_budget import FULL_READ_BYTES, SMALL_READ_BYTES, ReadBudget

MIB = 1024 * 1024


class FakeReader:
    """A connection that only records whether the budget lets it read."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.reading = True

    def hold_for_budget(self, held: bool) -> None:
        assert self.reading == held, f"{self.name}: told to {'stop' if held else 'resume'} twice"
        self.reading = not held

    def __repr__(self) -> str:
        return self.name


def test_bytes_are_charged_as_they_arrive_not_as_announced() -> None:
    budget = ReadBudget(64 * MIB, 16 * MIB)
    reader = FakeReader("a")
    budget.charge(reader, 4, 4 + 16 * MIB, completed=False)
    assert budget.held_bytes == 4
    budget.charge(reader, 1000, 4 + 16 * MIB, completed=False)
    assert budget.held_bytes == 1000
    budget.charge(reader, 0, 0, completed=True)
    assert budget.held_bytes == 0
    budget.forget(reader)
    assert budget.held_bytes == 0


def test_above_the_line_readers_in_the_middle_of_a_frame_stop_and_one_finishes() -> None:
    budget = ReadBudget(4 * MIB, 1 * MIB)  # the line is at 2 MiB
    first, second, third = FakeReader("first"), FakeReader("second"), FakeReader("third")
    budget.charge(first, int(1.5 * MIB), 2 * MIB, completed=False)
    assert first.reading and budget.read_bytes(second) == FULL_READ_BYTES
    budget.charge(second, MIB, 1 * MIB + 100, completed=False)  # crosses the line
    assert not second.reading or budget.finisher is second
    assert budget.finisher is second  # it misses the fewest bytes, and they fit under the limit
    budget.charge(third, 10, 100, completed=False)
    assert not third.reading
    assert budget.read_bytes(FakeReader("between frames")) == SMALL_READ_BYTES
    assert budget.read_bytes(second) == FULL_READ_BYTES
    budget.charge(second, 0, 0, completed=True)  # its frame is whole: back under the line, all read
    assert third.reading and budget.finisher is None
    assert budget.read_bytes(third) == FULL_READ_BYTES


def test_a_finisher_that_stalls_loses_its_turn() -> None:
    budget = ReadBudget(4 * MIB, 1 * MIB)
    stalling, patient = FakeReader("stalling"), FakeReader("patient")
    budget.charge(stalling, 2 * MIB + 10, 2 * MIB + 20, completed=False)
    assert budget.finisher is stalling
    budget.charge(patient, 100, 500_000, completed=False)
    assert not patient.reading
    budget.check_progress()  # notes where the finisher stands
    budget.check_progress()  # nothing arrived since
    assert budget.finisher is patient and patient.reading and not stalling.reading
    budget.charge(patient, 0, 0, completed=True)
    assert budget.finisher is stalling and stalling.reading  # its turn again, with nobody else waiting


def test_a_finisher_is_chosen_only_if_its_frame_fits_under_the_limit() -> None:
    budget = ReadBudget(4 * MIB, 1 * MIB)  # the line is at 2 MiB
    hog, stalling = FakeReader("hog"), FakeReader("stalling")
    budget.charge(hog, 2 * MIB, 2 * MIB + 1, completed=False)
    budget.charge(stalling, int(1.5 * MIB), int(1.5 * MIB) + 1, completed=False)
    assert budget.finisher is stalling
    big, small = FakeReader("big"), FakeReader("small")
    budget.charge(big, 10, MIB, completed=False)
    budget.charge(small, 10, 200, completed=False)
    assert not big.reading and not small.reading
    budget.check_progress()
    budget.check_progress()
    # half a MiB is left under the limit: the big frame would not fit, a request split across reads does
    assert budget.finisher is small and small.reading and not big.reading
    budget.charge(small, 0, 0, completed=True)
    assert budget.finisher is stalling and not big.reading  # the big frame waits for room
    budget.forget(hog)  # cut by the frame timeout, say: back under the line, all read
    assert big.reading and stalling.reading


def test_forgetting_a_connection_frees_its_bytes_and_resumes_the_stopped() -> None:
    budget = ReadBudget(4 * MIB, 1 * MIB)
    hog, waiting = FakeReader("hog"), FakeReader("waiting")
    budget.charge(hog, 3 * MIB, 3 * MIB + 1, completed=False)
    budget.charge(waiting, 100, 10 * 1024, completed=False)
    budget.check_progress()
    budget.check_progress()
    budget.forget(hog)
    assert budget.held_bytes == 100 and waiting.reading


@pytest.mark.parametrize("seed", range(20))
def test_simulated_clients_stay_within_the_bound_and_every_frame_that_keeps_coming_completes(seed: int) -> None:
    rng = random.Random(seed)
    limit, max_frame = 8 * MIB, 2 * MIB
    budget = ReadBudget(limit, max_frame)
    readers = [FakeReader(f"r{number}") for number in range(rng.randint(2, 40))]
    frames = {reader: rng.choice([rng.randint(5, 2000), rng.randint(5, max_frame)]) for reader in readers}
    held = dict.fromkeys(readers, 0)
    stalled = set(rng.sample(readers, rng.randint(0, len(readers) // 2)))
    completed = 0
    bound = limit + FULL_READ_BYTES + len(readers) * SMALL_READ_BYTES
    for step in range(20_000):
        if step == 10_000:  # the frame timeout cuts the stalled
            for reader in stalled:
                budget.forget(reader)
                held[reader], frames[reader] = 0, 0
            readers = [reader for reader in readers if reader not in stalled]
        reader = rng.choice(readers)
        sendable = frames[reader] - held[reader] - (reader in stalled)
        if reader.reading and sendable > 0:  # a stalled reader sends all of its frame but one byte
            held[reader] += min(rng.randint(1, budget.read_bytes(reader)), sendable)
            if held[reader] == frames[reader]:
                held[reader], frames[reader] = 0, 0
                completed += 1
                budget.charge(reader, 0, 0, completed=True)
            else:
                budget.charge(reader, held[reader], frames[reader], completed=False)
        if step % 200 == 0:
            budget.check_progress()
        assert budget.held_bytes == sum(held.values()), f"seed {seed}"
        assert budget.held_bytes <= bound, f"seed {seed}: {budget.held_bytes} held, bound {bound}"
    unfinished = [reader for reader in readers if frames[reader]]
    assert not unfinished, f"seed {seed}: frames still incomplete: {unfinished}"
    assert completed == len(readers), f"seed {seed}"

"""A worker process's capacity: leasers take free units; a parked task coming back claims one first."""

from __future__ import annotations

import threading
import time

from kittiwake.worker.capacity import Capacity


def test_leasers_take_what_is_free_and_give_it_back() -> None:
    capacity = Capacity(3)
    assert capacity.take(5, timeout=0.0) == 3
    assert capacity.take(1, timeout=0.01) == 0
    capacity.give(2)
    assert capacity.take(1, timeout=0.0) == 1


def test_a_claim_waits_for_a_unit_and_gives_up_after_its_timeout() -> None:
    capacity = Capacity(1)
    assert capacity.take(1, timeout=0.0) == 1
    assert capacity.claim(timeout=0.05) is False
    capacity.give(1)
    assert capacity.claim(timeout=0.05) is True
    assert capacity.free == 0


def test_a_waiting_claim_goes_before_a_leaser_that_keeps_taking() -> None:
    """A leaser gives its unit back after an empty long-poll and asks again at once; a claim
    waiting meanwhile must get the unit, or a parked task would never run again."""
    capacity = Capacity(1)
    assert capacity.take(1, timeout=0.0) == 1
    claimed = threading.Event()

    def claim() -> None:
        if capacity.claim(timeout=5.0):
            claimed.set()

    claimer = threading.Thread(target=claim)
    claimer.start()
    deadline = time.monotonic() + 5.0
    while capacity._claims == 0 and time.monotonic() < deadline:  # until the claim is waiting
        time.sleep(0.001)
    capacity.give(1)
    assert capacity.take(1, timeout=0.0) == 0  # the leaser asks again at once: the unit is the claim's
    claimer.join(5.0)
    assert claimed.is_set()


def test_a_leaser_waits_until_enough_units_are_free_to_lease_a_bundle() -> None:
    capacity = Capacity(10)
    assert capacity.take(10, timeout=0.0) == 10
    capacity.give(3)
    assert capacity.take(10, timeout=0.02, least=5) == 0  # 3 free: not yet a bundle
    capacity.give(2)
    assert capacity.take(10, timeout=0.0, least=5) == 5
    capacity.give(1)
    assert capacity.take(1, timeout=0.0, least=5) == 1  # asking for fewer than `least` takes what it asks


def test_a_waiting_leaser_wakes_once_its_bundle_is_free() -> None:
    capacity = Capacity(4)
    assert capacity.take(4, timeout=0.0) == 4
    got: list[int] = []
    leaser = threading.Thread(target=lambda: got.append(capacity.take(4, timeout=5.0, least=2)))
    leaser.start()
    time.sleep(0.05)
    capacity.give(1)
    time.sleep(0.05)
    assert not got  # one unit is not a bundle
    capacity.give(1)
    leaser.join(5.0)
    assert got == [2]


def test_resizing_moves_the_free_units_and_keeps_the_taken_ones() -> None:
    capacity = Capacity(2)
    assert capacity.take(2, timeout=0.0) == 2
    capacity.resize(6)
    assert capacity.take(10, timeout=0.0) == 4
    capacity.resize(1)  # 6 taken, 1 allowed: nothing free until 6 came back
    capacity.give(5)
    assert capacity.take(1, timeout=0.0) == 0
    capacity.give(1)
    assert capacity.take(5, timeout=0.0) == 1


def test_a_waiting_leaser_returns_at_once_when_the_total_shrinks() -> None:
    capacity = Capacity(8)
    assert capacity.take(8, timeout=0.0) == 8
    got: list[int] = []
    leaser = threading.Thread(target=lambda: got.append(capacity.take(8, timeout=30.0, least=4)))
    leaser.start()
    time.sleep(0.05)
    started = time.monotonic()
    capacity.resize(2)
    leaser.join(5.0)
    assert got == [0] and time.monotonic() - started < 5.0
    assert capacity.free == -6  # six tasks held above the new total: the leaser gives them back

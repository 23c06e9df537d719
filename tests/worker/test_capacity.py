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
    time.sleep(0.1)  # the claim is waiting
    capacity.give(1)
    assert capacity.take(1, timeout=0.0) == 0  # the leaser asks again at once: the unit is the claim's
    claimer.join(5.0)
    assert claimed.is_set()

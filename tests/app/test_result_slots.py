"""Result slots: the first outcome wins, and a waiter wakes when the outcome comes, alone or in a batch."""

from __future__ import annotations

import threading

from kittiwake.app.result_slots import ResultSlot


def test_the_first_outcome_wins() -> None:
    slot = ResultSlot.empty()
    assert not slot.is_set() and not slot.wait(0.01)
    slot.set(True, 1)
    slot.set(False, "a duplicate run's error")
    assert slot.is_set() and slot.wait(0) and (slot.ok, slot.value) == (True, 1)


def test_waiters_wake_on_their_own_slot_and_on_a_batch() -> None:
    arrivals = threading.Condition(threading.Lock())
    slots = [ResultSlot(arrivals) for _ in range(3)]
    woke: list[int] = []

    def waiter(index: int) -> None:
        if slots[index].wait(10):
            woke.append(index)

    threads = [threading.Thread(target=waiter, args=(index,)) for index in range(3)]
    for thread in threads:
        thread.start()
    slots[0].set(True, "alone")
    threads[0].join(10)
    assert woke == [0] and not slots[1].is_set()
    with arrivals:  # the collector's way: fill a batch, notify once
        assert slots[1].fill(True, "batch") and slots[2].fill(False, "batch")
        assert not slots[1].fill(True, "again")
        arrivals.notify_all()
    for thread in threads:
        thread.join(10)
    assert sorted(woke) == [0, 1, 2]
    assert [(slot.ok, slot.value) for slot in slots] == [(True, "alone"), (True, "batch"), (False, "batch")]

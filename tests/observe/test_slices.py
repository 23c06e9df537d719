"""`observe.slices`: a request's budget of reads, and slices of work that yield to the loop.

Pure: the clock is a list the test moves; the pauses run on `asyncio.run`.
"""

from __future__ import annotations

import asyncio

import pytest

from kittiwake.observe.slices import Budget, BudgetSpent, Slices


def test_a_budget_is_spent_by_calls_or_by_rows_and_a_part_spends_the_whole() -> None:
    budget = Budget(max_calls=3, max_rows=10)
    budget.charge(1, 4)
    budget.charge(1, 6)
    assert not budget.spent
    with pytest.raises(BudgetSpent):
        budget.charge(0, 1)  # the eleventh row
    assert budget.spent
    with pytest.raises(BudgetSpent):
        budget.charge(0, 0)  # spent stays spent
    whole = Budget(max_calls=5, max_rows=100)
    part = whole.part(max_calls=2, max_rows=100)
    part.charge()
    part.charge()
    with pytest.raises(BudgetSpent):
        part.charge()  # the part is spent, the whole is not
    assert part.spent and not whole.spent and whole.calls == 3
    other = whole.part(max_calls=10, max_rows=100)
    other.charge()
    other.charge()
    with pytest.raises(BudgetSpent):
        other.charge()  # the whole's sixth call
    assert whole.spent


def test_slices_yield_once_their_time_is_used() -> None:
    now = [0.0]
    slices = Slices(clock=lambda: now[0], slice_secs=0.01)

    async def work() -> list[bool]:
        paused = [await slices.pause()]
        now[0] = 0.02
        paused.append(await slices.pause())
        paused.append(await slices.pause())  # a new slice started at 0.02
        return paused

    assert asyncio.run(work()) == [False, True, False] and slices.pauses == 1

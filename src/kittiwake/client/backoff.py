"""How long to wait between connection attempts: capped exponential backoff within a budget.

A broker that restarts is usually back within a second or two, so the first
retries come quickly (50 ms) and the delay doubles up to a 2 s ceiling; the
whole episode is bounded by the client's `connect_timeout`, after which the
caller gets `BrokerUnreachable`. One connect attempt is itself bounded
(`MAX_CONNECT_ATTEMPT_SECS`), so a black-holed address still gets several
attempts within the budget.

`connect_attempts` is the schedule both connection pools follow (the blocking
`pool`, the asyncio `async_pool`): a pure generator of `Attempt`s, each saying
how long to pause before it and how long it may take, with the clock passed
in — so the pools only do the waiting (on an event that `close()` sets, so a
closed client stops at once), and tests need no clock. `delay_secs` and
`next_delay_secs` are the same doubling for other retry loops.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

FIRST_DELAY_SECS = 0.05
MAX_DELAY_SECS = 2.0
DEFAULT_CONNECT_TIMEOUT_SECS = 10.0
MAX_CONNECT_ATTEMPT_SECS = 2.0
# An attempt made with the budget spent still gets this long (it may find the broker back).
MIN_CONNECT_ATTEMPT_SECS = 0.001


def delay_secs(attempt: int, first: float = FIRST_DELAY_SECS, ceiling: float = MAX_DELAY_SECS) -> float:
    """The pause after failed attempt number `attempt` (0-based)."""
    return min(ceiling, first * float(1 << min(attempt, 32)))


def next_delay_secs(attempt: int, remaining_secs: float) -> float | None:
    """The pause before the next attempt, clipped to the budget left; None when the budget is spent."""
    if remaining_secs <= 0:
        return None
    return min(delay_secs(attempt), remaining_secs)


@dataclass(frozen=True, slots=True)
class Attempt:
    """One connection attempt of a schedule."""

    number: int  # 0-based
    pause_secs: float  # wait this long before making it (0 for the first)
    timeout_secs: float  # the attempt's own bound, counted from the end of the pause


def connect_attempts(
    budget_secs: float,
    clock: Callable[[], float],
    max_attempt_secs: float = MAX_CONNECT_ATTEMPT_SECS,
) -> Iterator[Attempt]:
    """The attempts to make within `budget_secs` from now by `clock` (seconds, monotonic).

    The first comes at once; after each, the next is yielded when its pause fits
    what is left of the budget (clipped to it), and the schedule ends when the
    budget is spent. The caller asks for the next attempt only after the last
    one failed, so the clock is read then.
    """
    deadline = clock() + budget_secs
    yield Attempt(0, 0.0, _attempt_secs(budget_secs, max_attempt_secs))
    number = 0
    while True:
        remaining = deadline - clock()
        pause = next_delay_secs(number, remaining)
        if pause is None:
            return
        number += 1
        yield Attempt(number, pause, _attempt_secs(remaining - pause, max_attempt_secs))


def _attempt_secs(remaining_secs: float, max_attempt_secs: float) -> float:
    return max(MIN_CONNECT_ATTEMPT_SECS, min(remaining_secs, max_attempt_secs))

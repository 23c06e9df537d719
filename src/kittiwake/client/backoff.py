"""How long to wait between connection attempts: capped exponential backoff within a budget.

A broker that restarts is usually back within a second or two, so the first
retries come quickly (50 ms) and the delay doubles up to a 2 s ceiling; the
whole episode is bounded by the client's `connect_timeout`, after which the
caller gets `BrokerUnreachable`. The schedule is a pure function of the
attempt number so both clients share it and tests need no clock.
"""

from __future__ import annotations

FIRST_DELAY_SECS = 0.05
MAX_DELAY_SECS = 2.0
DEFAULT_CONNECT_TIMEOUT_SECS = 10.0


def delay_secs(attempt: int, first: float = FIRST_DELAY_SECS, ceiling: float = MAX_DELAY_SECS) -> float:
    """The pause after failed attempt number `attempt` (0-based)."""
    return min(ceiling, first * float(1 << min(attempt, 32)))


def next_delay_secs(attempt: int, remaining_secs: float) -> float | None:
    """The pause before the next attempt, clipped to the budget left; None when the budget is spent."""
    if remaining_secs <= 0:
        return None
    return min(delay_secs(attempt), remaining_secs)

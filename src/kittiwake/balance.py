"""How evenly work is spread: the one measure of balance the cluster's status, its dashboard page and
its benchmark report (Fabriq's "worst server against the mean")."""

from __future__ import annotations

from collections.abc import Sequence


def load_deviation(tasks: Sequence[int]) -> float:
    """Percent by which the count furthest from the mean lies from it; 0 for none or a zero mean."""
    if not tasks:
        return 0.0
    mean = sum(tasks) / len(tasks)
    if mean == 0:
        return 0.0
    return max(abs(count - mean) for count in tasks) / mean * 100.0

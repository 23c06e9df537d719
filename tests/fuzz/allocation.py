"""The peak memory one call allocates, held to a budget (tracemalloc).

The fuzz targets promise that nothing allocates in proportion to a length a
peer announced but did not send: a frame header saying 16 MiB, a msgpack
array header saying four billion items. `allocation_budget` measures the
peak of Python allocations inside its block and fails when it passes the
budget, which the targets set from what was actually received.

Tracing is started and stopped around each block, except in a fuzzing process
(`keep_tracing`): there, starting and stopping tracemalloc for every input
grows the process by a few hundred bytes an input (CPython 3.11), a gigabyte
in a ten-minute run, so tracing stays on instead.
"""

from __future__ import annotations

import tracemalloc
from contextlib import contextmanager
from typing import Iterator


_keep_tracing = False


def keep_tracing() -> None:
    """Leave tracemalloc on from the first block to the end of the process."""
    global _keep_tracing
    _keep_tracing = True


class OverBudget(AssertionError):
    """The block allocated more than its budget at some point."""


@contextmanager
def allocation_budget(limit_bytes: int, what: str) -> Iterator[None]:
    """Fail if the block's peak allocation goes over `limit_bytes`."""
    started = not tracemalloc.is_tracing()
    if started:
        tracemalloc.start()
    try:
        before, _ = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        yield
        _, peak = tracemalloc.get_traced_memory()
    finally:
        if started and not _keep_tracing:
            tracemalloc.stop()
    if peak - before > limit_bytes:
        raise OverBudget(f"{what} allocated {peak - before} bytes at its peak, over its budget of {limit_bytes}")

"""Plumbing shared by every benchmark's helper processes: starting asyncio on
uvloop inside them, and stopping a set of them.

A member is a (process, pipe, counter) triple: the parent sends jobs down the
pipe and `None` to stop; the counter shows live progress.
"""

from __future__ import annotations

import asyncio
from typing import Any


def use_uvloop() -> None:
    """In a helper process: run asyncio on uvloop when it is installed."""
    try:
        import uvloop
    except ImportError:
        return
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())


def stop_processes(members: list[tuple[Any, Any, Any]]) -> None:
    """Ask each member to stop, then make sure it did."""
    for _process, pipe, _counter in members:
        try:
            pipe.send(None)
        except (BrokenPipeError, OSError):
            pass
    for process, pipe, _counter in members:
        process.join(5)
        if process.is_alive():
            process.terminate()
            process.join(5)
        pipe.close()

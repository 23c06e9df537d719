"""Repeating a broker call through a broker restart, for the calls that are safe to repeat.

A `Transient` failure (`errors.Transient`: the broker restarting, a lost
connection, a timeout) may leave a request's outcome unknown, so only a call
whose repetition changes nothing more is repeated: an enqueue whose tasks all
have pids (they collapse), a lease (what an unanswered lease took comes back
when its lease runs out), a dequeue or renewal by lease id (fenced), a read.
The pauses follow the client's reconnect schedule (`client.backoff`), within a
deadline; past it the last failure is raised.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

from kittiwake import errors
from kittiwake.client.backoff import next_delay_secs

log = logging.getLogger("kittiwake.client.retries")

T = TypeVar("T")

DEADLINE_SECS = 60.0


def retrying(call: Callable[[], T], deadline_secs: float = DEADLINE_SECS) -> T:
    """`call()`, repeated after `Transient` failures for up to `deadline_secs`."""
    deadline = time.monotonic() + deadline_secs
    attempt = 0
    while True:
        try:
            return call()
        except errors.Transient as exc:
            pause = next_delay_secs(attempt, deadline - time.monotonic())
            if pause is None:
                raise
            log.info("broker not available, retrying in %.2f s: %s", pause, exc)
            time.sleep(pause)
            attempt += 1

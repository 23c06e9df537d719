"""Changes other brokers announce, turned into long-poll wake-ups (brokers sharing a PostgreSQL schema).

The store's presence thread (`store.postgres_presence`) receives each
announcement, "<incarnation>\\n<queue>\\n<queue>…" or "<incarnation>\\n*" when
the list was too long ("*" alone after its own session came back). This module
parses it on that thread and hands the queues to the event loop, where the
group commit marks them ready and runs a pass: parked long-polls on them try
again, claim the queues and see the other broker's tasks. A broker's own
announcements are skipped (its commits already woke its long-polls).

Announcements are hints; the poll (`POLL_TICKS`) catches what is lost.
"""

from __future__ import annotations

import asyncio
from typing import Callable, Literal

POLL_TICKS = 10  # every tenth sweep tick (a second) parked long-polls look again anyway


def parse(payload: str, own_incarnation: int) -> list[str] | None | Literal[False]:
    """The queues an announcement names; None for "perhaps any"; False for one of our own."""
    head, _, rest = payload.partition("\n")
    if head == "*":
        return None
    if head == str(own_incarnation):
        return False
    if rest == "*":
        return None
    return [name for name in rest.split("\n") if name]


def listen(store: object, loop: asyncio.AbstractEventLoop, wake: Callable[[list[str] | None], None]) -> bool:
    """Start handing the store's announcements to `wake` on `loop`; False when the store has none."""
    presence = getattr(store, "presence", None)
    if presence is None:
        return False
    incarnation = getattr(store, "incarnation", 0)

    def on_notify(payload: str) -> None:  # the presence thread
        queues = parse(payload, incarnation)
        if queues is not False and not loop.is_closed():
            loop.call_soon_threadsafe(wake, queues)

    presence.on_notify = on_notify
    presence.start()
    return bool(getattr(store, "shared", False))

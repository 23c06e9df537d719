"""A queue client's reads answered from an engine's state at a given `now`, for readers between passes.

A reader in the broker's own process (the dashboard's views) reads the
engine between group-commit passes, as the last pass left it. These
functions answer the read calls of a queue client — `list_queues`, `peek`,
`get`, `stats` (`kittiwake.client.interfaces.QueueReads`) — from an
`EngineState` and a `now`, and change nothing: they claim no queue (a claim,
`engine.coherence`, locks queues in a transaction that only a pass commits),
sweep no lease (a lease that ran out and is not swept yet still counts as
leased) and refill no head. So they show what this broker committed.

Tasks come back as `inspection.view` makes them (a map of the fields of the
client's task view): the engine names no wire type, the caller builds its
own (`kittiwake.observe.engine_reader`).

A listing may be walked in pieces: `list_queues_page` walks at most
`max_walked` names and says where the next piece starts, so a caller that
reads on an event loop holds it one piece at a time. Which names a listing
takes is decided once (`Listing`): the pattern's matcher, the least number of
tasks, the names the reader may see, and the literal start of an anchored
pattern (`literal_prefix`), which is looked up in the sorted names rather
than scanned for.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

from kittiwake.engine import inspection
from kittiwake.engine.queue_patterns import name_matcher
from kittiwake.engine.state import EngineState
from kittiwake.model import QueueInfo, QueueStats, dead_queue_of, validate_count, validate_queue

NameFilter = Callable[[str], bool]

MAX_SAMPLE = 1000  # leases shown per queue by `stats`, at most (as the engine's own stats)
_PATTERN_SPECIAL = set(".^$*+?{}[]\\|()")


def literal_prefix(pattern: str) -> str:
    """The text every name an anchored pattern (`^…`) matches starts with ("" when there is none)."""
    if not pattern.startswith("^") or "|" in pattern:  # an alternative may start anywhere
        return ""
    prefix: list[str] = []
    index = 1
    while index < len(pattern):
        char = pattern[index]
        if char == "\\" and index + 1 < len(pattern) and not pattern[index + 1].isalnum():
            prefix.append(pattern[index + 1])
            index += 2
            continue
        if char in _PATTERN_SPECIAL:
            break
        prefix.append(char)
        index += 1
    if index < len(pattern) and pattern[index] in "*?{":  # the last character may repeat zero times
        prefix = prefix[:-1]
    return "".join(prefix)


@dataclass(frozen=True, slots=True)
class Listing:
    """Which queues a `list_queues` takes, decided once for every piece of its walk."""

    matches: NameFilter | None  # the pattern's matcher (None: every name)
    prefix: str  # every name the pattern matches starts with this
    floor: int  # the least number of tasks a queue listed holds (at least 1)
    visible: NameFilter | None  # the names the reader may see (None: every name)


def listing(pattern: str | None, min_tasks: int = 0, visible: NameFilter | None = None) -> Listing:
    """The `Listing` of `list_queues(pattern, min_tasks)` for a reader that sees `visible` names;
    BadRequest for a pattern RE2 refuses."""
    if pattern is None:
        return Listing(None, "", max(1, min_tasks), visible)
    return Listing(name_matcher(pattern), literal_prefix(pattern), max(1, min_tasks), visible)


def list_queues_page(
    state: EngineState, asked: Listing, limit: int | None, after: str | None = None, max_walked: int | None = None
) -> tuple[list[QueueInfo], str | None]:
    """Up to `limit` rows (None: every row) of the listing in name order, from the name after
    `after` on, walking at most `max_walked` names (None: as many as it takes); and the name the
    next piece goes on after (None: the listing is done)."""
    queues = state.queues
    rows: list[QueueInfo] = []
    if limit is not None and limit <= 0:
        return rows, None
    prefix, floor, matches, visible = asked.prefix, asked.floor, asked.matches, asked.visible
    names = state.names.irange(minimum=after or prefix or None, inclusive=(after is None, True))
    for walked, name in enumerate(names, 1):
        if not name.startswith(prefix):
            break
        queue = queues[name]
        if queue.size >= floor and (matches is None or matches(name)) and (visible is None or visible(name)):
            rows.append(QueueInfo(name, queue.size, len(queue.leased)))
            if limit is not None and len(rows) >= limit:
                break
        if max_walked is not None and walked >= max_walked:
            return rows, name
    return rows, None


def list_queues(
    state: EngineState, pattern: str | None = None, min_tasks: int = 0, limit: int = 1000,
    visible: NameFilter | None = None, start_after: str | None = None,
) -> list[QueueInfo]:
    """Queues in name order past `start_after` whose name matches `pattern` (searched, not
    anchored), holding at least max(1, `min_tasks`) tasks, that the reader sees; at most `limit`."""
    asked = listing(pattern, min_tasks, visible)
    rows, _ = list_queues_page(state, asked, limit, start_of(asked, start_after))
    return rows


def start_of(asked: Listing, start_after: str | None) -> str | None:
    """Where a walk past `start_after` begins: None (at the listing's prefix) when the name sorts
    before every name the listing can take."""
    if start_after is None or start_after < asked.prefix:
        return None
    return start_after


def peek(state: EngineState, queue: str, n: int, from_pid: str | None, now: float) -> list[dict[str, Any]]:
    """Up to `n` (at most the batch limit) tasks of `queue` in pid order from `from_pid` on, under
    the reply budget, leasing none."""
    views, _ = inspection.scan_page(state, queue, min(n, state.limits.max_batch), from_pid, now)
    return views


def get(state: EngineState, queue: str, pid: str, now: float) -> dict[str, Any]:
    """One task by pid (in a dead-letter queue, the original pid finds its newest dead letter);
    TaskNotFound when there is none."""
    return inspection.find_view(state, queue, pid, now)


def stats(state: EngineState, queues: Sequence[str], sample: int, now: float) -> list[QueueStats]:
    """The statistics of the named queues (once each, in the order named), with up to `sample`
    leases each; a queue that holds nothing has zeros."""
    validate_count(sample, "sample", 0, MAX_SAMPLE)
    for name in queues:
        validate_queue(name, state.limits)
    found = state.queues
    return [
        inspection.queue_stats(name, found.get(name), found.get(dead_queue_of(name)), sample, now)
        for name in dict.fromkeys(queues)
    ]

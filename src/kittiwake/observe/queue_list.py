"""`GET /api/queues`: every queue as a row, filtered, sorted and paged on the broker.

A broker may hold 100K queues, and each open dashboard asks for a page once a
second, so a request builds rows for its page only, and what it reads of
every queue is kept while it stays true:

* rows: one per queue, in name order; a dead-letter queue `<q>.dead` is the
  `dead` column of `<q>`'s row (a row of its own with `dead=1`), and a queue
  whose only tasks are dead letters still has its row;
* filter: a substring of the name, or a glob when it holds `*` or `?`
  (`kittiwake.queue_globs`, linear in the name), whose literal start narrows
  the names looked at to a range of the sorted ones;
* the selection — which rows a filter and a principal's rights take, each
  with its queue's state — depends only on which queues exist, so
  `RowIndex` keeps it until the engine's names change
  (`EngineState.names_changes`): on a steady broker a page sorted by name
  costs its own rows;
* pages by name: `offset` counts rows from the first (from the last for
  `order=desc`), and is a position in the kept selection, so a deep page
  costs no more than the first; `after=NAME` (with `sort=name` only) starts
  past a name instead — the rows after NAME in name order, or before it for
  `order=desc`, found by bisection in the selection, with `offset` then
  counted from there — and the answer's `next_after` is the name that starts
  the next page (None: this page is the last). A name cursor stays right
  while queues come and go between pages, where an offset would skip or
  repeat rows; NAME need not be a queue;
* sort by name: the selection's order; by a figure: the figure of each
  selected queue read from its state (counts; rates from the last minute's
  buckets, `rates.recent_counts`; oldest age from a bounded sample, the
  head's first task in insertion order — the oldest of a FIFO queue unless
  one was released since — and up to `OLDEST_LEASED_SAMPLE` leased tasks),
  then only the first `offset + limit`
  ranked (a heap) unless that is most of them. Ties keep name order; queues
  with no age sort last either way;
* the page's rows carry the full figures: rates per second over a minute and
  the oldest task's age over every task in memory (`oldest_enqueued_at`).

The counts are the engine's: `leased` counts leases not yet swept after
running out (the broker sweeps ten times a second).
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, bisect_right
from collections import OrderedDict
from dataclasses import dataclass
from itertools import compress, islice
from operator import methodcaller, not_
from typing import Any, Callable, Hashable, Mapping, cast

from kittiwake import errors
from kittiwake.engine.queue_state import QueueState
from kittiwake.engine.rates import DEQUEUE, ENQUEUE, LEASE, recent_counts
from kittiwake.engine.state import EngineState
from kittiwake.model import DEAD_SUFFIX, Limits, Task
from kittiwake.observe import params
from kittiwake.observe.reads import Visible
from kittiwake.queue_globs import PatternError, compile_pattern

SORTS = ("name", "size", "available", "leased", "blocked", "dead", "enqueue_rate", "dequeue_rate", "oldest_age")
ORDERS = ("asc", "desc")
DEFAULT_LIMIT = 50
MAX_LIMIT = 500
MAX_OFFSET = 100_000_000
MAX_FILTER_CHARS = 512
RATE_WINDOW_SECS = 60.0
OLDEST_LEASED_SAMPLE = 16
GLOB_CHARACTERS = "*?["
INFINITY = float("inf")


@dataclass(frozen=True, slots=True)
class QueuesQuery:
    """What `/api/queues` was asked for (`of` reads and checks the query string)."""

    filter: str | None = None
    sort: str = "name"
    order: str = ""  # "": asc for the name, desc for a figure
    offset: int = 0
    limit: int = DEFAULT_LIMIT
    dead_rows: bool = False
    after: str | None = None  # sort=name only: the rows past this name (in the order asked)

    def __post_init__(self) -> None:
        if not self.order:
            object.__setattr__(self, "order", "asc" if self.sort == "name" else "desc")
        if self.after is not None and self.sort != "name":
            raise errors.BadRequest("after pages by name: it takes sort=name")

    @classmethod
    def of(cls, query: Mapping[str, str], limits: Limits) -> QueuesQuery:
        """The query asked for; `after` is checked as a queue name under `limits`."""
        made = cls(
            filter=params.text(query, "filter", MAX_FILTER_CHARS),
            sort=params.choice(query, "sort", SORTS, "name"),
            order=params.choice(query, "order", ORDERS, ""),
            offset=params.integer(query, "offset", 0, 0, MAX_OFFSET),
            limit=params.integer(query, "limit", DEFAULT_LIMIT, 1, MAX_LIMIT),
            dead_rows=params.flag(query, "dead"),
            after=params.optional_queue(query, "after", limits),
        )
        name_matcher(made.filter)  # a bad glob is refused before anything is read
        return made


def name_matcher(text: str | None) -> Callable[[str], bool] | None:
    """The filter as a predicate over names (None: no filter)."""
    if text is None:
        return None
    if not any(char in text for char in GLOB_CHARACTERS):
        return methodcaller("__contains__", text)  # called in C over 100K names
    if "[" in text:
        raise errors.BadRequest("filter: globs take * and ? only (no [...] classes: '[' is in no queue name)")
    try:
        pattern = compile_pattern(text)
    except PatternError as exc:
        raise errors.BadRequest(f"filter: {exc}") from None
    if text.endswith("*") and text.count("*") == 1 and "?" not in text:
        return methodcaller("startswith", text[:-1])
    return pattern.matches


def _filter_prefix(text: str | None) -> str:
    """What every name a glob filter matches starts with ("" for a substring: it may be anywhere)."""
    if text is None or not any(char in text for char in GLOB_CHARACTERS):
        return ""
    cut = min(index for index in (text.find("*"), text.find("?")) if index >= 0)
    return text[:cut]


class Rows:
    """The rows of one selection, in name order: their names, each one's queue state (None: only its
    dead letters are left; looked up the first time a figure is wanted), and `dead`, every
    dead-letter queue's state by the queue it belongs to."""

    __slots__ = ("names", "dead", "_queues", "_states")

    def __init__(self, names: list[str], dead: dict[str, QueueState], queues: dict[str, QueueState],
                 states: list[QueueState | None] | None = None) -> None:
        self.names = names
        self.dead = dead
        self._queues = queues
        self._states = states

    @property
    def states(self) -> list[QueueState | None]:
        if self._states is None:
            self._states = list(map(self._queues.get, self.names))
        return self._states

    def where(self, keep: Callable[[str], bool], start: int = 0, stop: int | None = None) -> Rows:
        """The rows from `start` to `stop` whose name `keep` takes."""
        names = self.names[start:stop]
        taken = list(map(keep, names))
        states = list(compress(self._states[start:stop], taken)) if self._states is not None else None
        return Rows(list(compress(names, taken)), self.dead, self._queues, states)


def all_rows(state: EngineState, dead_rows: bool) -> Rows:
    """Every row of the table, in name order (one pass over the names; see the module docstring)."""
    queues = state.queues
    names: list[str] = list(state.names)
    is_dead = list(map(methodcaller("endswith", DEAD_SUFFIX), names))
    dead = {name[: -len(DEAD_SUFFIX)]: queues[name] for name in compress(names, is_dead)}
    if dead_rows:
        return Rows(names, dead, queues)
    live = list(compress(names, map(not_, is_dead)))
    orphans = sorted(original for original in dead if original not in queues)
    if len(orphans) * 8 < len(live):  # few: put each in its place
        for original in orphans:
            live.insert(bisect_left(live, original), original)
    elif orphans:
        live = list(heapq.merge(live, orphans))
    return Rows(live, dead, queues)


def select(state: EngineState, text: str | None, dead_rows: bool, visible: Visible | None,
           base: Rows | None = None) -> Rows:
    """The rows the filter `text` and `visible` take (from `base`, the table's every row, when given)."""
    rows = base if base is not None else all_rows(state, dead_rows)
    matches = name_matcher(text)
    if matches is not None:
        prefix = _filter_prefix(text)
        start = bisect_left(rows.names, prefix) if prefix else 0
        stop = bisect_left(rows.names, prefix + "\U0010ffff") if prefix else None
        rows = rows.where(matches, start, stop)
    if visible is not None:
        rows = rows.where(visible)
    return rows


class RowIndex:
    """Selections of rows kept until the engine's names change (`EngineState.names_changes`): a
    page of a steady table costs its rows, not a pass over 100K names. At most `MAX_SELECTIONS`
    are kept, the least recently used dropped first (each holds two lists as long as its rows:
    1.6 MB for 100K)."""

    MAX_SELECTIONS = 16

    def __init__(self) -> None:
        self._state: EngineState | None = None
        self._changes = -1
        self._selections: OrderedDict[Hashable, Rows] = OrderedDict()

    def select(self, state: EngineState, text: str | None, dead_rows: bool, visible: Visible | None,
               visible_key: Hashable = None) -> Rows:
        """`select`, remembered; `visible_key` names `visible` (the principal it was made for)."""
        if state is not self._state or state.names_changes != self._changes:
            self._state, self._changes = state, state.names_changes
            self._selections.clear()
        key = (text, dead_rows, visible_key if visible is not None else None)
        rows = self._selections.get(key)
        if rows is None:
            base_key = (None, dead_rows, None)
            base = self._selections.get(base_key)
            if base is None:
                base = self._selections[base_key] = all_rows(state, dead_rows)
            rows = select(state, text, dead_rows, visible, base)
            self._selections[key] = rows
            while len(self._selections) > self.MAX_SELECTIONS:
                self._selections.popitem(last=False)
        self._selections.move_to_end(key)
        return rows


def _oldest_ages(states: list[QueueState | None], now: float) -> list[float | None]:
    """A bounded look per queue: the head's first task in memory (the head's dict keeps insertion
    order: for a FIFO queue, enqueue order) and up to `OLDEST_LEASED_SAMPLE` leased tasks."""
    ages: list[float | None] = []
    append = ages.append
    for queue in states:
        oldest: float | None = None
        if queue is not None:
            if queue.available:  # the dict's own order, not the sorted one: no sort key is walked
                oldest = next(iter(dict.values(cast("dict[str, Task]", queue.available)))).enqueued_at
            if queue.leased:
                for task in islice(queue.leased.values(), OLDEST_LEASED_SAMPLE):
                    if oldest is None or task.enqueued_at < oldest:
                        oldest = task.enqueued_at
        append(now - oldest if oldest is not None else None)
    return ages


def sort_values(rows: Rows, sort: str, visible: Visible | None, now: float) -> list[Any]:
    """Each row's figure for `sort` (None: it has none, as a queue with no task has no age)."""
    states = rows.states
    if sort == "size":
        return [queue.size if queue is not None else 0 for queue in states]
    if sort == "available":
        return [queue.size - len(queue.leased) - queue.blocked if queue is not None else 0 for queue in states]
    if sort == "leased":
        return [len(queue.leased) if queue is not None else 0 for queue in states]
    if sort == "blocked":
        return [queue.blocked if queue is not None else 0 for queue in states]
    if sort in ("enqueue_rate", "dequeue_rate"):
        windows = [queue.rates if queue is not None else None for queue in states]
        return recent_counts(windows, ENQUEUE if sort == "enqueue_rate" else DEQUEUE, now, RATE_WINDOW_SECS)
    if sort == "dead":
        values: list[Any] = [0] * len(states)
        names = rows.names
        for original, dead in rows.dead.items():
            index = bisect_left(names, original)
            if index < len(names) and names[index] == original and (visible is None or visible(dead.name)):
                values[index] = dead.size
        return values
    if sort == "oldest_age":
        return _oldest_ages(states, now)
    raise errors.BadRequest(f"sort must be one of {', '.join(SORTS)}")


def ordered(rows: Rows, query: QueuesQuery, visible: Visible | None, now: float) -> list[int]:
    """The indexes of the page's rows, in the query's order (ties, and name order, by name)."""
    offset, limit, count, after = query.offset, query.limit, len(rows.names), query.after
    if query.sort == "name":
        if query.order == "asc":
            start = offset + (bisect_right(rows.names, after) if after is not None else 0)
            return list(range(min(start, count), min(start + limit, count)))
        end = max(0, (bisect_left(rows.names, after) if after is not None else count) - offset)
        return list(range(end - 1, max(0, end - limit) - 1, -1))
    values = sort_values(rows, query.sort, visible, now)
    sign = -1 if query.order == "desc" else 1
    keys = [sign * value if value is not None else INFINITY for value in values]  # no figure: last either way
    wanted = offset + limit
    # stable: equal keys keep the rows' name order
    ranked = sorted(range(count), key=keys.__getitem__) if wanted * 4 >= count else heapq.nsmallest(
        wanted, range(count), key=keys.__getitem__)
    return ranked[offset:wanted]


def queue_row(state: EngineState, name: str, visible: Visible | None, now: float) -> dict[str, Any]:
    """One row of the table (and the base of `/api/queue`'s stats)."""
    queue = state.queues.get(name)
    dead_name = name + DEAD_SUFFIX
    dead = state.queues.get(dead_name)
    row: dict[str, Any] = {
        "queue": name, "size": 0, "available": 0, "leased": 0, "blocked": 0,
        "dead": dead.size if dead is not None and (visible is None or visible(dead_name)) else 0,
        "enqueue_rate": 0.0, "lease_rate": 0.0, "dequeue_rate": 0.0, "oldest_age_secs": None,
    }
    if queue is None:
        return row
    oldest = queue.oldest_enqueued_at()
    row.update(
        size=queue.size,
        available=queue.size - len(queue.leased) - queue.blocked,
        leased=len(queue.leased),
        blocked=queue.blocked,
        enqueue_rate=_rate(queue, ENQUEUE, now),
        lease_rate=_rate(queue, LEASE, now),
        dequeue_rate=_rate(queue, DEQUEUE, now),
        oldest_age_secs=max(0.0, now - oldest) if oldest is not None else None,
    )
    return row


def _rate(queue: QueueState, kind: int, now: float) -> float:
    rates = queue.rates
    return rates.recent(kind, now, RATE_WINDOW_SECS) / RATE_WINDOW_SECS if rates is not None else 0.0


def queue_page(state: EngineState, query: QueuesQuery, visible: Visible | None, now: float,
               index: RowIndex | None = None, visible_key: Hashable = None) -> dict[str, Any]:
    """The `/api/queues` answer (rows from `index` when given)."""
    if index is not None:
        rows = index.select(state, query.filter, query.dead_rows, visible, visible_key)
    else:
        rows = select(state, query.filter, query.dead_rows, visible)
    page = ordered(rows, query, visible, now)
    return {
        "total": len(rows.names),
        "offset": query.offset,
        "limit": query.limit,
        "sort": query.sort,
        "order": query.order,
        "after": query.after,
        "next_after": _next_after(rows, query, page),
        "generated_at": now,
        "queues": [queue_row(state, rows.names[position], visible, now) for position in page],
    }


def _next_after(rows: Rows, query: QueuesQuery, page: list[int]) -> str | None:
    """The `after` of the page past this one, by name (None: sorted by a figure, or no rows follow)."""
    if query.sort != "name" or not page:
        return None
    last = page[-1]
    more = last + 1 < len(rows.names) if query.order == "asc" else last > 0
    return rows.names[last] if more else None


def totals(state: EngineState, visible: Visible | None, index: RowIndex | None = None,
           visible_key: Hashable = None) -> dict[str, int]:
    """The overview's sums over every visible queue; `queues` counts the rows `/api/queues` lists."""
    if index is not None:
        rows = index.select(state, None, False, visible, visible_key)
    else:
        rows = select(state, None, False, visible)
    live = [queue for queue in rows.states if queue is not None]
    tasks = sum([queue.size for queue in live])
    leased = sum([len(queue.leased) for queue in live])
    blocked = sum([queue.blocked for queue in live])
    dead = sum([queue.size for queue in rows.dead.values() if visible is None or visible(queue.name)])
    return {"queues": len(rows.names), "tasks": tasks, "available": tasks - leased - blocked, "leased": leased,
            "blocked": blocked, "dead": dead}

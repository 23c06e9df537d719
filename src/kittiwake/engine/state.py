"""Everything the engine holds, declared in one place: `EngineState`.

The engine is functions over this one dataclass: the state is data, the
operations are code that takes it. Functions rather than objects that each
hold a slice of the state, because nearly every operation reads and changes
several slices at once (a lease touches the head, the leased set, the expiry
heap, the counters and the rates): a function that takes the whole state says
so in its signature, where objects holding slices would have to reach into
one another's. Each operation module says which fields it changes; nothing
else in the engine keeps state of its own.

Where a task is (see `transitions` for the moves between places):

* `queues[name].available` — the head: available tasks the cache holds
  (TaskMaster §5.4). Available tasks above a queue's horizon are in the store
  only, counted by `QueueState.stored_available`.
* `queues[name].leased` — every task under a lease, whatever its pid, until
  it is dequeued, released, or a sweep expires it (a lease that ran out stays
  here until then: lazy expiry, §5.6).
* blocked — waiting for parents, in the store only, counted by
  `QueueState.blocked`.
* dead — a new task of `<queue>.dead` (see `failures.bury`).
* gone — no row at all.

Around them:

* `names` — every queue in `queues`, sorted, for list_queues and stats;
  `names_changes` counts the changes to it (and so to which queue states
  `queues` holds), so a reader of every queue may keep what it derived from
  them until the count moves.
* `recent` — queues by last use (least recent first): which head to evict
  when `memory_bytes` passes `cache_bytes`.
* `expiry` — a heap of (expires_at, lease_id, queue, pid), one entry per
  lease granted or renewed; an entry whose lease was renewed, finished or
  released since is stale and skipped when it comes up. Compacted when it
  passes `expiry_compact_at` entries.
* `ready` — queues that gained available tasks since the broker last asked
  (it wakes parked long-polls); `throttled` — rate-limited queues and when
  their next token is due.
* `last_fifo_micros`, `last_lease_id` — the last FIFO clock reading and lease
  id issued; `reserved` — their persisted high-water marks (see `ids`);
  `marks` — the store's other counters as recovery read them, which the
  engine does not use (a cluster node's identity, `engine.identity`);
* `memory_bytes` — bytes of every head together; `refills` — head refills
  from the store so far (a figure for tests and stats).
* `next_prune_at` — when `prune_idle` next scans for idle empty queues.
* `joins`, `join_ports`, `join_sequences`, `join_tokens` — the declared
  joins, which join each port queue belongs to, the tokens counted per
  sequence, and the pids of the tokens waiting in each port (`joins`).
* `store`, `limits`, `head_tasks`, `cache_bytes` — what the engine was made
  with: the store it reads and writes, the published limits, the head size
  per queue and the memory budget of all heads.
* `tally` — the task moves since the broker last took it (`tally`): what
  the metrics count, once the pass that made them committed.
* `shared`, `id_slot`, `id_stride` — whether other brokers share the store
  (every queue is then claimed before use, `coherence`), and this broker's
  share of the id space (`ids`): ids = id_slot modulo id_stride;
  `due_asked_at` — when the store was last asked for queues with leases due.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Iterable

from sortedcontainers import SortedList

from kittiwake.engine.mutations import DropQueue, Mutation
from kittiwake.engine.queue_state import QueueState
from kittiwake.engine.rates import RateWindow
from kittiwake.engine.storage import QueueSummary, TaskStore
from kittiwake.engine.tally import Tally
from kittiwake.join_spec import JoinSpec
from kittiwake.model import FIFO_PID_DIGITS, Limits, Task, validate_queue

LEASE_ID_COUNTER = "lease_id"
FIFO_COUNTER = "fifo_micros"
EXPIRY_COMPACT_MIN = 1024  # expiry heap entries before renewals' stale entries are compacted away
PRUNE_EVERY_SECS = 60.0  # scanning every queue for idle empties is O(queues)


def _counters() -> dict[str, int]:
    return {LEASE_ID_COUNTER: 0, FIFO_COUNTER: 0}


@dataclass(slots=True, eq=False)
class EngineState:
    """All queue state of one broker. Not thread-safe: one caller at a time."""

    store: TaskStore
    limits: Limits
    head_tasks: int
    cache_bytes: int
    queues: dict[str, QueueState] = field(default_factory=dict)
    names: SortedList[str] = field(default_factory=SortedList)
    names_changes: int = 0
    recent: OrderedDict[str, None] = field(default_factory=OrderedDict)
    expiry: list[tuple[float, int, str, str]] = field(default_factory=list)
    expiry_compact_at: int = EXPIRY_COMPACT_MIN
    ready: set[str] = field(default_factory=set)
    throttled: dict[str, float] = field(default_factory=dict)
    last_fifo_micros: int = 0
    last_lease_id: int = 0
    reserved: dict[str, int] = field(default_factory=_counters)
    marks: dict[str, int] = field(default_factory=dict)
    memory_bytes: int = 0
    refills: int = 0
    next_prune_at: float = 0.0
    joins: dict[str, JoinSpec] = field(default_factory=dict)
    join_ports: dict[str, str] = field(default_factory=dict)
    join_sequences: dict[tuple[str, str], list[int]] = field(default_factory=dict)
    join_tokens: dict[str, set[str]] = field(default_factory=dict)
    shared: bool = False
    due_asked_at: float | None = None
    id_slot: int = 0
    id_stride: int = 1
    tally: Tally = field(default_factory=Tally)


def open_queue(state: EngineState, name: str) -> QueueState:
    """The state of queue `name`, made on first use."""
    queue = state.queues.get(name)
    if queue is None:
        queue = state.queues[name] = QueueState(name)
        state.names.add(name)
        state.names_changes += 1
    return queue


def rates_of(queue: QueueState) -> RateWindow:
    """The queue's rate window, made on first activity."""
    if queue.rates is None:
        queue.rates = RateWindow()
    return queue.rates


def flush(state: EngineState, mutations: list[Mutation]) -> None:
    """Hand the mutations so far to the store and empty the list. Called
    after each item of a batch, so that an item that reads the store (a
    dedupe or lease look-up of a task beyond the head) sees what the
    items before it did."""
    if mutations:
        state.store.write(mutations)
        mutations.clear()


def forget_if_empty(state: EngineState, queue: QueueState) -> None:
    """Drop a queue's memory once it holds nothing and has no rates to show."""
    if queue.size == 0 and not queue.leased and queue.rates is None:
        drop_memory(state, queue)


def drop_memory(state: EngineState, queue: QueueState) -> None:
    state.memory_bytes -= queue.memory_bytes
    state.queues.pop(queue.name, None)
    state.names.discard(queue.name)
    state.names_changes += 1
    state.recent.pop(queue.name, None)


def delete_queue(state: EngineState, name: str) -> int:
    """Drop a queue and every task in it, in constant time (the store bumps the
    queue's generation and reaps its rows later, TaskMaster §5.2); returns how many."""
    validate_queue(name, state.limits)
    queue = state.queues.get(name)
    if queue is None:
        return 0
    drop_memory(state, queue)
    state.store.write([DropQueue(name)])
    state.tally.dropped.append(name)
    return queue.size


def prune_idle(state: EngineState, now: float) -> None:
    """Once a minute, forget empty queues whose rates went idle."""
    if now < state.next_prune_at:
        return
    state.next_prune_at = now + PRUNE_EVERY_SECS
    for queue in list(state.queues.values()):
        if queue.size == 0 and not queue.leased and (queue.rates is None or queue.rates.idle_since(now)):
            drop_memory(state, queue)


def recover(state: EngineState, now: float) -> None:
    """Load the store's summary: queue sizes, leases, counters. A lease that
    ran out while the broker was down is held until the first sweep, which
    counts its failed attempt exactly as if the broker had stayed up."""
    recovery = state.store.recover(now)
    queues = state.queues
    for summary in recovery.queues:
        queues[summary.queue] = queue_of_summary(state, summary)
    state.names.update(queues)  # one sort, not 100K bisected inserts
    state.names_changes += 1
    reserved = state.reserved
    for name, value in recovery.counters.items():
        if name in reserved:
            reserved[name] = max(reserved[name], value)
        else:
            state.marks[name] = value
    state.last_fifo_micros = max(state.last_fifo_micros, reserved[FIFO_COUNTER])
    hold_leases(state, (*recovery.leased, *recovery.expired))
    state.last_lease_id = max(state.last_lease_id, reserved[LEASE_ID_COUNTER])


def queue_of_summary(state: EngineState, summary: QueueSummary) -> QueueState:
    """A queue's state as its stored summary says, with an empty head (refilled on demand)."""
    queue = QueueState(summary.queue, size=summary.size, complete=summary.size == 0)
    queue.max_pid = summary.max_pid
    queue.max_fifo_pid = summary.max_fifo_pid or ""
    queue.blocked = summary.blocked
    pid = summary.max_fifo_pid if summary.max_fifo_pid is not None else summary.max_pid
    if len(pid) == FIFO_PID_DIGITS and pid.isascii() and pid.isdigit():
        state.last_fifo_micros = max(state.last_fifo_micros, int(pid))
    return queue


def hold_leases(state: EngineState, tasks: Iterable[Task]) -> None:
    """Stored leases, running or run out, into their queues' leased sets and the expiry heap."""
    queues = state.queues
    for task in tasks:
        queue = queues.get(task.queue)
        if queue is None:
            continue
        queue.leased[task.pid] = task
        assert task.lease_expires_at is not None
        heapq.heappush(state.expiry, (task.lease_expires_at, task.lease_id, task.queue, task.pid))

"""The head cache (TaskMaster §5.4): which available tasks memory holds, and finding a task.

Each queue keeps its lowest-pid available tasks in memory (`QueueState`
explains the horizon and the invariant); the rest is in the store and comes
back by refill when a lease runs the head low. All heads together stay within
`EngineState.cache_bytes`: an over-long head is trimmed back to `head_tasks`,
and past the budget whole heads of the least recently used queues are
evicted. Because of that, a task may be in memory or only in the store, and
`find` / `exists` look in both, asking the store only when memory cannot
answer (a pid above the horizon, or a queue with blocked tasks, which are
never in memory).

Changes `EngineState.memory_bytes`, `recent`, `ready` and `refills`, and the
heads of `QueueState`.
"""

from __future__ import annotations

from kittiwake.engine.queue_state import QueueState
from kittiwake.engine.state import EngineState
from kittiwake.model import Task

REFILLS_PER_LEASE = 8  # bounded: directed tasks for others may fill every refill


def touch(state: EngineState, queue: QueueState) -> None:
    """The queue was used: last in line for eviction."""
    recent = state.recent
    name = queue.name
    if name in recent:
        recent.move_to_end(name)
    else:
        recent[name] = None


def add_available(state: EngineState, queue: QueueState, task: Task) -> None:
    """A task became available: into the head if the head covers it. Every
    way in (enqueue, release, expiry, dead-lettering, a parent finishing)
    trims the head, so a mass expiry cannot grow it past 2 * head_tasks."""
    if queue.covers(task.pid):
        state.memory_bytes += queue.add_available(task)
        trim_head(state, queue)
        touch(state, queue)  # so enforce_cache can evict this head
    state.ready.add(queue.name)


def trim_head(state: EngineState, queue: QueueState) -> None:
    if len(queue.available) > 2 * state.head_tasks:
        state.memory_bytes -= queue.evict_to(state.head_tasks)


def refill(state: EngineState, queue: QueueState, now: float) -> None:
    """Load the next slice of the queue above the horizon (TaskMaster §5.4.2)."""
    rows = state.store.load_available(queue.name, queue.horizon, state.head_tasks, now)
    state.memory_bytes += queue.absorb(rows, state.head_tasks)
    touch(state, queue)
    state.refills += 1


def ensure_head(
    state: EngineState, queue: QueueState, want: int, receiver: str | None, max_pid: str | None, now: float
) -> None:
    """Refill until the head holds `want` tasks a lease for `receiver` may
    take (or a quarter of `head_tasks`), the store has no more, or
    REFILLS_PER_LEASE refills were spent."""
    low_water = max(want, state.head_tasks // 4)
    for _ in range(REFILLS_PER_LEASE):
        if queue.complete or queue.stored_available <= 0:
            return
        if max_pid is not None and queue.horizon >= max_pid:
            return  # everything <= max_pid is already in memory
        if _leasable_in_head(queue, receiver) >= low_water:
            return
        refill(state, queue, now)


def _leasable_in_head(queue: QueueState, receiver: str | None) -> int:
    count = len(queue.open)
    if receiver is not None:
        bucket = queue.directed.get(receiver)
        if bucket:
            count += len(bucket)
    return count


def enforce_cache(state: EngineState) -> None:
    """Evict whole heads of the least recently used queues while memory is
    above the cache setting, down to 90% of it."""
    if state.memory_bytes <= state.cache_bytes:
        return
    target = int(state.cache_bytes * 0.9)
    recent = state.recent
    queues = state.queues
    while state.memory_bytes > target and recent:
        name, _ = recent.popitem(last=False)
        queue = queues.get(name)
        if queue is not None and queue.available:
            state.memory_bytes -= queue.evict_to(0)


def find(state: EngineState, queue: QueueState, pid: str) -> Task | None:
    """The task at pid, leased or available or blocked, from memory or the store."""
    task = queue.leased.get(pid) or queue.available.get(pid)
    if task is None and (queue.blocked or not queue.covers(pid)):
        task = state.store.load_task(queue.name, pid)
    return task


def exists(state: EngineState, queue: QueueState, pid: str) -> bool:
    if pid in queue.leased or pid in queue.available:
        return True
    if pid > queue.max_pid or (queue.covers(pid) and not queue.blocked):
        return False  # above every pid the queue ever had (ids that grow with time), or known absent
    return state.store.load_task(queue.name, pid) is not None

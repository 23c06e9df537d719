"""The queue engine: TaskMaster's data model plus Paštas' receivers, sans-IO.

Commands and `now` (epoch seconds, passed in) go in; results come out, and the
changes to persist go to the injected `TaskStore` as mutations. The engine
never commits: the broker commits a whole batch of requests at once and only
then sends their replies, so "ok" always means "on disk".

`Engine` is a facade: it holds one `EngineState` (`state`) and hands each
call to the module that owns the operation. Where to read the semantics:

* `state` — everything the engine holds, and recovery from the store;
* `transitions` — a task's states and the table of moves between them;
* `enqueue` — new tasks, FIFO pids, dedupe; `ids` — FIFO pids and lease ids;
* `leases` — lease, renew, release, dequeue, lazy expiry, fencing;
* `update` — several of those at once, all or nothing, within one group;
* `failures` — attempts, burial into `<queue>.dead`, cancel;
* `dependencies` — parents and children; `dead_letters` — requeue, purge;
* `head_cache` — which available tasks memory holds (TaskMaster §5.4);
* `coherence` — several brokers on one store: claims and reloads;
* `joins` — tokens that start one job when all of a join's ports hold them;
* `inspection` — peek, get, list_queues, stats and other read-only views;
* `reads` — a client's reads answered from the state at `now`, changing
  nothing, for readers between passes (the dashboard's flows view).
"""

from __future__ import annotations

from typing import Any, Sequence

from kittiwake.constants import DEFAULT_LEASE_SECS
from kittiwake import errors
from kittiwake.engine import coherence, dead_letters, dependencies, enqueue, failures, inspection, join_index, joins, leases, update
from kittiwake.engine.dead_letters import DeadLetterPage
from kittiwake.engine.state import FIFO_COUNTER, LEASE_ID_COUNTER, EngineState, delete_queue, prune_idle, recover
from kittiwake.engine.storage import TaskStore, is_shared
from kittiwake.engine.update import UpdateOutcome
from kittiwake.join_spec import JoinSpec
from kittiwake.model import (
    DEAD_REASON_HEADER,
    EnqueueOutcome,
    ItemOutcome,
    LeaseRef,
    LeasedTasks,
    LeaseRequest,
    Limits,
    NewTask,
    QueueInfo,
    QueueStats,
    Task,
    validate_queue,
)

__all__ = ["DEAD_REASON_HEADER", "FIFO_COUNTER", "LEASE_ID_COUNTER", "Engine"]


class Engine:
    """All queue state of one broker, behind the calls the broker makes. Not
    thread-safe: one caller at a time."""

    def __init__(
        self,
        store: TaskStore,
        *,
        limits: Limits | None = None,
        head_tasks: int = 1000,
        cache_bytes: int = 256 * 1024 * 1024,
        id_class: tuple[int, int] = (0, 1),
    ) -> None:
        """`id_class` (residue, modulus): the ids this broker issues are the residue modulo the
        modulus (a cluster node's index among its nodes, `ids`); a shared store's own share of
        the id space is cut out of it."""
        self.state = state = EngineState(store, limits or Limits(), head_tasks, cache_bytes)
        residue, modulus = id_class
        if not (modulus >= 1 and 0 <= residue < modulus):
            raise ValueError(f"id class {residue} modulo {modulus} is not a residue class")
        state.id_slot, state.id_stride = residue, modulus
        if is_shared(store):  # other brokers use the store too: see `coherence`
            state.shared = True
            # within this broker's class, the store's share: ids = residue (mod modulus) and
            # store slot (mod store stride) of the id / modulus
            state.id_slot = residue + modulus * store.id_slot
            state.id_stride = modulus * store.id_stride

    # the settings and figures callers read
    @property
    def store(self) -> TaskStore:
        return self.state.store

    @property
    def limits(self) -> Limits:
        return self.state.limits

    @property
    def head_tasks(self) -> int:
        return self.state.head_tasks

    @property
    def cache_bytes(self) -> int:
        return self.state.cache_bytes

    @property
    def memory_bytes(self) -> int:
        return self.state.memory_bytes

    @property
    def refills(self) -> int:
        return self.state.refills

    # ----------------------------------------------------------- lifecycle

    def recover(self, now: float) -> None:
        recover(self.state, now)
        joins.recover(self.state)

    def sweep(self, now: float) -> int:
        return leases.sweep(self.state, now)

    def maintain(self, now: float) -> None:
        """Periodic housekeeping: sweep leases; once a minute, forget empty queues whose rates went idle."""
        leases.sweep(self.state, now)
        prune_idle(self.state, now)

    def take_ready(self) -> set[str]:
        return leases.take_ready(self.state)

    def next_expiry(self) -> float | None:
        return leases.next_expiry(self.state)

    # ------------------------------------------------------------- changes

    def enqueue(self, tasks: Sequence[NewTask], now: float) -> list[EnqueueOutcome]:
        return enqueue.enqueue(self.state, tasks, now)

    def validate_lease(self, request: LeaseRequest) -> None:
        leases.validate_lease(self.state, request)

    def lease(self, request: LeaseRequest, now: float) -> LeasedTasks:
        return leases.lease(self.state, request, now)

    def dequeue(self, refs: Sequence[LeaseRef], now: float) -> list[ItemOutcome]:
        return leases.dequeue(self.state, refs, now)

    def renew(
        self,
        refs: Sequence[LeaseRef],
        lease_secs: float,
        now: float,
        progress: float | None = None,
        note: str | None = None,
    ) -> list[ItemOutcome]:
        return leases.renew(self.state, refs, lease_secs, now, progress, note)

    def release(
        self, refs: Sequence[LeaseRef], reason: str | None, now: float, bury: bool = False, reject: bool = False
    ) -> list[ItemOutcome]:
        return leases.release(self.state, refs, reason, now, bury, reject)

    def update(
        self,
        *,
        enqueue: Sequence[NewTask] = (),
        dequeue: Sequence[LeaseRef] = (),
        renew: Sequence[LeaseRef] = (),
        release: Sequence[LeaseRef] = (),
        lease_secs: float = DEFAULT_LEASE_SECS,
        reason: str | None = None,
        now: float,
    ) -> UpdateOutcome:
        return update.update(
            self.state,
            enqueue=enqueue,
            dequeue=dequeue,
            renew=renew,
            release=release,
            lease_secs=lease_secs,
            reason=reason,
            now=now,
        )

    def cancel(self, keys: Sequence[tuple[str, str]], reason: str | None, now: float) -> list[ItemOutcome]:
        return failures.cancel(self.state, keys, reason, now)

    @property
    def shared(self) -> bool:
        return self.state.shared

    def claim(self, queues: Sequence[str], sweep_at: float | None = None) -> None:
        """With a shared store, lock these queues for the transaction and bring their state up to
        date (`coherence`): the broker claims what a batch names before running it, with the
        queues a sweep at `sweep_at` will reach, all in one call."""
        if self.state.shared:
            if sweep_at is not None:
                queues = [*queues, *leases.due_queues(self.state, sweep_at)]
            coherence.claim_many(self.state, queues)

    def delete_queue(self, queue: str) -> int:
        validate_queue(queue, self.state.limits)
        coherence.claim(self.state, queue)
        join_index.check_queues(self.state, [queue], "delete")
        if queue in self.state.join_ports:
            join_index.forget_queue(self.state, queue)
        if queue in self.state.queues:
            dependencies.finish_parents_of_deleted_queue(self.state, queue)
        return delete_queue(self.state, queue)

    def requeue_dead(
        self, queue: str, pids: list[str] | None, now: float, *, after_pid: str | None = None, limit: int = 1000
    ) -> DeadLetterPage:
        return dead_letters.requeue_dead(self.state, queue, pids, now, after_pid=after_pid, limit=limit)

    def purge_dead(
        self, queue: str, pids: list[str] | None, now: float, *, after_pid: str | None = None, limit: int = 1000
    ) -> DeadLetterPage:
        return dead_letters.purge_dead(self.state, queue, pids, now, after_pid=after_pid, limit=limit)

    def declare_join(self, spec: JoinSpec, now: float) -> str:
        if self.state.shared:
            raise errors.BadRequest("joins need a store that one broker serves; this store is shared by several")
        return joins.declare(self.state, spec, now)

    def drop_join(self, name: str) -> bool:
        return joins.drop(self.state, name)

    def purge_join(self, name: str, key: str, limit: int = 10_000) -> int:
        return joins.purge(self.state, name, key, limit)

    # --------------------------------------------------------------- views

    def list_joins(self, pattern: str | None = None) -> list[dict[str, Any]]:
        return joins.infos(self.state, pattern)

    view = staticmethod(inspection.view)

    def dead_letters_of(self, dead_queue: str, pid: str) -> list[Task]:
        return failures.dead_letters_of(self.state, dead_queue, pid)

    def peek(self, queue: str, n: int, from_pid: str | None, now: float) -> list[dict[str, Any]]:
        return inspection.peek(self.state, queue, n, from_pid, now)

    def get(self, queue: str, pid: str, now: float) -> dict[str, Any]:
        return inspection.get(self.state, queue, pid, now)

    def find_by_sender(
        self, sender: str, queue: str | None, limit: int, now: float, after: tuple[str, str] | None = None
    ) -> list[dict[str, Any]]:
        return inspection.find_by_sender(self.state, sender, queue, limit, now, after)

    def queues_for_receiver(self, receiver: str) -> list[str]:
        return inspection.queues_for_receiver(self.state, receiver)

    def list_queues(
        self, pattern: str | None, min_tasks: int, limit: int, start_after: str | None = None
    ) -> list[QueueInfo]:
        return inspection.list_queues(self.state, pattern, min_tasks, limit, start_after)

    def stats(
        self, queues: Sequence[str] | None, pattern: str | None, sample: int, now: float
    ) -> list[QueueStats]:
        return inspection.stats(self.state, queues, pattern, sample, now)

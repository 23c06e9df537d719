"""The queue engine: TaskMaster's data model plus Paštas' receivers, sans-IO.

Commands and `now` (epoch seconds, passed in) go in; results come out, and the
changes to persist go to the injected `TaskStore` as mutations. The engine
never commits: the broker commits a whole batch of requests at once and only
then sends their replies, so "ok" always means "on disk".

Semantics (TaskMaster §2–§5, Paštas ch. 2–4):

* enqueue: a task without pid gets a FIFO pid from a broker-wide monotonic
  microsecond clock (`model.fifo_pid`), so FIFO pids grow in every queue even
  when the wall clock steps back. A pid that exists (available or leased)
  collapses: the existing task is kept and the outcome says `collapsed`.
* lease: up to `max_tasks` available tasks in pid order across the named
  queues, pid <= `max_pid` if given. A task with a receiver is leased only by
  that receiver; a task without one by anybody (broadcast). Each lease gets a
  fresh broker-wide lease id: the fencing token every later call must show.
* renew / release need the current lease id and an unexpired lease
  (LEASE_EXPIRED otherwise; TASK_NOT_LEASED if another lease holds the task).
  dequeue also accepts a lease that ran out if nobody leased the task since
  (TaskMaster §5.6 late dequeue) — but not a lease its holder gave back:
  release clears the task's fence, so the old lease id gets TASK_NOT_LEASED
  and the retry it asked for is never lost to a stray late dequeue.
* lease ids and FIFO pids come from the clock in microseconds and are
  strictly increasing; the engine persists a high-water mark for each
  (`SetCounter`, reserved a minute ahead so it costs one row write a minute),
  so neither repeats after a restart even if the clock stepped back.
* release and lease expiry count a failed attempt; at `max_attempts` (task's
  own or the broker default, 10) the task moves to `<queue>.dead` as a new
  dead letter at `<pid>~<death time>`, with the reason in header
  `kittiwake-dead-reason` and the pid in `kittiwake-dead-pid`: every failure
  is kept (`dead_letters`). Dead-letter queues do not dead-letter further.
* update: dequeues, releases, renewals, then enqueues, all or nothing, within
  one consistency group (CROSS_GROUP_UPDATE otherwise). Every item is checked
  before any is applied, so a refused update changes nothing.
* lease expiry is lazy (§5.6): expired leases are swept at every lease and
  stats call and by the broker's periodic tick.
* delete_queue drops the queue's memory and asks the store to bump the
  queue's generation: constant time, rows reaped in the background (§5.2).
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
from typing import Any, Sequence

from sortedcontainers import SortedList

from kittiwake import errors
from kittiwake.engine.mutations import (
    DeleteTask,
    DropQueue,
    Mutation,
    PutTask,
    SetCounter,
    SetLease,
)
from kittiwake.engine.dead_letters import DeadLetters
from kittiwake.engine.dependencies import Dependencies
from kittiwake.engine.inspection import Inspection
from kittiwake.engine.queue_state import QueueState
from kittiwake.engine.rate_limit import TokenBucket
from kittiwake.engine.rates import ENQUEUE, LEASE, RateWindow
from kittiwake.engine.storage import TaskStore
from kittiwake.model import (
    DEAD_PID_HEADER,
    DEAD_REASON_HEADER,
    DEAD_SUFFIX,
    FIFO_PID_DIGITS,
    EnqueueOutcome,
    ItemOutcome,
    LeaseRef,
    LeaseRequest,
    Limits,
    NewTask,
    Task,
    dead_letter_pid,
    dead_queue_of,
    fifo_pid,
    group_of,
    validate_count,
    validate_lease_secs,
    validate_name,
    validate_pid,
    validate_queue,
)

MAX_QUEUES_PER_LEASE = 1000
EXPIRY_COMPACT_MIN = 1024  # expiry heap entries before renewals' stale entries are compacted away
PRUNE_EVERY_SECS = 60.0  # scanning every queue for idle empties is O(queues)
LEASE_ID_COUNTER = "lease_id"
FIFO_COUNTER = "fifo_micros"
COUNTER_RESERVE = 60_000_000  # a minute of clock-based ids per persisted high-water mark

_DEQUEUE, _RENEW, _RELEASE = "dequeue", "renew", "release"


class Engine(Dependencies, DeadLetters, Inspection):
    """All queue state of one broker. Not thread-safe: one caller at a time.
    Dependencies and cancel live in `dependencies`, requeue and purge of dead
    letters in `dead_letters`, read-only views in `inspection`."""

    def __init__(
        self,
        store: TaskStore,
        *,
        limits: Limits | None = None,
        head_tasks: int = 1000,
        cache_bytes: int = 256 * 1024 * 1024,
    ) -> None:
        self.store = store
        self.limits = limits or Limits()
        self.head_tasks = head_tasks
        self.cache_bytes = cache_bytes
        self.memory_bytes = 0
        self._queues: dict[str, QueueState] = {}
        self._names: SortedList = SortedList()
        self._recent: OrderedDict[str, None] = OrderedDict()  # queues by last use, for eviction
        self._expiry: list[tuple[float, int, str, str]] = []  # (expires_at, lease_id, queue, pid)
        self._expiry_compact_at = EXPIRY_COMPACT_MIN
        self._ready: set[str] = set()
        self._throttled: dict[str, float] = {}  # rate-limited queues → when their next token is due  # queues that gained available tasks
        self._last_fifo_micros = 0
        self._last_lease_id = 0
        self._reserved: dict[str, int] = {LEASE_ID_COUNTER: 0, FIFO_COUNTER: 0}  # persisted high-water marks
        self.refills = 0
        self._next_prune_at = 0.0

    # ------------------------------------------------------------------ start

    def recover(self, now: float) -> None:
        """Load the store's summary: queue sizes, leases, counters. A lease that
        ran out while the broker was down is held until the first sweep, which
        counts its failed attempt exactly as if the broker had stayed up."""
        recovery = self.store.recover(now)
        for summary in recovery.queues:
            queue = QueueState(summary.queue, size=summary.size, complete=summary.size == 0)
            queue.max_pid = summary.max_pid
            queue.max_fifo_pid = summary.max_fifo_pid or ""
            queue.blocked = summary.blocked
            self._queues[summary.queue] = queue
            pid = summary.max_fifo_pid if summary.max_fifo_pid is not None else summary.max_pid
            if len(pid) == FIFO_PID_DIGITS and pid.isascii() and pid.isdigit():
                self._last_fifo_micros = max(self._last_fifo_micros, int(pid))
        self._names.update(self._queues)  # one sort, not 100K bisected inserts
        for name, value in recovery.counters.items():
            if name in self._reserved:
                self._reserved[name] = max(self._reserved[name], value)
        self._last_fifo_micros = max(self._last_fifo_micros, self._reserved[FIFO_COUNTER])
        for task in (*recovery.leased, *recovery.expired):
            queue = self._queues.get(task.queue)
            if queue is None:
                continue
            queue.leased[task.pid] = task
            assert task.lease_expires_at is not None
            heapq.heappush(self._expiry, (task.lease_expires_at, task.lease_id, task.queue, task.pid))
        self._last_lease_id = max(self._last_lease_id, self._reserved[LEASE_ID_COUNTER])

    # --------------------------------------------------------------- helpers

    def _queue(self, name: str) -> QueueState:
        queue = self._queues.get(name)
        if queue is None:
            queue = self._queues[name] = QueueState(name)
            self._names.add(name)
        return queue

    def _touch(self, queue: QueueState) -> None:
        recent = self._recent
        name = queue.name
        if name in recent:
            recent.move_to_end(name)
        else:
            recent[name] = None

    def _rates(self, queue: QueueState) -> RateWindow:
        if queue.rates is None:
            queue.rates = RateWindow()
        return queue.rates

    def _add_available(self, queue: QueueState, task: Task) -> None:
        """A task became available: into the head if the head covers it. Every
        way in (enqueue, release, expiry, dead-lettering) trims the head, so
        a mass expiry cannot grow it past 2 * head_tasks."""
        if queue.covers(task.pid):
            self.memory_bytes += queue.add_available(task)
            self._trim_head(queue)
            self._touch(queue)  # so _enforce_cache can evict this head
        self._ready.add(queue.name)

    def _next_fifo_pid(self, now: float, mutations: list[Mutation]) -> str:
        micros = max(int(now * 1_000_000), self._last_fifo_micros + 1)
        self._last_fifo_micros = micros
        self._reserve(FIFO_COUNTER, micros, mutations)
        return fifo_pid(micros)

    def _next_lease_id(self, now: float, mutations: list[Mutation]) -> int:
        lease_id = max(self._last_lease_id + 1, int(now * 1_000_000))
        self._last_lease_id = lease_id
        self._reserve(LEASE_ID_COUNTER, lease_id, mutations)
        return lease_id

    def _reserve(self, counter: str, value: int, mutations: list[Mutation]) -> None:
        """Persist a high-water mark a minute ahead of `value` once `value` passes
        the last one: restarts resume above it, whatever the clock says then."""
        if value > self._reserved[counter]:
            self._reserved[counter] = value + COUNTER_RESERVE
            mutations.append(SetCounter(counter, value + COUNTER_RESERVE))

    def _refill(self, queue: QueueState, now: float) -> None:
        """Load the next slice of the queue above the horizon (TaskMaster §5.4.2)."""
        rows = self.store.load_available(queue.name, queue.horizon, self.head_tasks, now)
        self.memory_bytes += queue.absorb(rows, self.head_tasks)
        self._touch(queue)
        self.refills += 1

    def _enforce_cache(self) -> None:
        """Trim over-long heads, then evict whole heads of the least recently
        used queues while memory is above the cache setting."""
        if self.memory_bytes <= self.cache_bytes:
            return
        target = int(self.cache_bytes * 0.9)
        recent = self._recent
        while self.memory_bytes > target and recent:
            name, _ = recent.popitem(last=False)
            queue = self._queues.get(name)
            if queue is not None and queue.available:
                self.memory_bytes -= queue.evict_to(0)

    def _trim_head(self, queue: QueueState) -> None:
        if len(queue.available) > 2 * self.head_tasks:
            self.memory_bytes -= queue.evict_to(self.head_tasks)

    def _find(self, queue: QueueState, pid: str) -> Task | None:
        """The task at pid, leased or available, from memory or the store."""
        task = queue.leased.get(pid) or queue.available.get(pid)
        if task is None and (queue.blocked or not queue.covers(pid)):
            task = self.store.load_task(queue.name, pid)
        return task

    def _exists(self, queue: QueueState, pid: str) -> bool:
        if pid in queue.leased or pid in queue.available:
            return True
        if queue.covers(pid) and not queue.blocked:
            return False
        return self.store.load_task(queue.name, pid) is not None

    def _forget_if_empty(self, queue: QueueState) -> None:
        if queue.size == 0 and not queue.leased and queue.rates is None:
            self._drop_memory(queue)

    def _drop_memory(self, queue: QueueState) -> None:
        self.memory_bytes -= queue.memory_bytes
        self._queues.pop(queue.name, None)
        self._names.discard(queue.name)
        self._recent.pop(queue.name, None)

    def _write(self, mutations: list[Mutation]) -> None:
        """Hand the mutations so far to the store and empty the list. Called
        after each item of a batch, so that an item that reads the store (a
        dedupe or lease look-up of a task beyond the head) sees what the
        items before it did."""
        if mutations:
            self.store.write(mutations)
            mutations.clear()

    def take_ready(self) -> set[str]:
        """Queues that gained available tasks since the last call (wakes long-polls)."""
        ready, self._ready = self._ready, set()
        return ready

    def next_expiry(self) -> float | None:
        return self._expiry[0][0] if self._expiry else None

    # --------------------------------------------------------------- enqueue

    def enqueue(self, tasks: Sequence[NewTask], now: float) -> list[EnqueueOutcome]:
        limits = self.limits
        if not tasks:
            return []
        if len(tasks) > limits.max_batch:
            raise errors.BadRequest(f"more than {limits.max_batch} tasks in one request")
        for task in tasks:
            task.validate(limits)
        mutations: list[Mutation] = []
        outcomes: list[EnqueueOutcome] = []
        for task in tasks:
            outcomes.append(self._enqueue_one(task, now, mutations))
            self._write(mutations)
        self._enforce_cache()
        return outcomes

    def _enqueue_one(self, new: NewTask, now: float, mutations: list[Mutation]) -> EnqueueOutcome:
        queue = self._queue(new.queue)
        self._touch(queue)
        if new.pid is None:
            pid = self._next_fifo_pid(now, mutations)
            # an explicit pid may sit where the clock now is (a delayed task at
            # pid_at(t)): step past it rather than overwrite it
            while pid <= queue.max_fifo_pid and self._exists(queue, pid):
                pid = self._next_fifo_pid(now, mutations)
        else:
            pid = new.pid
            if self._exists(queue, pid):
                return EnqueueOutcome(new.queue, pid, True)
        if new.unless and any(self._key_exists(q, p) for q, p in new.unless):
            return EnqueueOutcome(new.queue, pid, True)
        task = Task(
            queue=new.queue,
            pid=pid,
            data=bytes(new.data),
            enqueued_at=now,
            sender=new.sender,
            receiver=new.receiver,
            headers=new.headers or None,
            max_attempts=new.max_attempts,
        )
        edges: list[Mutation] = []
        if new.after:
            if (new.queue, pid) in new.after:
                raise errors.BadRequest(f"task {new.queue}/{pid} cannot wait for itself")
            failed = self._link_parents(task, new.after, edges)
            if failed is not None:
                # a parent already failed: the task is born dead, like its
                # siblings that were waiting when the parent failed
                self._rates(queue).add(ENQUEUE, now)
                self._bury(task, f"PARENT_FAILED {failed[0]}/{failed[1]}", now, mutations)
                self._forget_if_empty(queue)
                return EnqueueOutcome(new.queue, pid, False)
        queue.size += 1
        queue.note_pid(pid)
        if task.waiting_on:
            queue.blocked += 1
        else:
            self._add_available(queue, task)
        self._rates(queue).add(ENQUEUE, now)
        mutations.append(PutTask(task))
        mutations.extend(edges)
        return EnqueueOutcome(new.queue, pid, False)

    # ----------------------------------------------------------------- lease

    def validate_lease(self, request: LeaseRequest) -> None:
        limits = self.limits
        if isinstance(request.queues, str):
            request.queues = [request.queues]
        if not isinstance(request.queues, list) or not request.queues:
            raise errors.BadRequest("queues must be a non-empty list of queue names")
        if len(request.queues) > MAX_QUEUES_PER_LEASE:
            raise errors.BadRequest(f"more than {MAX_QUEUES_PER_LEASE} queues in one lease")
        for name in request.queues:
            validate_queue(name, limits)
        validate_count(request.max_tasks, "max_tasks", 1, limits.max_batch)
        request.lease_secs = validate_lease_secs(request.lease_secs, limits)
        if request.max_pid is not None:
            validate_pid(request.max_pid, limits, "max_pid")
        validate_name(request.receiver, limits, "receiver")
        validate_name(request.worker, limits, "worker")
        for value, what in ((request.rate_per_sec, "rate_per_sec"), (request.rate_burst, "rate_burst")):
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1e6:
                raise errors.BadRequest(f"{what} must be a number in (0, 1000000]")
        if request.rate_burst is not None and request.rate_per_sec is None:
            raise errors.BadRequest("rate_burst needs rate_per_sec")

    def lease(self, request: LeaseRequest, now: float) -> list[Task]:
        """Lease up to max_tasks tasks in pid order across the requested queues."""
        self.validate_lease(request)
        self.sweep(now)
        want = request.max_tasks
        candidates: list[tuple[str, QueueState]] = []
        for name in dict.fromkeys(request.queues):
            queue = self._queues.get(name)
            if request.rate_per_sec is not None:
                queue = self._queue(name)  # the limit holds even before the first task
                self._set_rate(queue, request, now)
            if queue is None or queue.size <= len(queue.leased) + queue.blocked:
                continue
            allowed = want
            if queue.rate is not None:
                allowed = min(want, queue.rate.available(now))
                if allowed <= 0:
                    self._throttled[queue.name] = queue.rate.next_token_at(now)
                    continue
            self._ensure_head(queue, allowed, request.receiver, request.max_pid, now)
            candidates.extend((pid, queue) for pid in self._head_pids(queue, allowed, request))
        if not candidates:
            self._enforce_cache()  # a refill may have loaded only tasks for other receivers
            return []
        if len(request.queues) > 1:
            candidates.sort(key=lambda item: item[0])
        leased: list[Task] = []
        mutations: list[Mutation] = []
        expires_at = now + request.lease_secs
        budget = self.limits.max_reply_data_bytes
        for pid, queue in candidates[:want]:
            if leased and budget < len(queue.available[pid].data):
                break  # the reply would be too large to read; the rest waits for the next lease
            task = queue.remove_available(pid)
            assert task is not None
            budget -= len(task.data)
            self.memory_bytes -= task.size_bytes()
            task.lease_id = self._next_lease_id(now, mutations)
            task.lease_owner = request.worker
            task.lease_peer = request.peer
            task.leased_at = now
            task.lease_expires_at = expires_at
            task.deliveries += 1
            queue.leased[pid] = task
            heapq.heappush(self._expiry, (expires_at, task.lease_id, queue.name, pid))
            mutations.append(SetLease.of(task))
            leased.append(task)
            self._rates(queue).add(LEASE, now)
            self._touch(queue)
            if queue.rate is not None:
                queue.rate.spend(1)
        self.store.write(mutations)
        self._enforce_cache()
        return leased

    def _set_rate(self, queue: QueueState, request: LeaseRequest, now: float) -> None:
        rate = request.rate_per_sec
        assert rate is not None
        burst = request.rate_burst if request.rate_burst is not None else max(1.0, rate)
        if queue.rate is None:
            queue.rate = TokenBucket(rate, burst, now)
        elif queue.rate.rate_per_sec != rate or queue.rate.burst != burst:
            queue.rate.configure(rate, burst, now)

    def _bucket_count(self, queue: QueueState, receiver: str | None) -> int:
        count = len(queue.open)
        if receiver is not None:
            bucket = queue.directed.get(receiver)
            if bucket:
                count += len(bucket)
        return count

    def _ensure_head(
        self, queue: QueueState, want: int, receiver: str | None, max_pid: str | None, now: float
    ) -> None:
        low_water = max(want, self.head_tasks // 4)
        for _ in range(8):  # bounded: directed tasks for others may fill a refill
            if queue.complete or queue.stored_available <= 0:
                return
            if max_pid is not None and queue.horizon >= max_pid:
                return  # everything <= max_pid is already in memory
            if self._bucket_count(queue, receiver) >= low_water:
                return
            self._refill(queue, now)

    @staticmethod
    def _head_pids(queue: QueueState, want: int, request: LeaseRequest) -> list[str]:
        max_pid = request.max_pid
        sources = [queue.open]
        if request.receiver is not None and request.receiver in queue.directed:
            sources.append(queue.directed[request.receiver])
        pids: list[str] = []
        for source in sources:
            for pid in source.islice(0, want):
                if max_pid is not None and pid > max_pid:
                    break
                pids.append(pid)
        if len(sources) > 1:
            pids.sort()
            del pids[want:]
        return pids

    def sweep(self, now: float) -> int:
        """Return expired leases to their queues (TaskMaster §5.6, lazily), and
        mark rate-limited queues whose next token is due as ready again."""
        if self._throttled:
            for name, due in list(self._throttled.items()):
                if due <= now:
                    del self._throttled[name]
                    self._ready.add(name)
        expiry = self._expiry
        if not expiry or expiry[0][0] > now:
            return 0
        mutations: list[Mutation] = []
        expired = 0
        while expiry and expiry[0][0] <= now:
            expires_at, lease_id, name, pid = heapq.heappop(expiry)
            queue = self._queues.get(name)
            task = queue.leased.get(pid) if queue is not None else None
            if task is None or task.lease_id != lease_id or task.lease_expires_at != expires_at:
                continue  # renewed, finished or released since
            expired += 1
            del queue.leased[pid]
            self._fail_attempt(queue, task, "LEASE_EXPIRED", now, mutations)
            self._write(mutations)
        self._enforce_cache()
        return expired

    def _fail_attempt(
        self, queue: QueueState, task: Task, reason: str, now: float, mutations: list[Mutation], bury: bool = False
    ) -> bool:
        """Count a failed attempt on a task just taken out of the leased set;
        it goes back to available, or to the dead-letter queue (at max_attempts,
        or at once with `bury`), failing its descendants. True if dead."""
        task.attempts += 1
        task.lease_owner = task.lease_peer = None
        task.leased_at = task.lease_expires_at = None
        limit = task.max_attempts or self.limits.default_max_attempts
        if (task.attempts >= limit or bury) and not queue.name.endswith(DEAD_SUFFIX):
            queue.size -= 1
            mutations.append(DeleteTask(queue.name, task.pid))
            self._bury(task, reason, now, mutations)
            if task.children:
                self._fail_descendants(task, now, mutations)
            self._forget_if_empty(queue)
            return True
        mutations.append(SetLease.of(task))
        self._add_available(queue, task)
        return False

    def _bury(self, task: Task, reason: str, now: float, mutations: list[Mutation]) -> None:
        """Move a task to its queue's dead-letter queue as a new dead letter: at
        `<pid>~<death time>`, so a pid that dies twice keeps both failures."""
        dead = self._queue(dead_queue_of(task.queue))
        headers = dict(task.headers or {})
        headers[DEAD_REASON_HEADER] = reason[: self.limits.max_header_value_bytes]
        headers[DEAD_PID_HEADER] = task.pid
        buried = Task(
            queue=dead.name,
            pid=dead_letter_pid(task.pid, self._next_fifo_pid(now, mutations)),
            data=task.data,
            enqueued_at=now,
            sender=task.sender,
            receiver=task.receiver,
            headers=headers,
            max_attempts=task.max_attempts,
            attempts=task.attempts,
            deliveries=task.deliveries,
        )
        dead.size += 1
        dead.note_pid(buried.pid)
        self._add_available(dead, buried)
        self._rates(dead).add(ENQUEUE, now)
        mutations.append(PutTask(buried))

    # ------------------------------------------------ renew, dequeue, release

    def _validate_refs(self, refs: Sequence[LeaseRef]) -> None:
        limits = self.limits
        if len(refs) > limits.max_batch:
            raise errors.BadRequest(f"more than {limits.max_batch} leases in one request")
        for ref in refs:
            validate_queue(ref.queue, limits)
            validate_pid(ref.pid, limits, "pid", ref.queue)
            if isinstance(ref.lease_id, bool) or not isinstance(ref.lease_id, int) or ref.lease_id < 1:
                raise errors.BadRequest("lease_id must be a positive integer")

    def _resolve(
        self, ref: LeaseRef, op: str, now: float
    ) -> tuple[QueueState, Task] | errors.KittiwakeError:
        """Find the task a lease ref names and check the ref may act on it."""
        queue = self._queues.get(ref.queue)
        if queue is None:
            return errors.TaskNotFound(f"no task {ref.pid!r} in {ref.queue!r}")
        task = queue.leased.get(ref.pid)
        if task is not None:
            if task.lease_id != ref.lease_id:
                return errors.TaskNotLeased(f"{ref.queue}/{ref.pid} is held by another lease")
            assert task.lease_expires_at is not None
            if op != _DEQUEUE and task.lease_expires_at <= now:
                return errors.LeaseExpired(f"lease {ref.lease_id} on {ref.queue}/{ref.pid} expired")
            return queue, task
        task = self._find(queue, ref.pid)
        if task is None:
            return errors.TaskNotFound(f"no task {ref.pid!r} in {ref.queue!r}")
        if task.lease_id != ref.lease_id:
            return errors.TaskNotLeased(f"{ref.queue}/{ref.pid} is not held by lease {ref.lease_id}")
        if op != _DEQUEUE:
            return errors.LeaseExpired(f"lease {ref.lease_id} on {ref.queue}/{ref.pid} expired")
        return queue, task  # late dequeue: expired, nobody leased it since (§5.6)

    def _do_dequeue(self, queue: QueueState, task: Task, now: float, mutations: list[Mutation]) -> None:
        if queue.leased.pop(task.pid, None) is None:
            if queue.remove_available(task.pid) is not None:
                self.memory_bytes -= task.size_bytes()
        queue.size -= 1
        held = now - task.leased_at if task.leased_at is not None else 0.0
        self._rates(queue).add_dequeue(now, 1, max(held, 0.0))
        mutations.append(DeleteTask(queue.name, task.pid))
        if task.children:
            self._write(mutations)
            self._finish_parent(task, mutations)

    def _do_renew(self, queue: QueueState, task: Task, lease_secs: float, now: float, mutations: list[Mutation]) -> float:
        task.lease_expires_at = now + lease_secs
        heapq.heappush(self._expiry, (task.lease_expires_at, task.lease_id, queue.name, task.pid))
        if len(self._expiry) > self._expiry_compact_at:
            self._compact_expiry()
        mutations.append(SetLease.of(task))
        return task.lease_expires_at

    def _compact_expiry(self) -> None:
        """Rebuild the expiry heap from the leases held now. Each renewal leaves its old
        deadline in the heap until that time passes: a long lease renewed as a frequent
        heartbeat would otherwise keep lease_secs / interval entries per task."""
        self._expiry = [
            (task.lease_expires_at, task.lease_id, queue.name, pid)
            for queue in self._queues.values()
            for pid, task in queue.leased.items()
            if task.lease_expires_at is not None
        ]
        heapq.heapify(self._expiry)
        self._expiry_compact_at = max(EXPIRY_COMPACT_MIN, 2 * len(self._expiry))

    def _do_release(
        self, queue: QueueState, task: Task, reason: str | None, now: float, mutations: list[Mutation], bury: bool = False
    ) -> bool:
        del queue.leased[task.pid]
        task.lease_id = 0  # the holder gave it back: its lease id fences nothing any more
        return self._fail_attempt(queue, task, reason or "RELEASED", now, mutations, bury)

    def _batch(self, refs: Sequence[LeaseRef], op: str, now: float, apply: Any) -> list[ItemOutcome]:
        self._validate_refs(refs)
        mutations: list[Mutation] = []
        outcomes: list[ItemOutcome] = []
        for ref in refs:
            found = self._resolve(ref, op, now)
            if isinstance(found, errors.KittiwakeError):
                outcomes.append(ItemOutcome(ref.queue, ref.pid, False, found.code, found.message))
                continue
            queue, task = found
            outcomes.append(apply(queue, task, mutations, ItemOutcome(ref.queue, ref.pid, True)))
            self._write(mutations)
        self._enforce_cache()
        return outcomes

    def dequeue(self, refs: Sequence[LeaseRef], now: float) -> list[ItemOutcome]:
        """Finish leased tasks; per-item outcomes."""

        def apply(queue: QueueState, task: Task, mutations: list[Mutation], outcome: ItemOutcome) -> ItemOutcome:
            self._do_dequeue(queue, task, now, mutations)
            self._forget_if_empty(queue)
            return outcome

        return self._batch(refs, _DEQUEUE, now, apply)

    def renew(
        self,
        refs: Sequence[LeaseRef],
        lease_secs: float,
        now: float,
        progress: float | None = None,
        note: str | None = None,
    ) -> list[ItemOutcome]:
        """Extend leases to now + lease_secs, recording the worker's progress
        (0..1) and note when given; per-item outcomes."""
        lease_secs = validate_lease_secs(lease_secs, self.limits)
        if progress is not None:
            if isinstance(progress, bool) or not isinstance(progress, (int, float)) or not 0.0 <= progress <= 1.0:
                raise errors.BadRequest("progress must be a number from 0 to 1")
        note = self._validate_reason(note)

        def apply(queue: QueueState, task: Task, mutations: list[Mutation], outcome: ItemOutcome) -> ItemOutcome:
            if progress is not None:
                task.progress = float(progress)
            if note is not None:
                task.note = note
            outcome.expires_at = self._do_renew(queue, task, lease_secs, now, mutations)
            return outcome

        return self._batch(refs, _RENEW, now, apply)

    def release(
        self, refs: Sequence[LeaseRef], reason: str | None, now: float, bury: bool = False
    ) -> list[ItemOutcome]:
        """Give leased tasks back (nack), counting an attempt; with `bury`, move
        them to the dead-letter queue at once (at-most-once delivery: a task
        found started before is never started again). Per-item outcomes."""
        reason = self._validate_reason(reason)

        def apply(queue: QueueState, task: Task, mutations: list[Mutation], outcome: ItemOutcome) -> ItemOutcome:
            outcome.dead = self._do_release(queue, task, reason, now, mutations, bool(bury))
            return outcome

        return self._batch(refs, _RELEASE, now, apply)

    def _validate_reason(self, reason: object) -> str | None:
        if reason is None:
            return None
        if not isinstance(reason, str):
            raise errors.BadRequest("reason must be a string")
        try:
            size = len(reason.encode("utf-8"))
        except UnicodeEncodeError:
            # a lone surrogate would pass here and fail in the store at commit
            raise errors.BadRequest("reason is not valid UTF-8") from None
        if size > self.limits.max_header_value_bytes:
            raise errors.BadRequest(f"reason is over {self.limits.max_header_value_bytes} bytes")
        return reason

    # ---------------------------------------------------------------- update

    def update(
        self,
        *,
        enqueue: Sequence[NewTask] = (),
        dequeue: Sequence[LeaseRef] = (),
        renew: Sequence[LeaseRef] = (),
        release: Sequence[LeaseRef] = (),
        lease_secs: float = 30.0,
        reason: str | None = None,
        now: float,
    ) -> dict[str, list[Any]]:
        """Atomic batch of dequeues, releases, renewals and enqueues in one group."""
        limits = self.limits
        total = len(enqueue) + len(dequeue) + len(renew) + len(release)
        if total == 0:
            raise errors.BadRequest("update has nothing to do")
        if total > limits.max_batch:
            raise errors.BadRequest(f"more than {limits.max_batch} items in one update")
        for task in enqueue:
            task.validate(limits)
        self._validate_refs([*dequeue, *renew, *release])
        if renew:
            lease_secs = validate_lease_secs(lease_secs, limits)
        reason = self._validate_reason(reason)
        groups = {group_of(task.queue) for task in enqueue}
        groups.update(group_of(ref.queue) for ref in (*dequeue, *renew, *release))
        if len(groups) > 1:
            raise errors.CrossGroupUpdate(
                "update spans consistency groups " + ", ".join(repr(g) for g in sorted(groups))
            )
        seen: set[tuple[str, str]] = set()
        resolved: list[tuple[str, QueueState, Task]] = []
        for op, refs in ((_DEQUEUE, dequeue), (_RELEASE, release), (_RENEW, renew)):
            for ref in refs:
                key = (ref.queue, ref.pid)
                if key in seen:
                    raise errors.BadRequest(f"{ref.queue}/{ref.pid} appears twice in one update")
                seen.add(key)
                found = self._resolve(ref, op, now)
                if isinstance(found, errors.KittiwakeError):
                    found.message = f"{op} {ref.queue}/{ref.pid}: {found.message}"
                    raise found
                resolved.append((op, *found))
        mutations: list[Mutation] = []
        result: dict[str, list[Any]] = {"enqueued": [], "dequeued": [], "renewed": [], "released": []}
        for op, queue, task in resolved:
            outcome = ItemOutcome(queue.name, task.pid, True)
            if op == _DEQUEUE:
                self._do_dequeue(queue, task, now, mutations)
                result["dequeued"].append(outcome)
            elif op == _RELEASE:
                outcome.dead = self._do_release(queue, task, reason, now, mutations)
                result["released"].append(outcome)
            else:
                outcome.expires_at = self._do_renew(queue, task, lease_secs, now, mutations)
                result["renewed"].append(outcome)
            self._write(mutations)
        for task in enqueue:
            result["enqueued"].append(self._enqueue_one(task, now, mutations))
            self._write(mutations)
        for op, queue, task in resolved:
            if op == _DEQUEUE:
                self._forget_if_empty(queue)
        self._enforce_cache()
        return result

    def delete_queue(self, queue: str) -> int:
        """Drop a queue and every task in it, in constant time; returns how many."""
        validate_queue(queue, self.limits)
        state = self._queues.get(queue)
        if state is None:
            return 0
        self._drop_memory(state)
        self.store.write([DropQueue(queue)])
        return state.size

    def maintain(self, now: float) -> None:
        """Periodic housekeeping: sweep leases; once a minute, forget empty queues whose rates went idle."""
        self.sweep(now)
        if now < self._next_prune_at:
            return
        self._next_prune_at = now + PRUNE_EVERY_SECS
        for queue in list(self._queues.values()):
            if queue.size == 0 and not queue.leased and (queue.rates is None or queue.rates.idle_since(now)):
                self._drop_memory(queue)

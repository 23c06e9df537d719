"""Leases (TaskMaster §3.3, §5.6; Paštas receivers): lease, renew, release, dequeue, expiry.

* lease: up to `max_tasks` available tasks in pid order across the named
  queues, pid <= `max_pid` if given. A task with a receiver is leased only by
  that receiver; a task without one by anybody (broadcast). Each lease gets a
  fresh broker-wide lease id (`ids`): the fencing token every later call must
  show. A queue with a rate limit (`rate_limit`) grants no more than its
  tokens allow, and is marked throttled until its next token is due.
  The reply is bounded two ways: by the broker's `max_reply_data_bytes` (the
  lease stops before the task over it; one task is always leased), and by the
  caller's `max_reply_bytes` (a UDP datagram), against an upper estimate of
  each task's encoded size (`leased_reply_bytes`): the lease stops before a
  task that would not fit in what is left, and passes over a task that alone
  would not fit — not leased, no delivery, no attempt — counting it in the
  result's `too_large` (`model.LeasedTasks`), so the small tasks behind it
  are still served and the caller learns to lease that one elsewhere. The
  tasks looked at are the first `max_tasks` available, as without the bound.
* renew / release need the current lease id and an unexpired lease
  (LEASE_EXPIRED otherwise; TASK_NOT_LEASED if another lease holds the task).
  dequeue also accepts a lease that ran out if nobody leased the task since
  (TaskMaster §5.6 late dequeue) — but not a lease its holder gave back:
  release clears the task's fence, so the old lease id gets TASK_NOT_LEASED
  and the retry it asked for is never lost to a stray late dequeue.
* release and expiry count a failed attempt (`failures.fail_attempt`).
* expiry is lazy (§5.6): expired leases are swept at every lease and stats
  call and by the broker's periodic tick.

Renew, release and dequeue take a batch of lease refs and answer per item;
`resolve` and the `apply_*` functions are also the items of an atomic
`update`. Changes `EngineState.expiry`, `throttled` and `ready`, the leased
sets and the heads.
"""

from __future__ import annotations

import heapq
from typing import Callable, Sequence

from kittiwake.constants import LEASE_EXPIRED_REASON, RELEASED_REASON
from kittiwake import errors
from kittiwake.engine import join_index
from kittiwake.engine.dependencies import finish_parent
from kittiwake.engine.failures import fail_attempt, validate_reason
from kittiwake.engine.head_cache import add_available, enforce_cache, ensure_head, find, touch
from kittiwake.engine.ids import next_lease_id
from kittiwake.engine.mutations import DeleteTask, Mutation, SetLease
from kittiwake.engine.queue_state import QueueState
from kittiwake.engine.rate_limit import TokenBucket
from kittiwake.engine.rates import LEASE
from kittiwake.engine.coherence import claim, claim_many, claim_open
from kittiwake.engine.state import EXPIRY_COMPACT_MIN, EngineState, flush, forget_if_empty, rates_of
from kittiwake.engine.storage import is_shared
from kittiwake.engine.tally import DEQUEUED, EXPIRED, LEASED, RELEASED
from kittiwake.engine.transitions import Operation
from kittiwake.model import (
    ItemOutcome,
    LeaseRef,
    LeasedTasks,
    LeaseRequest,
    Task,
    validate_count,
    validate_lease_secs,
    validate_name,
    validate_pid,
    validate_queue,
)

MAX_QUEUES_PER_LEASE = 1000

DEQUEUE, RENEW, RELEASE = Operation.DEQUEUE, Operation.RENEW, Operation.RELEASE

Apply = Callable[[QueueState, Task, list[Mutation], ItemOutcome], ItemOutcome]


# ----------------------------------------------------------------- lease


def validate_lease(state: EngineState, request: LeaseRequest) -> None:
    limits = state.limits
    if isinstance(request.queues, str):
        request.queues = [request.queues]
    if not isinstance(request.queues, list) or not request.queues:
        raise errors.BadRequest("queues must be a non-empty list of queue names")
    if len(request.queues) > MAX_QUEUES_PER_LEASE:
        raise errors.BadRequest(f"more than {MAX_QUEUES_PER_LEASE} queues in one lease")
    for name in request.queues:
        validate_queue(name, limits)
    join_index.check_queues(state, request.queues, "lease")
    validate_count(request.max_tasks, "max_tasks", 1, limits.max_batch)
    if request.max_reply_bytes is not None:
        validate_count(request.max_reply_bytes, "max_reply_bytes", 1, 1 << 40)
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


# A leased task's reply is its fields (msgpack keys, numbers) plus its strings:
# about 250 bytes beyond the strings for the longest numbers (measured), so a
# little more to stay an upper bound; the reply's envelope adds the rest: id,
# ok, the list's header and the `too_large` count, 42 bytes at most.
LEASED_TASK_FIXED_BYTES = 280
REPLY_ENVELOPE_BYTES = 48


def leased_reply_bytes(task: Task, request: LeaseRequest) -> int:
    """An upper bound of the bytes `task` adds to the reply of `request` once leased."""
    size = LEASED_TASK_FIXED_BYTES + len(task.data) + len(task.queue) + len(task.pid)
    for text in (task.sender, task.receiver, task.note, request.worker, request.peer):
        if text:
            size += len(text.encode())
    if task.headers:
        size += sum(len(key.encode()) + len(value.encode()) + 10 for key, value in task.headers.items())
    return size


def lease(state: EngineState, request: LeaseRequest, now: float) -> LeasedTasks:
    """Lease up to max_tasks tasks in pid order across the requested queues."""
    validate_lease(state, request)
    sweep(state, now, everywhere=False)
    claim_many(state, request.queues)
    want = request.max_tasks
    candidates: list[tuple[str, QueueState]] = []
    for name in dict.fromkeys(request.queues):
        queue = claim(state, name)
        if request.rate_per_sec is not None:
            queue = claim_open(state, name)  # the limit holds even before the first task
            _set_rate(queue, request, now)
        if queue is None or queue.size <= len(queue.leased) + queue.blocked:
            continue
        allowed = want
        if queue.rate is not None:
            allowed = min(want, queue.rate.available(now))
            if allowed <= 0:
                state.throttled[queue.name] = queue.rate.next_token_at(now)
                continue
        ensure_head(state, queue, allowed, request.receiver, request.max_pid, now)
        candidates.extend((pid, queue) for pid in _head_pids(queue, allowed, request))
    leased = LeasedTasks()
    if not candidates:
        enforce_cache(state)  # a refill may have loaded only tasks for other receivers
        return leased
    if len(request.queues) > 1:
        candidates.sort(key=lambda item: item[0])
    mutations: list[Mutation] = []
    expires_at = now + request.lease_secs
    budget = state.limits.max_reply_data_bytes
    room = None if request.max_reply_bytes is None else request.max_reply_bytes - REPLY_ENVELOPE_BYTES
    reply_budget = room
    expiry = state.expiry
    tally = state.tally
    for pid, queue in candidates[:want]:
        if leased and budget < len(queue.available[pid].data):
            break  # the reply would be too large to read; the rest waits for the next lease
        if reply_budget is not None:
            assert room is not None
            size = leased_reply_bytes(queue.available[pid], request)
            if size > room:
                # no reply of the caller's could carry it: leasing it would only see it expire
                # unread and count an attempt; the tasks behind it still fit
                leased.too_large += 1
                continue
            if reply_budget < size:
                break  # the caller's reply limit (a UDP datagram); the rest waits for the next lease
            reply_budget -= size
        task = queue.remove_available(pid)
        assert task is not None
        budget -= len(task.data)
        state.memory_bytes -= task.size_bytes()
        task.lease_id = next_lease_id(state, now, mutations)
        task.lease_owner = request.worker
        task.lease_peer = request.peer
        task.leased_at = now
        task.lease_expires_at = expires_at
        task.deliveries += 1
        queue.leased[pid] = task
        heapq.heappush(expiry, (expires_at, task.lease_id, queue.name, pid))
        mutations.append(SetLease.of(task))
        leased.append(task)
        rates_of(queue).add(LEASE, now)
        tally.count(queue.name, LEASED)
        if task.deliveries == 1:
            tally.waited(queue.name, now - task.enqueued_at)
        touch(state, queue)
        if queue.rate is not None:
            queue.rate.spend(1)
    state.store.write(mutations)
    enforce_cache(state)
    return leased


def _set_rate(queue: QueueState, request: LeaseRequest, now: float) -> None:
    rate = request.rate_per_sec
    assert rate is not None
    burst = request.rate_burst if request.rate_burst is not None else max(1.0, rate)
    if queue.rate is None:
        queue.rate = TokenBucket(rate, burst, now)
    elif queue.rate.rate_per_sec != rate or queue.rate.burst != burst:
        queue.rate.configure(rate, burst, now)


def _head_pids(queue: QueueState, want: int, request: LeaseRequest) -> list[str]:
    """The lowest pids of the head a lease for this receiver may take, at most `want`."""
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


def take_ready(state: EngineState) -> set[str]:
    """Queues that gained available tasks since the last call (wakes long-polls)."""
    ready, state.ready = state.ready, set()
    return ready


# ----------------------------------------------------------------- expiry


EXPIRED_QUEUES_PER_SWEEP = 1000


def sweep(state: EngineState, now: float, everywhere: bool = True) -> int:
    """Return expired leases to their queues (TaskMaster §5.6, lazily), and
    mark rate-limited queues whose next token is due as ready again.

    With a shared store, only the broker's periodic sweep (`everywhere`) expires
    leases: it claims every queue with a lease that ran out in one call, those
    another broker granted included (a broker that died leaves its leases to the
    others), where a sweep in passing would claim queues one by one."""
    throttled = state.throttled
    if throttled:
        for name, due in list(throttled.items()):
            if due <= now:
                del throttled[name]
                state.ready.add(name)
    expiry = state.expiry
    if state.shared:
        if not everywhere:
            return 0
        claim_many(state, due_queues(state, now))
    if not expiry or expiry[0][0] > now:
        return 0
    mutations: list[Mutation] = []
    expired = 0
    while expiry and expiry[0][0] <= now:
        expires_at, lease_id, name, pid = heapq.heappop(expiry)
        queue = claim(state, name)
        task = queue.leased.get(pid) if queue is not None else None
        if task is None or task.lease_id != lease_id or task.lease_expires_at != expires_at:
            continue  # renewed, finished or released since
        assert queue is not None
        expired += 1
        del queue.leased[pid]
        state.tally.count(name, EXPIRED)
        fail_attempt(state, queue, task, LEASE_EXPIRED_REASON, now, mutations)
        flush(state, mutations)
    enforce_cache(state)
    return expired


def due_queues(state: EngineState, now: float) -> list[str]:
    """Shared store: the queues a sweep at `now` claims — those with a lease in this broker's heap that
    ran out, and those the store knows with one, whoever granted it. Asked once per `now`."""
    if state.due_asked_at == now:
        return []
    state.due_asked_at = now
    due = {name for expires_at, _, name, _ in state.expiry if expires_at <= now}
    store = state.store
    if is_shared(store):
        due.update(store.expired_lease_queues(now, EXPIRED_QUEUES_PER_SWEEP))
    return sorted(due)


def next_expiry(state: EngineState) -> float | None:
    """The earliest deadline in the expiry heap (perhaps of a lease renewed since)."""
    return state.expiry[0][0] if state.expiry else None


def _compact_expiry(state: EngineState) -> None:
    """Rebuild the expiry heap from the leases held now. Each renewal leaves its old
    deadline in the heap until that time passes: a long lease renewed as a frequent
    heartbeat would otherwise keep lease_secs / interval entries per task."""
    state.expiry = [
        (task.lease_expires_at, task.lease_id, queue.name, pid)
        for queue in state.queues.values()
        for pid, task in queue.leased.items()
        if task.lease_expires_at is not None
    ]
    heapq.heapify(state.expiry)
    state.expiry_compact_at = max(EXPIRY_COMPACT_MIN, 2 * len(state.expiry))


# ------------------------------------------------ renew, dequeue, release


def validate_refs(state: EngineState, refs: Sequence[LeaseRef]) -> None:
    limits = state.limits
    if len(refs) > limits.max_batch:
        raise errors.BadRequest(f"more than {limits.max_batch} leases in one request")
    for ref in refs:
        validate_queue(ref.queue, limits)
        validate_pid(ref.pid, limits, "pid", ref.queue)
        if isinstance(ref.lease_id, bool) or not isinstance(ref.lease_id, int) or ref.lease_id < 1:
            raise errors.BadRequest("lease_id must be a positive integer")


def resolve(
    state: EngineState, ref: LeaseRef, op: Operation, now: float
) -> tuple[QueueState, Task] | errors.KittiwakeError:
    """Find the task a lease ref names and check the ref may `op` it (dequeue, renew or release)."""
    queue = claim(state, ref.queue)
    if queue is None:
        return errors.TaskNotFound(f"no task {ref.pid!r} in {ref.queue!r}")
    task = queue.leased.get(ref.pid)
    if task is not None:
        if task.lease_id != ref.lease_id:
            return errors.TaskNotLeased(f"{ref.queue}/{ref.pid} is held by another lease")
        assert task.lease_expires_at is not None
        if op is not DEQUEUE and task.lease_expires_at <= now:
            return errors.LeaseExpired(f"lease {ref.lease_id} on {ref.queue}/{ref.pid} expired")
        return queue, task
    task = find(state, queue, ref.pid)
    if task is None:
        return errors.TaskNotFound(f"no task {ref.pid!r} in {ref.queue!r}")
    if task.lease_id != ref.lease_id:
        return errors.TaskNotLeased(f"{ref.queue}/{ref.pid} is not held by lease {ref.lease_id}")
    if op is not DEQUEUE:
        return errors.LeaseExpired(f"lease {ref.lease_id} on {ref.queue}/{ref.pid} expired")
    return queue, task  # late dequeue: expired, nobody leased it since (§5.6)


def apply_dequeue(state: EngineState, queue: QueueState, task: Task, now: float, mutations: list[Mutation]) -> None:
    """Finish a resolved task: it is gone, and its children have one parent fewer."""
    if queue.leased.pop(task.pid, None) is None:
        if queue.remove_available(task.pid) is not None:
            state.memory_bytes -= task.size_bytes()
    queue.size -= 1
    held = now - task.leased_at if task.leased_at is not None else 0.0
    rates_of(queue).add_dequeue(now, 1, max(held, 0.0))
    state.tally.count(queue.name, DEQUEUED)
    if task.leased_at is not None:  # not a late dequeue, whose lease the sweep took back
        state.tally.ran(queue.name, held)
    mutations.append(DeleteTask(queue.name, task.pid))
    if task.children:
        flush(state, mutations)
        finish_parent(state, task, mutations)


def apply_renew(
    state: EngineState, queue: QueueState, task: Task, lease_secs: float, now: float, mutations: list[Mutation]
) -> float:
    """Extend a resolved lease to now + lease_secs; returns the new deadline."""
    task.lease_expires_at = now + lease_secs
    heapq.heappush(state.expiry, (task.lease_expires_at, task.lease_id, queue.name, task.pid))
    if len(state.expiry) > state.expiry_compact_at:
        _compact_expiry(state)
    mutations.append(SetLease.of(task))
    return task.lease_expires_at


def apply_release(
    state: EngineState,
    queue: QueueState,
    task: Task,
    reason: str | None,
    now: float,
    mutations: list[Mutation],
    bury: bool = False,
) -> bool:
    """Give a resolved lease back, counting a failed attempt; True if the task went dead."""
    del queue.leased[task.pid]
    task.lease_id = 0  # the holder gave it back: its lease id fences nothing any more
    state.tally.count(queue.name, RELEASED)
    return fail_attempt(state, queue, task, reason or RELEASED_REASON, now, mutations, bury)


def apply_reject(state: EngineState, queue: QueueState, task: Task, mutations: list[Mutation]) -> None:
    """Give a resolved lease back without counting an attempt: available again at once."""
    del queue.leased[task.pid]
    task.lease_id = 0
    state.tally.count(queue.name, RELEASED)
    task.lease_owner = task.lease_peer = None
    task.leased_at = task.lease_expires_at = None
    mutations.append(SetLease.of(task))
    add_available(state, queue, task)


def _batch(state: EngineState, refs: Sequence[LeaseRef], op: Operation, now: float, apply: Apply) -> list[ItemOutcome]:
    validate_refs(state, refs)
    mutations: list[Mutation] = []
    outcomes: list[ItemOutcome] = []
    for ref in refs:
        found = resolve(state, ref, op, now)
        if isinstance(found, errors.KittiwakeError):
            outcomes.append(ItemOutcome(ref.queue, ref.pid, False, found.code, found.message))
            continue
        queue, task = found
        outcomes.append(apply(queue, task, mutations, ItemOutcome(ref.queue, ref.pid, True)))
        flush(state, mutations)
    enforce_cache(state)
    return outcomes


def dequeue(state: EngineState, refs: Sequence[LeaseRef], now: float) -> list[ItemOutcome]:
    """Finish leased tasks; per-item outcomes."""

    def apply(queue: QueueState, task: Task, mutations: list[Mutation], outcome: ItemOutcome) -> ItemOutcome:
        apply_dequeue(state, queue, task, now, mutations)
        forget_if_empty(state, queue)
        return outcome

    return _batch(state, refs, DEQUEUE, now, apply)


def renew(
    state: EngineState,
    refs: Sequence[LeaseRef],
    lease_secs: float,
    now: float,
    progress: float | None = None,
    note: str | None = None,
) -> list[ItemOutcome]:
    """Extend leases to now + lease_secs, recording the worker's progress
    (0..1) and note when given; per-item outcomes."""
    lease_secs = validate_lease_secs(lease_secs, state.limits)
    if progress is not None:
        if isinstance(progress, bool) or not isinstance(progress, (int, float)) or not 0.0 <= progress <= 1.0:
            raise errors.BadRequest("progress must be a number from 0 to 1")
    note = validate_reason(state, note)

    def apply(queue: QueueState, task: Task, mutations: list[Mutation], outcome: ItemOutcome) -> ItemOutcome:
        if progress is not None:
            task.progress = float(progress)
        if note is not None:
            task.note = note
        outcome.expires_at = apply_renew(state, queue, task, lease_secs, now, mutations)
        return outcome

    return _batch(state, refs, RENEW, now, apply)


def release(
    state: EngineState,
    refs: Sequence[LeaseRef],
    reason: str | None,
    now: float,
    bury: bool = False,
    reject: bool = False,
) -> list[ItemOutcome]:
    """Give leased tasks back (nack), counting an attempt; with `bury`, move
    them to the dead-letter queue at once (at-most-once delivery: a task
    found started before is never started again); with `reject`, hand them
    back without counting an attempt (the consumer cannot take them now, say
    for want of memory: another may). Per-item outcomes."""
    reason = validate_reason(state, reason)
    if bury and reject:
        raise errors.BadRequest("a release either buries or rejects, not both")

    def apply(queue: QueueState, task: Task, mutations: list[Mutation], outcome: ItemOutcome) -> ItemOutcome:
        if reject:
            apply_reject(state, queue, task, mutations)
        else:
            outcome.dead = apply_release(state, queue, task, reason, now, mutations, bool(bury))
        return outcome

    return _batch(state, refs, RELEASE, now, apply)

"""Update (TaskMaster §3.4, §3.6): dequeues, releases, renewals and enqueues, all or nothing.

One update moves a unit of work along a pipeline: finish the task of this
stage and start the next stage's in the same commit. Its items must all lie
within one consistency group (CROSS_GROUP_UPDATE otherwise), and every item
is checked — arguments, then each lease ref resolved as `leases` would for a
single call — before any is applied, so a refused update changes nothing.
Then the dequeues, releases and renewals are applied (the `leases.apply_*`
functions, the same moves as the single calls), then the enqueues
(`enqueue.enqueue_one`), in that order: an update may dequeue a pid and
enqueue it again, which reschedules the task.

What an update did comes back as an `UpdateOutcome`: one outcome per item, by
kind, each kind in the order its items were given.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from kittiwake.constants import DEFAULT_LEASE_SECS
from kittiwake import errors
from kittiwake.engine import join_index
from kittiwake.engine.enqueue import enqueue_one
from kittiwake.engine.failures import validate_reason
from kittiwake.engine.head_cache import enforce_cache
from kittiwake.engine.leases import (
    DEQUEUE,
    RELEASE,
    RENEW,
    apply_dequeue,
    apply_release,
    apply_renew,
    resolve,
    validate_refs,
)
from kittiwake.engine.mutations import Mutation
from kittiwake.engine.queue_state import QueueState
from kittiwake.engine.state import EngineState, flush, forget_if_empty
from kittiwake.engine.transitions import Operation
from kittiwake.model import EnqueueOutcome, ItemOutcome, LeaseRef, NewTask, Task, group_of, validate_lease_secs


@dataclass(frozen=True, slots=True)
class UpdateOutcome:
    """What one atomic update did, item by item (every item succeeded, or the update raised)."""

    enqueued: list[EnqueueOutcome] = field(default_factory=list)  # `collapsed` when the pid was taken
    dequeued: list[ItemOutcome] = field(default_factory=list)
    renewed: list[ItemOutcome] = field(default_factory=list)  # `expires_at`: the lease's new end
    released: list[ItemOutcome] = field(default_factory=list)  # `dead` when the task was dead-lettered


def update(
    state: EngineState,
    *,
    enqueue: Sequence[NewTask] = (),
    dequeue: Sequence[LeaseRef] = (),
    renew: Sequence[LeaseRef] = (),
    release: Sequence[LeaseRef] = (),
    lease_secs: float = DEFAULT_LEASE_SECS,
    reason: str | None = None,
    now: float,
) -> UpdateOutcome:
    """Atomic batch of dequeues, releases, renewals and enqueues in one group."""
    limits = state.limits
    total = len(enqueue) + len(dequeue) + len(renew) + len(release)
    if total == 0:
        raise errors.BadRequest("update has nothing to do")
    if total > limits.max_batch:
        raise errors.BadRequest(f"more than {limits.max_batch} items in one update")
    for new in enqueue:
        new.validate(limits)
    join_index.check_tokens(state, enqueue)
    validate_refs(state, [*dequeue, *renew, *release])
    if renew:
        lease_secs = validate_lease_secs(lease_secs, limits)
    reason = validate_reason(state, reason)
    groups = {group_of(new.queue) for new in enqueue}
    groups.update(group_of(ref.queue) for ref in (*dequeue, *renew, *release))
    if len(groups) > 1:
        raise errors.CrossGroupUpdate(
            "update spans consistency groups " + ", ".join(repr(g) for g in sorted(groups))
        )
    seen: set[tuple[str, str]] = set()
    resolved: list[tuple[Operation, QueueState, Task]] = []
    for op, refs in ((DEQUEUE, dequeue), (RELEASE, release), (RENEW, renew)):
        for ref in refs:
            key = (ref.queue, ref.pid)
            if key in seen:
                raise errors.BadRequest(f"{ref.queue}/{ref.pid} appears twice in one update")
            seen.add(key)
            found = resolve(state, ref, op, now)
            if isinstance(found, errors.KittiwakeError):
                found.message = f"{op.value} {ref.queue}/{ref.pid}: {found.message}"
                raise found
            resolved.append((op, *found))
    mutations: list[Mutation] = []
    result = UpdateOutcome()
    for op, queue, task in resolved:
        outcome = ItemOutcome(queue.name, task.pid, True)
        if op is DEQUEUE:
            apply_dequeue(state, queue, task, now, mutations)
            result.dequeued.append(outcome)
        elif op is RELEASE:
            outcome.dead = apply_release(state, queue, task, reason, now, mutations)
            result.released.append(outcome)
        else:
            outcome.expires_at = apply_renew(state, queue, task, lease_secs, now, mutations)
            result.renewed.append(outcome)
        flush(state, mutations)
    for new in enqueue:
        result.enqueued.append(enqueue_one(state, new, now, mutations))
        flush(state, mutations)
    for op, queue, task in resolved:
        if op is DEQUEUE:
            forget_if_empty(state, queue)
    enforce_cache(state)
    return result

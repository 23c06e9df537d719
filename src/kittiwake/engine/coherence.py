"""Several brokers on one store: claim a queue before using it, and reload it when another broker changed it.

With one broker per store the engine's memory is the truth: nobody else
writes the rows. When brokers share a store (`EngineState.shared`), each keeps
its own cache of the queues (sizes, heads, leased sets, pid bounds), and any
broker may change any queue. So every operation that reads or changes a
queue's state first *claims* it: the store locks the queue until the
transaction ends (its commit or rollback), so no other broker changes it
meanwhile, and tells whether another broker committed a change to it since
this one last did; if so, the queue's state is rebuilt from the store (its
summary and its leases, as at recovery; the head refills on demand). From the
claim to the commit, this broker's view of the queue is exact, and every rule
of the engine holds across brokers as it does within one: exclusive leases,
dedupe, fencing, atomic updates, dependencies.

A claim already held in the transaction costs a set look-up. The broker
claims the queues a batch of requests names in one sorted call before running
it (`claim_many`), so two brokers never wait on each other in a cycle; the
queues an operation reaches on its own (a dead-letter queue, a child's queue)
are claimed when reached.

What stays per broker: rates and rate limits (each broker's token bucket
grants its own share), and the listing of queues (`list_queues` shows the
queues this broker has seen; other brokers' new queues appear as their commits
are announced).
"""

from __future__ import annotations

from typing import Iterable

from kittiwake.engine.queue_state import QueueState
from kittiwake.engine.state import EngineState, drop_memory, hold_leases, open_queue, queue_of_summary
from kittiwake.engine.storage import QueueReload, is_shared


def claim(state: EngineState, name: str) -> QueueState | None:
    """Queue `name` as the store holds it, locked for this transaction; None when it is empty."""
    store = state.store
    if state.shared and is_shared(store) and name not in store.claimed:
        _reload(state, store.claim((name,)))
    return state.queues.get(name)


def claim_open(state: EngineState, name: str) -> QueueState:
    """`claim`, making the queue's state when it holds nothing yet."""
    claim(state, name)
    return open_queue(state, name)


def claim_many(state: EngineState, names: Iterable[str]) -> None:
    """Claim several queues in one call (the store locks them in a fixed order)."""
    store = state.store
    if state.shared and is_shared(store):
        claimed = store.claimed
        wanted = [name for name in names if name not in claimed]
        if wanted:
            _reload(state, store.claim(wanted))


def _reload(state: EngineState, reloads: dict[str, QueueReload]) -> None:
    """Replace the cached state of each queue another broker changed by what the store holds.
    The queue's rates and rate limit are this broker's own and carry over."""
    for name, reload in reloads.items():
        old = state.queues.get(name)
        if old is not None:
            drop_memory(state, old)
        if reload.summary is None and not reload.leased:
            continue
        if reload.summary is not None:
            queue = queue_of_summary(state, reload.summary)
        else:  # leases without a counted size cannot be; keep them visible rather than lose them
            queue = QueueState(name, size=len(reload.leased), complete=False)
        if old is not None:
            queue.rates, queue.rate = old.rates, old.rate
        state.queues[name] = queue
        state.names.add(name)
        state.names_changes += 1
        hold_leases(state, reload.leased)
        if queue.stored_available > 0:
            state.ready.add(name)  # parked long-polls on it try again

"""The queues a batch of requests names: what a broker on a shared store claims before running it.

With several brokers on one store (`engine.coherence`) a pass claims every
queue its requests name in one call, which the store locks in a fixed order:
two brokers then never wait on each other in a cycle. Queues a request reaches
only on its own (a dead-letter queue, a child's queue) are claimed when
reached. Requests are not validated yet here: anything that is not a string
where a queue name belongs is skipped, and the engine refuses the request.
"""

from __future__ import annotations

from typing import Any, Iterable, Iterator

from kittiwake.model import dead_queue_of
from kittiwake.protocol import messages as m

MAX_NAMES_PER_REQUEST = 10_000  # beyond what any request may hold: the engine refuses it anyway


def queues_named(batch: Iterable[Any]) -> list[str]:
    """Every queue name the requests of `batch` name (items that are not requests are skipped)."""
    names: dict[str, None] = {}
    for item in batch:
        if isinstance(item, m.Request):
            for count, name in enumerate(_named(item)):
                if count >= MAX_NAMES_PER_REQUEST:
                    break
                if isinstance(name, str):
                    names[name] = None
    return list(names)


def _named(request: m.Request) -> Iterator[Any]:
    # a cross-queue Stats (queues None, scoped or not by `access`) names no queue
    if isinstance(request, m.Enqueue):
        yield from _tasks(request.tasks)
    elif isinstance(request, (m.Lease, m.Stats)):
        yield from _list(request.queues)
    elif isinstance(request, (m.Renew, m.Dequeue, m.Release)):
        yield from _refs(request.leases)
    elif isinstance(request, m.Update):
        yield from _tasks(request.enqueue)
        for refs in (request.dequeue, request.renew, request.release):
            yield from _refs(refs)
    elif isinstance(request, m.Cancel):
        for key in _list(request.tasks):
            if isinstance(key, (tuple, list)) and key:
                yield key[0]
    elif isinstance(request, (m.Peek, m.Get, m.DeleteQueue)):
        yield request.queue
    elif isinstance(request, (m.RequeueDead, m.PurgeDead)):
        queue = request.queue
        yield queue
        if isinstance(queue, str):
            yield dead_queue_of(queue)


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _tasks(tasks: Any) -> Iterator[Any]:
    for task in _list(tasks):
        yield getattr(task, "queue", None)
        for parent in _list(getattr(task, "after", None)):
            if isinstance(parent, (tuple, list)) and parent:
                yield parent[0]


def _refs(refs: Any) -> Iterator[Any]:
    for ref in _list(refs):
        yield getattr(ref, "queue", None)

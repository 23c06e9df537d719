"""The joins' index over the engine state, and the checks every request path makes against it.

`joins` owns declarations and arrivals; this leaf module holds what the lower
operation modules need of it without importing it (enqueue, update and
leases refuse what a port queue cannot take; cancel uncounts a withdrawn
sequence token): the index itself is declared in `state.EngineState`
(`joins`, `join_ports`, `join_sequences`, `join_tokens`): every waiting
token's pid is in memory, so an arrival looks at the other ports, and dedupes
itself, without reading the store.
"""

from __future__ import annotations

from typing import Iterable, Sequence

from kittiwake import errors
from kittiwake.constants import JOINS_QUEUE, SEQ_FINAL_HEADER
from kittiwake.engine.state import EngineState
from kittiwake.join_spec import SEQUENCE, sequence_key
from kittiwake.model import NewTask

NOT_FINAL = -1


def check_tokens(state: EngineState, tasks: Sequence[NewTask]) -> None:
    """Refuse tasks a join's ports cannot take, before any task of the request is applied."""
    for task in tasks:
        if task.queue == JOINS_QUEUE:
            raise errors.BadRequest(f"{JOINS_QUEUE!r} is the broker's own queue: use declare_join")
        name = state.join_ports.get(task.queue)
        if name is None:
            continue
        mode = state.joins[name].port_of(task.queue).mode
        where = f"queue {task.queue!r} is port of join {name!r}"
        if task.pid is None:
            raise errors.BadRequest(f"{where}: a token needs a pid, its key")
        if task.after:
            raise errors.BadRequest(f"{where}: a token cannot wait for parents")
        if mode == SEQUENCE and sequence_key(task.pid) is None:
            raise errors.BadRequest(f"{where}: a sequence token's pid is <key>/<index>, got {task.pid[:64]!r}")


def check_queues(state: EngineState, queues: Iterable[str], what: str) -> None:
    """Refuse a lease (or a cancel, a delete) of the joins' own queues."""
    for queue in queues:
        if queue == JOINS_QUEUE:
            raise errors.BadRequest(f"cannot {what} {JOINS_QUEUE!r}: declare_join and drop_join keep it")
        name = state.join_ports.get(queue)
        if name is not None and what == "lease":
            raise errors.BadRequest(f"cannot lease {queue!r}: it is a port of join {name!r}, whose tokens it takes")



def count(state: EngineState, queue: str, key: str, index: int, headers: dict[str, str] | None) -> list[int]:
    counter = state.join_sequences.get((queue, key))
    if counter is None:
        counter = state.join_sequences[(queue, key)] = [0, NOT_FINAL]
    counter[0] += 1
    if headers and SEQ_FINAL_HEADER in headers:
        counter[1] = index + 1
    return counter


def has_token(state: EngineState, queue: str, pid: str) -> bool:
    return pid in state.join_tokens.get(queue, ())


def forget_queue(state: EngineState, queue: str) -> None:
    """A port queue was deleted (or left its join): forget its tokens and sequence counts."""
    state.join_tokens.pop(queue, None)
    for key in [key for key in state.join_sequences if key[0] == queue]:
        del state.join_sequences[key]


def token_left(state: EngineState, queue: str, pid: str) -> None:
    """A token left its port (cancelled, taken, purged): a sequence counts one fewer."""
    tokens = state.join_tokens.get(queue)
    if tokens is not None:
        tokens.discard(pid)
    name = state.join_ports.get(queue)
    if name is None or state.joins[name].port_of(queue).mode != SEQUENCE:
        return
    parsed = sequence_key(pid)
    if parsed is None:
        return
    counter = state.join_sequences.get((queue, parsed[0]))
    if counter is not None:
        counter[0] -= 1
        if counter[1] == parsed[1] + 1:
            counter[1] = NOT_FINAL
        if counter[0] <= 0:
            del state.join_sequences[(queue, parsed[0])]

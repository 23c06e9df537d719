"""Joins (BalticLSC's multi-queue): one job when matching tokens stand in every required port.

A join is declared once (`join_spec.JoinSpec`: a job queue and named ports,
each a queue of the job queue's group) and kept as a task of the broker's own
queue `_joins` (pid = the join's name, data = the spec), so it is as durable
as any task and every store keeps it without a table of its own.

A *token* is a task in a port queue; its pid is its key (`<run>/<index>...`),
or for a `sequence` port `<key>/<index>`. When a token arrives — enqueue,
the enqueue half of an update, a requeued dead letter — `arrived` looks at the
join's other ports for the same key. When every required port holds its token
and every sequence port its whole sequence (indices 0 to the one flagged
`kittiwake-seq-final`), it takes them (and any optional port's token of that
key) out of their queues and enqueues one job into the job queue, pid = the
key, data = the tokens (`job_payload`), in the same pass as the arrival: the
broker commits both or neither, so two arrivals cannot both start the job, and
a crash loses no token and starts no job twice. A job already waiting or
running under that key is not started again: the new tokens wait.

What the engine holds (declared in `state.EngineState`): `joins` (name →
spec), `join_ports` (port queue → join name) and `join_sequences` ((port
queue, key) → [tokens arrived, length or -1 until the final token came]), so
an arrival costs a few look-ups. All three are rebuilt by `recover` from the
`_joins` queue and the sequence ports' tokens: a restart reads the waiting
sequence tokens once, nothing else.

Port queues are the joins' alone: a lease naming one is refused, a token
without a pid (its key), with parents (`after`) or with a malformed sequence
pid is refused with the request (`join_index`, the checks the lower
operation modules make). `purge` garbage-collects the tokens of a key and
everything below it (a finished or cancelled run); `drop` forgets a join
(its tokens stay in their queues). A job's tokens together may take up to
the lease reply's 8 MiB; a larger job goes straight to the job queue's
dead-letter queue (`JOB_TOO_LARGE`), tokens and all.
"""

from __future__ import annotations

from typing import Any, Iterable

import msgspec

from kittiwake import errors
from kittiwake.constants import JOIN_HEADER, JOINS_QUEUE, SEQ_SEPARATOR
from kittiwake.engine import failures
from kittiwake.engine.head_cache import add_available, enforce_cache, exists, find, touch
from kittiwake.engine.join_index import count, forget_queue, has_token
from kittiwake.engine.mutations import DeleteTask, Mutation, PutTask
from kittiwake.engine.queue_patterns import name_matcher
from kittiwake.engine.queue_state import QueueState
from kittiwake.engine.rates import ENQUEUE
from kittiwake.engine.state import EngineState, flush, forget_if_empty, open_queue, rates_of
from kittiwake.engine.tally import ENQUEUED
from kittiwake.join_spec import REQUIRED, SEQUENCE, JoinSpec, key_matches, sequence_key
from kittiwake.model import Task, validate_pid

JOB_TOO_LARGE_REASON = "JOB_TOO_LARGE"
SCAN_PAGE = 512
_encode = msgspec.msgpack.Encoder().encode
_decode_spec = msgspec.msgpack.Decoder(JoinSpec).decode


# ------------------------------------------------------------ declarations


def declare(state: EngineState, spec: JoinSpec, now: float) -> str:
    """Keep `spec`: "created", "unchanged" (the same spec was there) or "replaced"."""
    spec.validate(state.limits)
    for port in spec.ports:
        owner = state.join_ports.get(port.queue)
        if owner is not None and owner != spec.name:
            raise errors.BadRequest(f"queue {port.queue!r} is already a port of join {owner!r}")
    old = state.joins.get(spec.name)
    if old == spec:
        return "unchanged"
    for port in spec.ports:
        queue = state.queues.get(port.queue)
        if queue is not None and queue.leased:
            raise errors.BadRequest(f"queue {port.queue!r} has leased tasks: a port's tokens are the join's alone")
    mutations: list[Mutation] = []
    if old is not None:
        _forget(state, old)
        _take(state, JOINS_QUEUE, spec.name, mutations)
        flush(state, mutations)
    _put(state, Task(queue=JOINS_QUEUE, pid=spec.name, data=_encode(spec), enqueued_at=now), now, mutations)
    flush(state, mutations)
    _index(state, spec)
    return "created" if old is None else "replaced"


def drop(state: EngineState, name: str) -> bool:
    """Forget join `name`; its tokens stay in their queues. False if there was none."""
    validate_pid(name, state.limits, "join")
    spec = state.joins.get(name)
    if spec is None:
        return False
    _forget(state, spec)
    mutations: list[Mutation] = []
    _take(state, JOINS_QUEUE, name, mutations)
    flush(state, mutations)
    return True


def _index(state: EngineState, spec: JoinSpec) -> None:
    state.joins[spec.name] = spec
    for port in spec.ports:
        state.join_ports[port.queue] = spec.name
        _load_tokens(state, port.queue, port.mode)


def _forget(state: EngineState, spec: JoinSpec) -> None:
    state.joins.pop(spec.name, None)
    for port in spec.ports:
        state.join_ports.pop(port.queue, None)
        forget_queue(state, port.queue)


def _load_tokens(state: EngineState, queue: str, mode: str) -> None:
    """Read the tokens waiting in a port from the store (declare, recover): their pids, and
    for a sequence port their counts per key."""
    forget_queue(state, queue)
    tokens = state.join_tokens[queue] = set()
    for task in _scan(state, queue, None):
        tokens.add(task.pid)
        parsed = sequence_key(task.pid) if mode == SEQUENCE else None
        if parsed is not None:
            count(state, queue, parsed[0], parsed[1], task.headers)


def recover(state: EngineState) -> None:
    """Rebuild the joins, their port index and the sequence counts from the store."""
    for task in _scan(state, JOINS_QUEUE, None):
        try:
            spec = _decode_spec(task.data)
        except msgspec.DecodeError:
            continue  # not written by declare: nothing to start jobs with
        _index(state, spec)


def _scan(state: EngineState, queue: str, prefix: str | None) -> Iterable[Task]:
    """Every task of `queue` from the store in pid order (with pid >= prefix, while it starts with it)."""
    if queue not in state.queues:
        return
    start = prefix
    while True:
        page = state.store.scan(queue, start, SCAN_PAGE)
        for task in page:
            if prefix is not None and not task.pid.startswith(prefix):
                return
            yield task
        if len(page) < SCAN_PAGE:
            return
        start = page[-1].pid + "\x00"


# ------------------------------------------------------------------ arrival


def arrived(state: EngineState, task: Task, now: float, mutations: list[Mutation]) -> None:
    """A new token stands in a port queue: start the job if its key is now complete."""
    name = state.join_ports.get(task.queue)
    if name is None:
        return
    spec = state.joins[name]
    port = spec.port_of(task.queue)
    state.join_tokens.setdefault(task.queue, set()).add(task.pid)
    if port.mode == SEQUENCE:
        parsed = sequence_key(task.pid)
        if parsed is None:
            return  # was checked with its request; a requeued dead letter of an older spec
        key = parsed[0]
        counter = count(state, task.queue, key, parsed[1], task.headers)
        if counter[0] != counter[1]:
            return
    else:
        key = task.pid
    flush(state, mutations)
    if _complete(state, spec, key):
        _start_job(state, spec, key, now, mutations, arrival=task)


def _complete(state: EngineState, spec: JoinSpec, key: str) -> bool:
    for port in spec.ports:
        if port.mode == REQUIRED and not has_token(state, port.queue, key):
            return False
        if port.mode == SEQUENCE:
            counter = state.join_sequences.get((port.queue, key))
            if counter is None or counter[0] != counter[1]:
                return False
    job_queue = state.queues.get(spec.job_queue)
    return job_queue is None or not exists(state, job_queue, key)


def _start_job(state: EngineState, spec: JoinSpec, key: str, now: float, mutations: list[Mutation],
               arrival: Task | None = None) -> None:
    """Take the key's tokens and put its job. `arrival`, the token that completed the key, is taken
    as it is: it was written in this very pass, so reading it back would flush the pass's writes."""
    tokens: dict[str, list[dict[str, Any]]] = {}
    for port in spec.ports:
        if port.mode == SEQUENCE:
            taken = _take_sequence(state, port.queue, key, mutations)
        else:
            known = arrival if arrival is not None and arrival.queue == port.queue and arrival.pid == key else None
            one = _take(state, port.queue, key, mutations, known)  # a required one is there; an optional one may be
            taken = [one] if one is not None else []
        tokens[port.name] = [
            {"pid": t.pid, "data": t.data, "headers": t.headers, "sender": t.sender} for t in taken
        ]
    flush(state, mutations)
    payload = _encode({"join": spec.name, "key": key, "tokens": tokens})
    job = Task(queue=spec.job_queue, pid=key, data=payload, enqueued_at=now, headers={JOIN_HEADER: spec.name},
               max_attempts=spec.max_attempts)
    if len(payload) > state.limits.max_reply_data_bytes:
        # no lease could hand it out: keep the tokens in a dead letter, and say why
        reason = f"{JOB_TOO_LARGE_REASON} {len(payload)} bytes of tokens, over {state.limits.max_reply_data_bytes}"
        failures.bury(state, job, reason, now, mutations)
    else:
        _put(state, job, now, mutations)
    flush(state, mutations)


def _put(state: EngineState, task: Task, now: float, mutations: list[Mutation]) -> None:
    """A new available task whose pid is known to be free (a job, a declaration); a job
    queue may itself be a port of another join."""
    queue = open_queue(state, task.queue)
    touch(state, queue)
    queue.size += 1
    queue.note_pid(task.pid)
    add_available(state, queue, task)
    rates_of(queue).add(ENQUEUE, now)
    state.tally.count(queue.name, ENQUEUED)
    mutations.append(PutTask(task))
    if task.queue in state.join_ports:
        arrived(state, task, now, mutations)


def _take(state: EngineState, queue_name: str, pid: str, mutations: list[Mutation],
          known: Task | None = None) -> Task | None:
    """Take an available task out of its queue (gone: a join took it, or a purge); `known` is that
    task as this pass put it, if it did."""
    queue = state.queues.get(queue_name)
    if queue is None or pid in queue.leased or (queue_name in state.join_ports and not has_token(state, queue_name, pid)):
        return None
    task = known if known is not None else find(state, queue, pid)
    if task is None:
        return None
    _remove(state, queue, task, mutations)
    forget_if_empty(state, queue)
    return task


def _remove(state: EngineState, queue: QueueState, task: Task, mutations: list[Mutation]) -> None:
    if queue.remove_available(task.pid) is not None:
        state.memory_bytes -= task.size_bytes()
    queue.size -= 1
    mutations.append(DeleteTask(queue.name, task.pid))
    tokens = state.join_tokens.get(queue.name)
    if tokens is not None:
        tokens.discard(task.pid)


def _take_sequence(state: EngineState, queue_name: str, key: str, mutations: list[Mutation]) -> list[Task]:
    """Take the whole sequence `key` out of a sequence port, in index order."""
    state.join_sequences.pop((queue_name, key), None)
    queue = state.queues.get(queue_name)
    if queue is None:
        return []
    flush(state, mutations)
    taken: list[tuple[int, Task]] = []  # (index in the sequence, token)
    for task in list(_scan(state, queue_name, key + SEQ_SEPARATOR)):
        parsed = sequence_key(task.pid)
        if parsed is None or parsed[0] != key or task.pid in queue.leased:
            continue
        _remove(state, queue, task, mutations)
        taken.append((parsed[1], task))
    forget_if_empty(state, queue)
    taken.sort(key=lambda entry: entry[0])
    return [task for _, task in taken]


# ------------------------------------------------------------ purge, views


def purge(state: EngineState, name: str, key: str, limit: int = 10_000) -> int:
    """Delete up to `limit` tokens waiting in join `name`'s ports whose key is
    `key` or lies below it; returns how many (call again until 0)."""
    validate_pid(name, state.limits, "join")
    validate_pid(key, state.limits, "key")
    spec = state.joins.get(name)
    if spec is None:
        raise errors.TaskNotFound(f"no join {name!r}")
    mutations: list[Mutation] = []
    removed = 0
    for port in spec.ports:
        queue = state.queues.get(port.queue)
        if queue is None:
            continue
        for task in list(_scan(state, port.queue, key)):
            if removed >= limit:
                break
            parsed = sequence_key(task.pid) if port.mode == SEQUENCE else None
            token_key = parsed[0] if parsed is not None else task.pid
            if not key_matches(token_key, key) or task.pid in queue.leased:
                continue
            _remove(state, queue, task, mutations)
            state.join_sequences.pop((port.queue, token_key), None)
            removed += 1
        forget_if_empty(state, queue)
        flush(state, mutations)
    enforce_cache(state)
    return removed


def infos(state: EngineState, pattern: str | None = None) -> list[dict[str, Any]]:
    """Every join (whose name `pattern` matches, as list_queues'), with the tokens waiting in its ports."""
    matches = name_matcher(pattern) if pattern is not None else None
    out = []
    for name in sorted(state.joins):
        if matches is not None and not matches(name):
            continue
        spec = state.joins[name]
        waiting = sum(state.queues[p.queue].size for p in spec.ports if p.queue in state.queues)
        out.append({
            "name": spec.name,
            "job_queue": spec.job_queue,
            "ports": [(p.name, p.queue, p.mode) for p in spec.ports],
            "max_attempts": spec.max_attempts,
            "tokens_waiting": waiting,
        })
    return out


__all__ = ["arrived", "declare", "drop", "infos", "purge", "recover"]

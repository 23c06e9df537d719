"""Broker-wide ids from the clock: FIFO pids and lease ids, never issued twice.

Both are the clock in microseconds, stepped past the last one issued, so they
grow strictly even when the wall clock steps back (a FIFO pid sorts after every
FIFO pid before it, in every queue; a lease id is a fencing token that must
never repeat). Each has a high-water mark in the store (`SetCounter`), written
a minute ahead of the value that passed the last one, so it costs one row write
a minute and a restart resumes above it whatever the clock says then.

Brokers sharing one store each own a residue class (`id_slot` modulo
`id_stride`, the store's numbering of the brokers alive): their ids never meet,
and FIFO pids of different brokers still interleave within `id_stride`
microseconds of the clock. The high-water marks are shared (raised with
`greatest`), so a broker starting in any slot resumes above every id issued.

A cluster node at index `i` of its map issues ids equal to `i` modulo the
cluster's stride (`Engine(id_class=...)`), so an id names the node that
issued it; on a shared store the two combine: slot `i + stride * store_slot`,
stride `stride * store_stride`, which keeps both residues.

Changes `EngineState.last_fifo_micros`, `last_lease_id` and `reserved`.
"""

from __future__ import annotations

from kittiwake.engine.mutations import Mutation, SetCounter
from kittiwake.engine.state import FIFO_COUNTER, LEASE_ID_COUNTER, EngineState
from kittiwake.model import fifo_pid

COUNTER_RESERVE = 60_000_000  # a minute of clock-based ids per persisted high-water mark


def next_fifo_pid(state: EngineState, now: float, mutations: list[Mutation]) -> str:
    micros = _in_slot(state, max(int(now * 1_000_000), state.last_fifo_micros + 1))
    state.last_fifo_micros = micros
    reserve(state, FIFO_COUNTER, micros, mutations)
    return fifo_pid(micros)


def next_lease_id(state: EngineState, now: float, mutations: list[Mutation]) -> int:
    lease_id = _in_slot(state, max(state.last_lease_id + 1, int(now * 1_000_000)))
    state.last_lease_id = lease_id
    reserve(state, LEASE_ID_COUNTER, lease_id, mutations)
    return lease_id


def _in_slot(state: EngineState, value: int) -> int:
    """The least id >= value in this broker's residue class."""
    stride = state.id_stride
    return value if stride == 1 else value + (state.id_slot - value) % stride


def reserve(state: EngineState, counter: str, value: int, mutations: list[Mutation]) -> None:
    """Persist a high-water mark a minute ahead of `value` once `value` passes
    the last one: restarts resume above it, whatever the clock says then."""
    reserved = state.reserved
    if value > reserved[counter]:
        reserved[counter] = value + COUNTER_RESERVE
        mutations.append(SetCounter(counter, value + COUNTER_RESERVE))

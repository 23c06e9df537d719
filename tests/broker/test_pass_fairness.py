"""Which requests a pass takes (`Passes._take_batch`), against a model: wide reads — whose work grows
with every queue the broker holds — are bounded per connection and per pass, a connection whose
request is left keeps its order, and the others' requests are not held behind them.

Found: on a broker of 50,000 queues one user with no admin right pipelined 300 `list_queues` (each
walking every name for its rights) and another client's ping waited 16 s behind them in one pass."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kittiwake.broker.access import ScopedListQueues
from kittiwake.broker.passes import (
    MAX_WIDE_READS_PER_CONNECTION,
    MAX_WIDE_READS_PER_PASS,
    WIDE_READS,
    PassLimits,
    Passes,
)
from kittiwake.engine import Engine
from kittiwake.protocol import messages as m
from kittiwake.protocol.frames import DEFAULT_MAX_FRAME
from kittiwake.store.memory import MemoryStore


class Caller:
    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


def passes(max_requests: int) -> Passes:
    store = MemoryStore()
    limits = PassLimits(max_frame=DEFAULT_MAX_FRAME, max_held_bytes=1 << 20, max_requests=max_requests)
    return Passes(store, lambda: Engine(store), limits, wall_clock=lambda: 0.0, monotonic_clock=lambda: 0.0)


def request(index: int, wide: bool) -> m.Request:
    if wide:  # as a user with an auth file sends it: its scoped twin
        return ScopedListQueues(id=index, op="list_queues") if index % 2 else m.ListQueues(id=index, op="list_queues")
    return m.Ping(id=index, op="ping")


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.booleans()), max_size=80), st.integers(1, 40))
def test_a_pass_takes_wide_reads_within_bounds_and_keeps_each_connections_order(
    sent: list[tuple[int, bool]], max_requests: int
) -> None:
    callers = [Caller(f"c{index}") for index in range(4)]
    pending = [(callers[who], request(index, wide)) for index, (who, wide) in enumerate(sent)]
    batch, rest = passes(max_requests)._take_batch(list(pending))
    assert sorted(id(entry) for entry in batch + rest) == sorted(id(entry) for entry in pending)
    assert len(batch) <= max_requests and (batch or not pending)  # a pass always makes progress
    wide = [(caller, item) for caller, item in batch if isinstance(item, WIDE_READS)]
    assert len(wide) <= MAX_WIDE_READS_PER_PASS
    assert all(sum(1 for caller, _ in wide if caller is who) <= MAX_WIDE_READS_PER_CONNECTION for who in callers)
    for who in callers:  # the batch takes a prefix of each connection's requests; order is kept
        mine = [item.id for caller, item in pending if caller is who]
        taken = [item.id for caller, item in batch if caller is who]
        assert mine[: len(taken)] == taken
        assert [item.id for caller, item in rest if caller is who] == mine[len(taken):]
    for index, (caller, item) in enumerate(pending):  # nothing left that could have gone
        if (caller, item) in rest and len(batch) < max_requests and not isinstance(item, WIDE_READS):
            earlier = [entry for entry in pending[:index] if entry[0] is caller]
            assert any(entry in rest for entry in earlier), f"{item.id} of {caller} was held back for nothing"


def test_a_ping_behind_a_connections_pipelined_listings_goes_in_the_first_pass() -> None:
    hog, other = Caller("hog"), Caller("other")
    pending = [(hog, request(index, True)) for index in range(300)] + [(other, request(1000, False))]
    batch, rest = passes(20_000)._take_batch(pending)
    assert [item.id for caller, item in batch] == [0, 1, 2, 3, 1000]
    assert len(rest) == 296

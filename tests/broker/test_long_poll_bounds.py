"""The bounds on long-polls, through the broker's request path without sockets (`SocketlessBroker`):
the queue names one connection's parked long-polls may hold, and the retries one pass may make.

Both were found unbounded: one connection parked up to 10,000 leases of 1,000 queue names each
(584 KiB apiece in the broker), and every pass after an enqueue retried every one of them in full —
3,000 such long-polls made each enqueue stall every client for 1.3 s."""

from __future__ import annotations

from typing import Any

import pytest

from kittiwake.broker import long_polls
from kittiwake.protocol import DEFAULT_MAX_FRAME, encode_frame, encode_request
from support.socketless_broker import SocketlessBroker


def frame(op: str, request_id: int, fields: dict[str, Any]) -> bytes:
    return encode_frame(encode_request(op, request_id, fields))


def test_a_connection_parks_long_polls_up_to_its_bound_of_queue_names_then_is_answered_at_once() -> None:
    per_lease = 1000
    fits = long_polls.MAX_PARKED_NAMES_PER_CONNECTION // per_lease
    with SocketlessBroker(max_frame=DEFAULT_MAX_FRAME) as broker:
        for request_id in range(1, fits + 3):
            queues = [f"w{request_id}.{n}" for n in range(per_lease)]
            broker.send(frame("lease", request_id, {"queues": queues, "wait_secs": 60.0}))
        broker.settle()
        answered = broker.replies()
        assert [(reply.id, reply.ok, reply.result) for reply in answered] == [
            (fits + 1, True, []), (fits + 2, True, [])]  # the others wait
        assert len(broker.group.passes.long_polls) == fits


def test_a_pass_retries_long_polls_up_to_its_budget_and_the_next_pass_takes_the_rest(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(long_polls, "RETRY_BUDGET_NAMES", 3)
    with SocketlessBroker(max_frame=DEFAULT_MAX_FRAME) as broker:
        for request_id in range(1, 11):  # ten workers waiting on one queue
            broker.send(frame("lease", request_id, {"queues": ["work"], "wait_secs": 60.0}))
        broker.settle()
        assert broker.replies() == []
        passes = broker.group.passes.passes
        broker.send(frame("enqueue", 100, {"tasks": [{"queue": "work", "data": b"x"} for _ in range(10)]}))
        broker.settle()
        served = [reply for reply in broker.replies() if reply.id != 100]
        assert sorted(reply.id for reply in served) == list(range(1, 11))
        assert all(reply.ok and len(reply.result) == 1 for reply in served)
        assert broker.group.passes.passes - passes >= 4  # three retried per pass, oldest first
        assert [reply.id for reply in served] == list(range(1, 11))

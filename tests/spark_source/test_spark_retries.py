"""Repeating broker calls through transient failures (`kittiwake.client.retries`): repeated until they
succeed within the deadline, the last failure raised past it, other errors never repeated."""

from __future__ import annotations

import pytest

from kittiwake import errors
from kittiwake.client.retries import retrying


def failing(times: int, error: errors.KittiwakeError) -> tuple[list[int], object]:
    calls: list[int] = []

    def call() -> str:
        calls.append(1)
        if len(calls) <= times:
            raise error
        return "done"

    return calls, call


def test_a_transient_failure_is_repeated_until_the_call_succeeds() -> None:
    calls, call = failing(2, errors.ConnectionLost("cut"))
    assert retrying(call, deadline_secs=5) == "done"  # type: ignore[arg-type]
    assert len(calls) == 3


def test_past_the_deadline_or_for_other_errors_the_failure_is_raised() -> None:
    calls, call = failing(100, errors.BrokerUnreachable("down"))
    with pytest.raises(errors.BrokerUnreachable):
        retrying(call, deadline_secs=0.2)  # type: ignore[arg-type]
    calls, call = failing(1, errors.BadRequest("no"))
    with pytest.raises(errors.BadRequest):
        retrying(call)  # type: ignore[arg-type]
    assert len(calls) == 1

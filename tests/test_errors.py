"""The error tree: every public error under `KittiwakeError` with a stable code, the transient ones
under `Transient`, and every code received on the wire decoded back to its class."""

from __future__ import annotations

import inspect

import pytest

import kittiwake
import kittiwake.app
from kittiwake import errors
from kittiwake.app.serialization import RemoteError

# StorageFailure is UNAVAILABLE told in more detail on the broker's side (the fault, whether the
# outcome is known): it shares its parent's code, and a client decodes that code as Unavailable
REFINEMENTS = {errors.StorageFailure: errors.Unavailable}
PUBLIC = [
    cls for _, cls in inspect.getmembers(errors, inspect.isclass)
    if issubclass(cls, errors.KittiwakeError) and cls not in (errors.KittiwakeError, errors.Transient)
    and cls not in REFINEMENTS
]
TRANSIENT = {
    errors.Unavailable, errors.TooManyConnections, errors.IdleTimeout,
    errors.ConnectionLost, errors.BrokerUnreachable, errors.RequestTimeout, errors.ProducerFull,
}


@pytest.mark.parametrize("cls", PUBLIC, ids=lambda cls: cls.__name__)
def test_every_error_has_its_own_code_and_says_when_it_is_raised(cls: type[errors.KittiwakeError]) -> None:
    assert cls.__doc__ and cls.__doc__.strip()
    assert cls.code.isupper() and (cls.code != "INTERNAL" or cls is errors.InternalError)
    decoded = errors.error_for_code(cls.code, "why")
    assert type(decoded) is cls and decoded.code == cls.code and decoded.message == "why"


def test_a_refinement_shares_its_parents_code_and_decodes_as_the_parent() -> None:
    for refinement, parent in REFINEMENTS.items():
        assert issubclass(refinement, parent) and refinement.code == parent.code
        assert type(errors.error_for_code(refinement.code, "why")) is parent


def test_codes_are_unique() -> None:
    codes = [cls.code for cls in PUBLIC]
    assert len(codes) == len(set(codes)) == len(errors.ALL_CODES)


def test_transient_is_the_parent_of_exactly_the_errors_a_retry_may_not_meet() -> None:
    assert {cls for cls in PUBLIC if issubclass(cls, errors.Transient)} == TRANSIENT
    with pytest.raises(errors.Transient):
        raise errors.error_for_code("UNAVAILABLE", "disk full")


def test_task_failed_and_result_unavailable_are_in_the_tree_and_importable_where_they_were() -> None:
    assert kittiwake.TaskFailed is kittiwake.app.TaskFailed is errors.TaskFailed
    assert kittiwake.ResultUnavailable is kittiwake.app.ResultUnavailable is errors.ResultUnavailable
    assert (errors.TaskFailed.code, errors.ResultUnavailable.code) == ("TASK_FAILED", "RESULT_UNAVAILABLE")


def test_task_failed_carries_the_remote_error() -> None:
    failure = errors.TaskFailed.for_task("t1", RemoteError("ValueError", "bad row", "Traceback ...", "ERROR"))
    assert str(failure) == "TASK_FAILED: task t1 failed (ERROR): ValueError: bad row"
    assert (failure.task_id, failure.reason, failure.type, failure.remote_message, failure.traceback) == (
        "t1", "ERROR", "ValueError", "bad row", "Traceback ...")
    assert str(errors.TaskFailed.for_task("t2", RemoteError("", "", reason="CANCELLED"))) == (
        "TASK_FAILED: task t2 failed (CANCELLED)")

"""The reply declarations: one envelope read two ways, and the records the engine hands out as they are."""

from __future__ import annotations

import dataclasses

import msgspec
import pytest

from kittiwake import errors
from kittiwake.engine import inspection
from kittiwake.model import Task
from kittiwake.protocol import REPLY_TYPES, REQUEST_TYPES
from kittiwake.protocol.replies import (
    LeasedTask,
    TaskView,
    decode_envelope,
    decode_reply,
    error_of,
    result_decoder,
)


def test_every_op_has_a_declared_result() -> None:
    assert set(REPLY_TYPES) == set(REQUEST_TYPES)


def test_a_lease_holder_reads_the_engines_task_as_it_is_sent() -> None:
    """The broker sends its `Task` records without a copy; each wire name of `LeasedTask` must be one
    of their fields, decoded to the same value."""
    task = Task("q", "p", b"d", 1.0, sender="s", receiver="r", headers={"h": "v"}, max_attempts=3, attempts=1,
                deliveries=2, lease_id=42, lease_owner="w", lease_peer="127.0.0.1:1", leased_at=9.0,
                lease_expires_at=39.0, waiting_on=0, children=2, progress=0.5, note="n")
    sent = msgspec.msgpack.decode(msgspec.msgpack.encode(task))
    [got] = result_decoder("lease")(msgspec.msgpack.encode([task]))
    for field in msgspec.structs.fields(LeasedTask):
        assert field.encode_name in sent, f"LeasedTask.{field.name} reads {field.encode_name!r}, which Task lacks"
        assert getattr(got, field.name) == sent[field.encode_name]
    assert {f.name for f in dataclasses.fields(Task)} == set(sent)


def test_a_task_view_has_exactly_the_engines_view_fields_in_order() -> None:
    """`dispatch` builds `TaskView(**view)`: the same names, and the same order on the wire."""
    view = inspection.view(Task("q", "p", b"d", 1.0), 2.0)
    assert list(view) == [field.encode_name for field in msgspec.structs.fields(TaskView)]
    assert msgspec.msgpack.encode(TaskView(**view)) == msgspec.msgpack.encode(view)


def test_one_envelope_read_raw_by_clients_and_whole_by_tools() -> None:
    body = msgspec.msgpack.encode({"id": 3, "ok": True, "result": [{"queue": "q", "size": 1, "leased": 0}]})
    raw = decode_envelope(body)
    assert (raw.id, raw.ok, raw.error) == (3, True, None)
    assert isinstance(raw.result, msgspec.Raw)
    assert result_decoder("list_queues")(raw.result)[0].size == 1
    whole = decode_reply(body)
    assert whole.result == [{"queue": "q", "size": 1, "leased": 0}]


def test_an_error_reply_is_its_error_class() -> None:
    body = msgspec.msgpack.encode({"id": 4, "ok": False, "error": {"code": "LEASE_EXPIRED", "message": "late"}})
    for reply in (decode_envelope(body), decode_reply(body)):
        assert reply.error == {"code": "LEASE_EXPIRED", "message": "late"}
        error = error_of(reply)
        assert isinstance(error, errors.LeaseExpired) and error.message == "late"
    unexplained = decode_envelope(msgspec.msgpack.encode({"id": 4, "ok": False}))
    assert error_of(unexplained).code == "INTERNAL"


def test_a_body_that_is_not_a_reply_is_refused() -> None:
    with pytest.raises(msgspec.DecodeError):
        decode_envelope(msgspec.msgpack.encode({"id": "x", "ok": True}))

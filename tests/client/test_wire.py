"""Reply envelopes, error replies, timeouts and the reconnect schedule, sans-IO."""

from __future__ import annotations

import msgspec
import pytest

from kittiwake import errors
from kittiwake.client import calls
from kittiwake.client.backoff import MAX_DELAY_SECS, delay_secs, next_delay_secs
from kittiwake.client.wire import LONG_POLL_MARGIN_SECS, decode_envelope, effective_timeout, encode_call, result_of
from kittiwake.protocol import FrameReader, decode_request


def test_a_call_is_framed_as_the_broker_reads_it() -> None:
    [body] = FrameReader().feed(encode_call(calls.peek("q", 2), 41))
    request = decode_request(body)
    assert (request.id, request.op, request.queue, request.n) == (41, "peek", "q", 2)  # type: ignore[attr-defined]


def test_ok_reply_gives_the_typed_result() -> None:
    envelope = decode_envelope(msgspec.msgpack.encode({"id": 3, "ok": True, "result": 5}))
    assert envelope.id == 3
    assert result_of(calls.delete_queue("q"), envelope) == 5


def test_error_reply_raises_the_class_of_its_code() -> None:
    body = {"id": 4, "ok": False, "error": {"code": "CROSS_GROUP_UPDATE", "message": "g1 and g2"}}
    with pytest.raises(errors.CrossGroupUpdate) as caught:
        result_of(calls.ping(), decode_envelope(msgspec.msgpack.encode(body)))
    assert caught.value.code == "CROSS_GROUP_UPDATE"
    assert caught.value.message == "g1 and g2"


def test_unknown_error_codes_keep_their_code() -> None:
    body = {"id": 4, "ok": False, "error": {"code": "SOMETHING_NEW", "message": "?"}}
    with pytest.raises(errors.KittiwakeError) as caught:
        result_of(calls.ping(), decode_envelope(msgspec.msgpack.encode(body)))
    assert caught.value.code == "SOMETHING_NEW"


def test_a_reply_of_the_wrong_shape_is_an_internal_error() -> None:
    envelope = decode_envelope(msgspec.msgpack.encode({"id": 1, "ok": True, "result": "not a list"}))
    with pytest.raises(errors.InternalError, match="unexpected reply to peek"):
        result_of(calls.peek("q"), envelope)


def test_a_frame_that_is_not_a_reply_breaks_the_connection() -> None:
    with pytest.raises(errors.ConnectionLost):
        decode_envelope(b"\xc1garbage")


def test_timeouts() -> None:
    plain, poll = calls.ping(), calls.lease("q", wait_secs=10)
    assert effective_timeout(plain, None, None) is None  # wait as long as it takes
    assert effective_timeout(plain, None, 3.0) == 3.0
    assert effective_timeout(plain, 1.0, 3.0) == 1.0
    assert effective_timeout(poll, None, None) == 10 + LONG_POLL_MARGIN_SECS
    assert effective_timeout(poll, None, 2.0) == 12.0
    assert effective_timeout(poll, 4.0, 2.0) == 4.0


def test_backoff_doubles_from_50ms_to_a_2s_ceiling_within_the_budget() -> None:
    assert [delay_secs(n) for n in range(7)] == [0.05, 0.1, 0.2, 0.4, 0.8, 1.6, MAX_DELAY_SECS]
    assert delay_secs(1000) == MAX_DELAY_SECS
    assert next_delay_secs(6, 0.5) == 0.5
    assert next_delay_secs(0, 0.0) is None

"""Payloads: msgpack by default, pickle only for apps that opt in, errors that always travel."""

from __future__ import annotations

import pickle

import pytest

from kittiwake.app.definitions import Delivery, TaskOptions, parse_rate
from kittiwake.app.envelope import redeliver_note, redelivery_allowed, public_note, reply_queue_for
from kittiwake.app.serialization import MAX_RESULT_BYTES, PayloadError, RemoteError, Serializer


def test_msgpack_round_trips_plain_data() -> None:
    serializer = Serializer()
    payload = serializer.dump_call("add", (1, 2.5), {"name": "x", "raw": b"\x00", "items": [None, True]})
    assert payload[:1] == b"m"
    assert serializer.load_call(payload) == ("add", [1, 2.5], {"name": "x", "raw": b"\x00", "items": [None, True]})


def test_msgpack_refuses_what_it_cannot_encode() -> None:
    with pytest.raises(PayloadError):
        Serializer().dumps(object())


def test_pickle_only_when_the_app_opted_in() -> None:
    pickled = Serializer("pickle")
    payload = pickled.dumps({1, 2, 3})
    assert payload[:1] == b"p"
    assert pickled.loads(payload) == {1, 2, 3}
    with pytest.raises(PayloadError, match="pickle"):
        Serializer().loads(payload)
    # a pickle app still reads msgpack (shell commands submitted from the CLI)
    assert pickled.loads(Serializer().dumps([1])) == [1]
    with pytest.raises(ValueError):
        Serializer("json")


def test_results_that_cannot_travel_become_error_results() -> None:
    serializer = Serializer()
    assert serializer.load_result(serializer.dump_result({"ok": 1})) == (True, {"ok": 1})
    ok, error = serializer.load_result(serializer.dump_result(object()))
    assert not ok and error.reason == "RESULT_UNSERIALISABLE"
    ok, error = serializer.load_result(serializer.dump_result("x" * MAX_RESULT_BYTES))
    assert not ok and error.reason == "RESULT_TOO_LARGE"
    ok, error = serializer.load_result(b"zgarbage")
    assert not ok and error.reason == "BAD_PAYLOAD"
    ok, error = serializer.load_result(serializer.dump_error(RemoteError("KeyError", "'x'", "tb", "ERROR")))
    assert not ok and error == RemoteError("KeyError", "'x'", "tb", "ERROR")


def test_a_pickled_payload_that_runs_code_is_not_loaded_by_a_msgpack_app() -> None:
    class Exploit:
        def __reduce__(self):  # type: ignore[no-untyped-def]
            return (print, ("pwned",))

    with pytest.raises(PayloadError):
        Serializer().loads(b"p" + pickle.dumps(Exploit()))


def test_rates_backoff_and_attempts() -> None:
    assert parse_rate("100/s") == 100
    assert parse_rate("30/m") == 0.5
    assert parse_rate("36 / h") == 0.01
    assert parse_rate(None) is None
    with pytest.raises(ValueError):
        parse_rate("fast")
    options = TaskOptions(name="t", retry_backoff=1.0, retry_backoff_max=5.0)
    assert [options.backoff_secs(n, 1.0) for n in (1, 2, 3, 4)] == [1.0, 2.0, 4.0, 5.0]
    assert options.backoff_secs(2, 0.0) == 1.0
    assert TaskOptions(name="t", max_attempts=3).broker_max_attempts == 3
    assert TaskOptions(name="t", max_attempts=3, delivery=Delivery.AT_MOST_ONCE).broker_max_attempts == 4
    with pytest.raises(ValueError):
        TaskOptions(name="t", queue="emails.delayed")


def test_notes_and_reply_queues() -> None:
    note = redeliver_note(2, "retry 3 of 4 in 1.0s")
    assert redelivery_allowed(note, 3) and not redelivery_allowed(note, 4) and not redelivery_allowed(None, 2)
    assert public_note(note) == "retry 3 of 4 in 1.0s"
    assert reply_queue_for("billing#invoices", "abc") == "billing#_replies.abc"
    assert reply_queue_for("emails", "abc") == "_replies.abc"

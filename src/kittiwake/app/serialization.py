"""Task arguments and results as bytes: msgpack by default, pickle when the app opts in.

Every payload starts with one tag byte naming its format, so a worker can
read what any submitter wrote (a shell command submitted from the CLI, which
always uses msgpack, runs on a worker whose app uses pickle):

* ``m``: msgpack through msgspec. Plain data only — None, bool, int, float,
  str, bytes, lists, tuples (they arrive as lists), dicts, plus what msgspec
  encodes natively (datetime, UUID, Decimal, dataclasses, msgspec Structs;
  they arrive as their plain msgpack form). Fast, safe to decode from anyone.
* ``p``: pickle. Any picklable object, but decoding it runs code chosen by
  whoever wrote the payload, so an app decodes pickle only when it was
  created with ``App(serializer="pickle")``; otherwise a pickled payload is
  refused with `PayloadError`.

A call is ``[task name, args, kwargs]``; a result is ``[True, value]`` or
``[False, error]`` where error is a map with ``type``, ``message``,
``traceback`` and ``reason`` (why the task failed: ``ERROR`` for an exception
in the task, ``TIMEOUT``, ``WORKER_LOST``, ``RESULT_UNSERIALISABLE``,
``RESULT_TOO_LARGE``, ``UNKNOWN_TASK``, ``BAD_PAYLOAD``; ``REPLY_TO_REFUSED``
never travels as a result: such a task has nowhere to post one). A result is always
small enough to travel: one that cannot be encoded, or whose encoding is over
`MAX_RESULT_BYTES`, is replaced by an error result saying so.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass
from typing import Any

import msgspec

MSGPACK_TAG = b"m"
PICKLE_TAG = b"p"
SERIALIZERS = ("msgpack", "pickle")
# under the broker's 1 MiB task data limit, with room for the error that replaces it
MAX_RESULT_BYTES = (1 << 20) - 4096
MAX_TRACEBACK_CHARS = 8000

_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder()


class PayloadError(ValueError):
    """A payload that cannot be encoded or decoded with the app's serializer."""


@dataclass(frozen=True, slots=True)
class RemoteError:
    """An error as it travels in a result: what was raised and why the task failed."""

    type: str
    message: str
    traceback: str = ""
    reason: str = "ERROR"

    def to_wire(self) -> dict[str, str]:
        return {"type": self.type, "message": self.message, "traceback": self.traceback, "reason": self.reason}

    @classmethod
    def from_wire(cls, value: Any) -> RemoteError:
        if not isinstance(value, dict):
            return cls("RemoteError", repr(value))
        return cls(
            str(value.get("type", "RemoteError")),
            str(value.get("message", "")),
            str(value.get("traceback", "")),
            str(value.get("reason", "ERROR")),
        )


class Serializer:
    """Encodes calls and results in the app's format and decodes what it may trust."""

    def __init__(self, name: str = "msgpack") -> None:
        if name not in SERIALIZERS:
            raise ValueError(f"serializer must be one of {', '.join(SERIALIZERS)}, not {name!r}")
        self.name = name
        self.allow_pickle = name == "pickle"

    def dumps(self, value: Any) -> bytes:
        try:
            if self.name == "pickle":
                return PICKLE_TAG + pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
            return MSGPACK_TAG + _encoder.encode(value)
        except (TypeError, ValueError, OverflowError, pickle.PicklingError, AttributeError) as error:
            raise PayloadError(f"cannot encode {type(value).__name__} with {self.name}: {error}") from error

    def loads(self, payload: bytes) -> Any:
        tag, body = payload[:1], payload[1:]
        try:
            if tag == MSGPACK_TAG:
                return _decoder.decode(body)
            if tag == PICKLE_TAG:
                if not self.allow_pickle:
                    raise PayloadError("a pickled payload, and this app does not use serializer='pickle'")
                return pickle.loads(body)
        except PayloadError:
            raise
        except Exception as error:  # a corrupt payload of any kind
            raise PayloadError(f"cannot decode the payload: {error}") from error
        raise PayloadError(f"unknown payload format {tag!r}")

    # ------------------------------------------------------------- calls

    def dump_call(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bytes:
        return self.dumps([name, list(args), kwargs])

    def load_call(self, payload: bytes) -> tuple[str, list[Any], dict[str, Any]]:
        value = self.loads(payload)
        if not (isinstance(value, (list, tuple)) and len(value) == 3 and isinstance(value[0], str)):
            raise PayloadError("a task call is [name, args, kwargs]")
        name, args, kwargs = value
        if not isinstance(args, (list, tuple)) or not isinstance(kwargs, dict):
            raise PayloadError("a task call is [name, args, kwargs]")
        return name, list(args), kwargs

    # ----------------------------------------------------------- results

    def dump_result(self, value: Any) -> bytes:
        """A success result; an unencodable or oversize value becomes an error result."""
        try:
            payload = self.dumps([True, value])
        except PayloadError as error:
            return self.dump_error(RemoteError("UnserialisableResult", str(error), reason="RESULT_UNSERIALISABLE"))
        if len(payload) > MAX_RESULT_BYTES:
            message = f"the result is {len(payload)} bytes encoded, over the limit of {MAX_RESULT_BYTES}"
            return self.dump_error(RemoteError("ResultTooLarge", message, reason="RESULT_TOO_LARGE"))
        return payload

    def dump_error(self, error: RemoteError) -> bytes:
        # errors always travel as msgpack: they are plain strings, readable by any submitter
        wire = error.to_wire()
        wire["traceback"] = wire["traceback"][-MAX_TRACEBACK_CHARS:]
        wire["message"] = wire["message"][:MAX_TRACEBACK_CHARS]
        return MSGPACK_TAG + _encoder.encode([False, wire])

    def load_result(self, payload: bytes) -> tuple[bool, Any]:
        """(True, value) or (False, RemoteError)."""
        try:
            value = self.loads(payload)
        except PayloadError as error:
            return False, RemoteError("PayloadError", str(error), reason="BAD_PAYLOAD")
        if not (isinstance(value, (list, tuple)) and len(value) == 2 and isinstance(value[0], bool)):
            return False, RemoteError("PayloadError", "a result is [ok, value]", reason="BAD_PAYLOAD")
        ok, body = value
        return (True, body) if ok else (False, RemoteError.from_wire(body))

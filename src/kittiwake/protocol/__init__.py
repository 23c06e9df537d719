"""The binary wire protocol: framing (`frames`) and messages (`messages`), both sans-IO."""

from kittiwake.protocol.frames import DEFAULT_MAX_FRAME, FrameReader, encode_frame
from kittiwake.protocol.messages import (
    REQUEST_TYPES,
    Reply,
    Request,
    RequestError,
    decode_reply,
    decode_request,
    encode_error,
    encode_ok,
    encode_request,
)

__all__ = [
    "DEFAULT_MAX_FRAME",
    "FrameReader",
    "encode_frame",
    "REQUEST_TYPES",
    "Reply",
    "Request",
    "RequestError",
    "decode_reply",
    "decode_request",
    "encode_error",
    "encode_ok",
    "encode_request",
]

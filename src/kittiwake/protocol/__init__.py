"""The binary wire protocol, sans-IO: framing (`frames`), requests (`messages`) and replies (`replies`)."""

from kittiwake.protocol.frames import DEFAULT_MAX_FRAME, FrameReader, encode_frame
from kittiwake.protocol.messages import REQUEST_TYPES, Request, RequestError, decode_request, encode_request
from kittiwake.protocol.replies import REPLY_TYPES, Reply, decode_reply, encode_error, encode_ok

__all__ = [
    "DEFAULT_MAX_FRAME",
    "FrameReader",
    "encode_frame",
    "REPLY_TYPES",
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

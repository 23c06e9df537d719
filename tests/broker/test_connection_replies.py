"""A connection's framing and closing, on the broker's request path without sockets.

`SocketlessBroker` feeds a real `Connection` over a real group commit and engine; it decides
where the reads split the stream, which a broker over TCP cannot be made to do on purpose.
"""

from __future__ import annotations

import struct

from kittiwake import errors
from kittiwake.broker.config import MIN_FRAME_BYTES
from kittiwake.protocol import encode_frame, encode_request
from support.socketless_broker import SocketlessBroker


def enqueue_frame(request_id: int, queue: str) -> bytes:
    return encode_frame(encode_request("enqueue", request_id, {"tasks": [{"queue": queue, "data": b"x"}]}))


def test_a_bad_length_in_a_later_read_still_answers_the_requests_read_before_it() -> None:
    """The enqueue is applied whatever the split, so its reply must not depend on it."""
    with SocketlessBroker(max_frame=MIN_FRAME_BYTES) as broker:
        broker.send(enqueue_frame(1, "q"))  # read, not yet answered
        broker.send(struct.pack(">I", MIN_FRAME_BYTES + 1))  # the next read starts with a bad length
        broker.end()
        replies = broker.replies()
        assert broker.closed
    assert [(reply.id, reply.ok) for reply in replies] == [(1, True), (0, False)]
    assert replies[1].error is not None and replies[1].error["code"] == errors.FrameTooLarge.code


def test_a_bad_length_answers_a_parked_long_poll_with_nothing_and_closes() -> None:
    with SocketlessBroker(max_frame=MIN_FRAME_BYTES) as broker:
        broker.send(encode_frame(encode_request("lease", 1, {"queues": ["q"], "wait_secs": 60.0})))
        broker.settle()  # parked: nothing to lease
        broker.send(struct.pack(">I", MIN_FRAME_BYTES + 1))
        broker.settle()
        replies = broker.replies()
        assert broker.closed
    assert [(reply.id, reply.ok, reply.result) for reply in replies[:1]] == [(1, True, [])]
    assert [(reply.id, reply.error and reply.error["code"]) for reply in replies[1:]] == [(0, errors.FrameTooLarge.code)]


def test_frames_split_anywhere_are_served_alike() -> None:
    stream = enqueue_frame(1, "a") + enqueue_frame(2, "b") + enqueue_frame(3, "c")
    for at in range(len(stream) + 1):
        with SocketlessBroker(max_frame=MIN_FRAME_BYTES) as broker:
            broker.send(stream[:at])
            broker.settle()
            broker.send(stream[at:])
            broker.end()
            assert [(reply.id, reply.ok) for reply in broker.replies()] == [(1, True), (2, True), (3, True)]

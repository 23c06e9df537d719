"""Fuzz target `request-path`: a client session against the broker's request path, without sockets.

The input is a broker max frame, then a session of actions against a
`SocketlessBroker` (real connection, group commit, engine and memory store):
well-typed requests from `request_bodies` (which learn the leases granted, so
dequeues, renewals, releases and updates can hit them), frames with any body,
raw bytes that need not frame at all, frames split across reads, waits for
the replies, clock steps (leases expire, long-polls time out) and the
server's sweep and maintenance ticks. At the end the client half-closes and
the broker must answer everything. Properties:

* nothing escapes the broker, and it logs no ERROR: no bug caught in a pass
  (`GroupCommit.bugs`), no decoder failure, no pass that failed to commit;
* every reply decodes, and every error carries a known code other than
  `INTERNAL`;
* every frame the broker read is answered exactly once (as many replies as
  `reference_frames` finds frames in what was sent), plus one
  `FRAME_TOO_LARGE` with id 0 when the stream held a length over the max
  frame, after which the connection is closed;
* the broker settles: a bounded number of passes serves what was sent.
"""

from __future__ import annotations

import msgspec

from kittiwake import errors
from kittiwake.broker.config import MIN_FRAME_BYTES
from kittiwake.protocol import DEFAULT_MAX_FRAME, Reply, encode_frame

from .frame_decoder import reference_frames
from .fuzz_input import FuzzInput
from .request_bodies import Vocabulary, request_body
from support.socketless_broker import SocketlessBroker
from .wire_values import any_value

MAX_FRAMES = (MIN_FRAME_BYTES, DEFAULT_MAX_FRAME)
CLOCK_STEPS_SECS = (0.5, 5.0, 31.0, 400.0, 50_000.0)
MAX_ACTIONS = 200


class Session:
    """One client's side: what it sent, what it was told, what it learnt."""

    def __init__(self, broker: SocketlessBroker) -> None:
        self.broker = broker
        self.vocabulary = Vocabulary()
        self.sent = bytearray()
        self.replies: list[Reply] = []
        self.ops: dict[int, str] = {}  # request id -> op, for the requests this session made
        self.next_id = 1

    def send(self, data: bytes) -> None:
        self.sent += data
        self.broker.send(data)

    def read(self) -> None:
        self.broker.settle()
        for reply in self.broker.replies():
            self.replies.append(reply)
            if reply.ok and self.ops.get(reply.id) == "lease":
                self.vocabulary.learn_leases(reply.result)

    def act(self, source: FuzzInput) -> None:
        action = source.integer(0, 15)
        if action <= 8:
            request_id = self.next_id
            self.next_id += 1
            body = request_body(source, self.vocabulary, request_id)
            try:
                self.ops[request_id] = msgspec.msgpack.decode(body)["op"]
            except Exception:  # a body made to be unreadable
                pass
            self.vocabulary.request_ids.append(request_id)
            frame = encode_frame(body)
            if source.integer(0, 3) == 0:  # split across two reads
                at = source.integer(0, len(frame))
                self.send(frame[:at])
                self.read()
                self.send(frame[at:])
            else:
                self.send(frame)
        elif action == 9:
            body = any_value(source) if source.boolean() else source.take(source.integer(0, 32))
            self.send(encode_frame(body))
        elif action == 10:
            self.send(source.take(source.integer(1, 16)))
        elif action in (11, 12):
            self.read()
        elif action == 13:
            self.broker.clock.now += source.choice(CLOCK_STEPS_SECS)
        else:
            self.broker.tick(maintenance=action == 15)


def check(data: bytes) -> None:
    source = FuzzInput(data)
    with SocketlessBroker(max_frame=source.choice(MAX_FRAMES)) as broker:
        session = Session(broker)
        for _ in range(MAX_ACTIONS):
            if source.exhausted or broker.closed:
                break
            session.act(source)
        broker.end()
        session.read()
        assert not broker.errors_logged, "the broker logged errors:\n" + "\n".join(broker.errors_logged)
        assert broker.group.passes.bugs == 0 and broker.group.passes.failed_passes == 0
        frames, refused = reference_frames(bytes(session.sent), broker.max_frame)
        for reply in session.replies:
            if not reply.ok:
                assert reply.error is not None and reply.error["code"] in errors.ALL_CODES, reply
                assert reply.error["code"] != errors.InternalError.code, reply
        assert len(session.replies) == len(frames) + refused, (len(session.replies), len(frames), refused)
        if refused:
            last = session.replies[-1]
            assert (last.id, last.error and last.error["code"]) == (0, errors.FrameTooLarge.code), last
            assert broker.closed
        assert broker.connection.unanswered == 0

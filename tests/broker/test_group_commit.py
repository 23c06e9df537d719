"""The group-commit shell driven by hand: connections that only record, a loop that runs nothing by
itself, a store that fails on demand; no sockets. Each test pins one behaviour of passes in order."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from kittiwake.broker import access
from kittiwake.broker.access import Grant, Permission, Principal
from kittiwake.broker.group_commit import GroupCommit
from kittiwake.engine import Engine
from kittiwake.protocol import DEFAULT_MAX_FRAME, FrameReader, Reply, decode_reply, decode_request, encode_request
from kittiwake.queue_globs import QueuePattern
from kittiwake.store.memory import MemoryStore
from support.faulty_store import Failure, FaultyStore, Stage

NOW = 1_700_000_000.0
REQUESTS_PER_PASS = 20_000  # a pass's bound on requests (`passes.MAX_PASS_REQUESTS`)


class Handle:
    def cancel(self) -> None:
        pass


class ManualLoop:
    """Records that a pass was asked for; the test runs it."""

    def call_soon(self, callback: Any) -> Handle:
        return Handle()


class RecordingConnection:
    """What the group commit reads and calls of a connection, recording the replies it is sent."""

    def __init__(self, group: GroupCommit, name: str) -> None:
        self.group = group
        self.peer = f"{name}:4000"
        self.closed = False
        self.ended = False
        self.write_paused = False
        self.deferred: list[Any] = []
        self.replies: list[Reply] = []
        self.reader = FrameReader(DEFAULT_MAX_FRAME)

    def defer(self, item: Any) -> None:
        self.deferred.append(item)

    def deliver(self, frames: list[bytes]) -> None:
        self.replies.extend(decode_reply(body) for body in self.reader.feed(b"".join(frames)))
        if not self.write_paused:
            self.resume_writing()

    def resume_writing(self) -> None:
        self.write_paused = False
        if self.deferred:
            items, self.deferred = self.deferred, []
            self.group.resubmit(self, items)  # type: ignore[arg-type]


def request(op: str, request_id: int, **fields: Any) -> Any:
    return decode_request(encode_request(op, request_id, fields))


@pytest.fixture
def store() -> FaultyStore:
    return FaultyStore(MemoryStore())


@pytest.fixture
def group(store: FaultyStore) -> GroupCommit:
    group = GroupCommit(ManualLoop(), store, lambda: Engine(store), DEFAULT_MAX_FRAME)  # type: ignore[arg-type]
    group.start(NOW)
    return group


def test_a_failed_pass_does_not_answer_a_request_ahead_of_one_deferred_before_it(
    group: GroupCommit, store: FaultyStore, caplog: pytest.LogCaptureFixture
) -> None:
    """A connection whose output is full has its requests deferred; when a pass fails before its
    engine work is done, its later requests must wait behind them, not be answered first."""
    caplog.set_level(logging.CRITICAL, logger="kittiwake.broker")
    busy = RecordingConnection(group, "busy")
    full = RecordingConnection(group, "full")
    group.submit(busy, request("enqueue", 1, tasks=[{"queue": "q", "data": b"x", "pid": "1"}]))  # type: ignore[arg-type]
    group.run_pass()
    full.write_paused = True
    group.submit(full, request("ping", 10))  # type: ignore[arg-type]
    for number in range(REQUESTS_PER_PASS - 1):
        group.submit(busy, request("ping", 100 + number))  # type: ignore[arg-type]
    group.submit(busy, request("peek", 2, queue="q"))  # type: ignore[arg-type]  # the next pass reads the store
    group.submit(full, request("ping", 11))  # type: ignore[arg-type]
    group.run_pass()
    assert full.replies == [] and len(full.deferred) == 1  # its output is full: the ping waits
    store.arm(Stage.READ, Failure.IO_ERROR)
    group.run_pass()  # the peek's read fails: the whole pass is answered UNAVAILABLE
    assert busy.replies[-1].id == 2 and busy.replies[-1].error["code"] == "UNAVAILABLE"
    full.resume_writing()
    group.run_pass()
    assert [reply.id for reply in full.replies] == [10, 11]
    assert all(reply.ok for reply in full.replies)


def test_a_read_scoped_to_a_users_queues_is_served_while_writes_pause(
    group: GroupCommit, store: FaultyStore, caplog: pytest.LogCaptureFixture
) -> None:
    """A user with rights on some queues only lists queues through a scoped twin of list_queues;
    it reads no more than list_queues does, so an outage's pause of writes must not refuse it."""
    caplog.set_level(logging.CRITICAL, logger="kittiwake.broker")
    client = RecordingConnection(group, "alice")
    group.submit(client, request("enqueue", 1, tasks=[{"queue": "alice.q", "data": b"x", "pid": "1"}]))  # type: ignore[arg-type]
    group.run_pass()
    store.arm(Stage.COMMIT, Failure.DISK_FULL, times=None)
    for request_id in (2, 3):  # the second failure of an outage pauses writes for a second
        group.submit(client, request("enqueue", request_id, tasks=[{"queue": "alice.q", "data": b"x"}]))  # type: ignore[arg-type]
        group.run_pass()
    alice = Principal("alice", (Grant(QueuePattern("alice.*"), frozenset({Permission.ADMIN})),))
    group.submit(client, access.scoped(alice, request("list_queues", 4)))  # type: ignore[arg-type]
    group.submit(client, request("enqueue", 5, tasks=[{"queue": "alice.q", "data": b"x"}]))  # type: ignore[arg-type]
    group.run_pass()
    replies = {reply.id: reply for reply in client.replies}
    assert "not writing for a moment" in replies[5].error["message"]  # writes were paused
    assert replies[4].ok, replies[4].error
    assert replies[4].result == [{"queue": "alice.q", "size": 1, "leased": 0}]

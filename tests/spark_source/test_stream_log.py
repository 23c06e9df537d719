"""A stream's batch log in the broker (`kittiwake.spark.stream_log`): a batch larger than a task is
written in pieces in one request and read back whole; a commit dequeues the batch and drops the
log's older entries in one update; a record missing a piece is refused, not half read."""

from __future__ import annotations

import pytest

from kittiwake import Client
from kittiwake.errors import InternalError
from kittiwake.spark import stream_log
from kittiwake.spark.rows import LoggedTask, logged
from kittiwake.spark.stream_log import LoggedBatch
from support.broker_process import BrokerProcess

QUEUE, LOG = "g#q", "g#q.stream.t"


def test_a_batch_larger_than_a_task_is_written_in_pieces_and_read_back_whole(broker: BrokerProcess) -> None:
    with Client(broker.url) as client:
        client.enqueue_many(
            [{"queue": QUEUE, "pid": f"p{index}", "data": bytes([index]) * 600_000, "headers": {"i": str(index)}}
             for index in range(4)]
        )
        batch = LoggedBatch(1, [logged(task) for task in client.lease(QUEUE, max_tasks=4, lease_secs=60)])
        stream_log.append(client, LOG, batch)
        stream_log.append(client, LOG, batch)  # repeated after an unknown outcome: it collapses
        assert len(client.peek(LOG, 100)) == len(stream_log.pieces_of(batch.tasks)) >= 3
        state = stream_log.load(client, LOG)
        assert (state.committed, state.kept, list(state.pending)) == (0, None, [1])
        assert state.pending[1].tasks == batch.tasks

        report = stream_log.commit(client, LOG, batch)
        assert report == stream_log.CommitReport(dequeued=4)
        assert client.stats([QUEUE])[0].size == 0
        assert stream_log.commit(client, LOG, batch) == stream_log.CommitReport(dequeued=0, gone=4)  # repeated
        state = stream_log.load(client, LOG)
        assert (state.committed, state.pending, state.kept.tasks) == (1, {}, batch.tasks)


def test_a_commit_drops_the_entries_of_earlier_batches(broker: BrokerProcess) -> None:
    with Client(broker.url) as client:
        client.enqueue_many([{"queue": QUEUE, "pid": f"p{index}", "data": b"x"} for index in range(3)])
        for number in (1, 2, 3):
            batch = LoggedBatch(number, [logged(task) for task in client.lease(QUEUE, lease_secs=60)])
            stream_log.append(client, LOG, batch)
            stream_log.commit(client, LOG, batch)
        assert [view.pid for view in client.peek(LOG, 100)] == [
            stream_log.record_pid(3, 0, 1), stream_log.marker_pid(3)
        ]


def test_a_record_missing_a_piece_is_refused(broker: BrokerProcess) -> None:
    with Client(broker.url) as client:
        task = LoggedTask(QUEUE, "p", b"x", None, None, None, 1.0, 1)
        client.enqueue(LOG, stream_log.pieces_of([task])[0], pid=stream_log.record_pid(1, 0, 2))
        with pytest.raises(InternalError, match="incomplete"):
            stream_log.load(client, LOG)


def test_entries_the_log_never_writes_are_ignored(broker: BrokerProcess) -> None:
    with Client(broker.url) as client:
        client.enqueue(LOG, b"?", pid="not-a-log-pid")
        assert stream_log.load(client, LOG).pending == {}

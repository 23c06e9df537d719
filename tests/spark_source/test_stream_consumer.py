"""The stream's consumer on the Spark driver (`kittiwake.spark.stream_consumer`), driven with the
calls Spark makes — including the ones of a restart — against a real broker, without Spark:
batches are leased, logged and dequeued only once Spark asks for the next one; a restarted driver
replays a batch with the same rows, offers a batch it logged but Spark never saw, and finishes a
batch Spark had written without emitting it again, even after its leases ran out."""

from __future__ import annotations

import logging
import time

import pytest

from kittiwake import Client
from kittiwake.errors import BadRequest
from kittiwake.spark import stream_log
from kittiwake.spark.options import StreamOptions, stream_options
from kittiwake.spark.stream_consumer import StreamConsumer
from kittiwake.spark.stream_reader import RowsPartition, StreamReader
from support.broker_process import BrokerProcess

QUEUE = "grp#jobs"
LOG = "grp#jobs.stream.s"


def options(broker: BrokerProcess, **extra: str) -> StreamOptions:
    return stream_options({"url": broker.url, "queue": QUEUE, "name": "s", "max_tasks_per_batch": "10", **extra})


def fill(client: Client, count: int) -> list[str]:
    pids = [f"v{index:03d}" for index in range(count)]
    client.enqueue_many([{"queue": QUEUE, "pid": pid, "data": pid.encode()} for pid in pids])
    return pids


def pids_of(tasks: list) -> list[str]:
    return [task.pid for task in tasks]


def size(client: Client, queue: str = QUEUE) -> tuple[int, int]:
    [stats] = client.stats([queue])
    return stats.size, stats.leased


def test_a_batch_is_dequeued_when_spark_asks_for_the_next_one(broker: BrokerProcess) -> None:
    with Client(broker.url) as client:
        pids = fill(client, 25)
        consumer = StreamConsumer(options(broker))
        try:
            assert consumer.initial() == 0
            assert consumer.latest() == 1
            assert size(client) == (25, 10)
            assert pids_of(consumer.plan(0, 1)) == pids[:10]
            assert consumer.latest() == 2  # batch 1 is done: dequeued before batch 2 is leased
            assert size(client) == (15, 10)
            assert pids_of(consumer.plan(1, 2)) == pids[10:20]
            assert consumer.latest() == 3
            assert pids_of(consumer.plan(2, 3)) == pids[20:]
            assert consumer.latest() == 3  # nothing new: the same answer, and batch 3 is dequeued
            assert size(client) == (0, 0)
            assert consumer.latest() == 3
        finally:
            consumer.close()
        # the log keeps the last batch's record and its marker; earlier batches were dropped
        assert [task.pid for task in client.peek(LOG, 100)] == [
            stream_log.record_pid(3, 0, 1), stream_log.marker_pid(3)
        ]


def test_spark_commit_finishes_batches_too(broker: BrokerProcess) -> None:
    with Client(broker.url) as client:
        fill(client, 5)
        consumer = StreamConsumer(options(broker))
        try:
            consumer.latest()
            consumer.plan(0, 1)
            consumer.commit(1)
            assert size(client) == (0, 0)
            consumer.commit(1)  # again: nothing left to do
        finally:
            consumer.close()


def test_a_restarted_driver_replays_an_unfinished_batch_with_the_same_rows(broker: BrokerProcess) -> None:
    with Client(broker.url) as client:
        pids = fill(client, 15)
        first = StreamConsumer(options(broker))
        batch = first.plan(0, first.latest())
        first.close()  # the driver dies while Spark writes batch 1

        again = StreamConsumer(options(broker))
        try:
            assert again.plan(1, 1) == []  # Spark: "my checkpoint's last batch is 1"
            assert again.plan(0, 1) == batch  # the replay: the same tasks, leases and all
            assert again.latest() == 2  # batch 1 written at last: dequeued, then the next leased
            assert pids_of(again.plan(1, 2)) == pids[10:]
            assert again.latest() == 2
            assert size(client) == (0, 0)
        finally:
            again.close()


def test_a_batch_logged_but_never_offered_is_offered_after_a_restart(broker: BrokerProcess) -> None:
    with Client(broker.url) as client:
        fill(client, 12)
        first = StreamConsumer(options(broker))
        assert first.latest() == 1
        logged = first.pending[1].tasks
        first.close()  # the driver dies before Spark writes the offset to its checkpoint

        again = StreamConsumer(options(broker))
        try:
            assert again.initial() == 0
            assert again.latest() == 1  # the logged batch, not a new lease
            assert again.plan(0, 1) == logged
            assert again.latest() == 2
            assert again.latest() == 2  # Spark has not planned batch 2: nothing more is leased
            assert size(client) == (2, 2)
        finally:
            again.close()


def test_a_batch_spark_wrote_before_a_restart_is_finished_without_being_emitted_again(
    broker: BrokerProcess,
) -> None:
    with Client(broker.url) as client:
        pids = fill(client, 20)
        first = StreamConsumer(options(broker))
        first.plan(0, first.latest())
        first.close()  # Spark wrote batch 1 and its commit, then the driver died

        again = StreamConsumer(options(broker))
        try:
            again.plan(1, 1)
            assert again.latest() == 2
            assert pids_of(again.plan(1, 2)) == pids[10:]
            assert size(client) == (10, 10)
        finally:
            again.close()


def test_leases_that_ran_out_while_the_driver_was_away_still_finish_the_batch(broker: BrokerProcess) -> None:
    with Client(broker.url) as client:
        pids = fill(client, 20)
        first = StreamConsumer(options(broker, lease_secs="1"))
        first.plan(0, first.latest())
        first.close()
        time.sleep(1.3)
        assert {task.state for task in client.peek(QUEUE, 10)} == {"available"}

        again = StreamConsumer(options(broker, lease_secs="1"))
        try:
            again.plan(1, 1)
            assert again.latest() == 2  # batch 1 dequeued with its old leases: nobody leased it since
            assert pids_of(again.plan(1, 2)) == pids[10:]  # none of batch 1 again
            assert size(client) == (10, 10)
        finally:
            again.close()


def test_tasks_another_consumer_took_after_the_leases_ran_out_are_reported(
    broker: BrokerProcess, caplog: pytest.LogCaptureFixture
) -> None:
    with Client(broker.url) as client:
        fill(client, 10)
        first = StreamConsumer(options(broker, lease_secs="1"))
        first.plan(0, first.latest())
        first.close()
        time.sleep(1.3)
        taken = client.lease(QUEUE, max_tasks=3, lease_secs=60)  # at-least-once: they are in batch 1 too

        again = StreamConsumer(options(broker, lease_secs="1"))
        try:
            with caplog.at_level(logging.WARNING, logger="kittiwake.spark"):
                again.plan(1, 1)
                assert again.latest() == 1
            assert "3 tasks were taken by another consumer" in caplog.text
            assert size(client) == (3, 3)
            assert all(outcome.ok for outcome in client.dequeue(taken))  # the other consumer finishes them
            assert size(client) == (0, 0)
        finally:
            again.close()


def test_the_renewer_keeps_the_leases_of_a_long_batch(broker: BrokerProcess) -> None:
    with Client(broker.url) as client:
        fill(client, 5)
        consumer = StreamConsumer(options(broker, lease_secs="2"))  # renewed every 2/3 s
        try:
            consumer.plan(0, consumer.latest())
            time.sleep(3.0)  # a batch taking longer than its lease
            views = client.peek(QUEUE, 10)
            assert {view.state for view in views} == {"leased"}
            assert {view.deliveries for view in views} == {1}
            assert consumer.latest() == 1
            assert size(client) == (0, 0)
        finally:
            consumer.close()


def test_a_checkpoint_older_than_the_log_is_refused(broker: BrokerProcess) -> None:
    with Client(broker.url) as client:
        fill(client, 30)
        consumer = StreamConsumer(options(broker))
        try:
            for number in range(1, 4):
                assert consumer.latest() == number
                consumer.plan(number - 1, number)
            consumer.latest()
        finally:
            consumer.close()
        stale = StreamConsumer(options(broker))
        try:
            assert stale.plan(2, 3)  # batch 3 is kept: a checkpoint that lost its last commit replays it
            with pytest.raises(BadRequest, match="batch 1, which was finished and dropped"):
                stale.plan(0, 2)
        finally:
            stale.close()


def test_the_reader_refuses_a_checkpoint_of_another_stream_and_splits_batches(broker: BrokerProcess) -> None:
    with Client(broker.url) as client:
        fill(client, 10)
    reader = StreamReader(options(broker, partitions="3"))
    try:
        with pytest.raises(BadRequest, match="the checkpoint belongs to the stream log 'grp#jobs.stream.other'"):
            reader.number({"log": "grp#jobs.stream.other", "batch": 1})
        end = reader.latestOffset()
        assert end == {"log": LOG, "batch": 1}
        parts = reader.partitions(reader.initialOffset(), end)
        assert [len(part.rows) for part in parts] == [4, 3, 3]
        assert all(isinstance(part, RowsPartition) for part in parts)
        rows = [row for part in parts for row in reader.read(part)]
        assert [row[1] for row in rows] == [f"v{index:03d}" for index in range(10)]
        assert {row[7] for row in rows} == {"leased"}
        assert reader.__getstate__()["_consumer"] is None  # executors get the options, not the connection
    finally:
        reader.stop()

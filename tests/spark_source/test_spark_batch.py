"""The `kittiwake` format in a real Spark session against a real broker: batch reads in several
partitions that lease nothing, writes whose rewrites collapse, and bad options refused with a
message naming them."""

from __future__ import annotations

import time
from typing import Any

import pytest

import kittiwake.spark
from kittiwake import Client
from kittiwake.protocol import DEFAULT_MAX_FRAME
from kittiwake.spark.options import write_options
from kittiwake.spark.writer import WriteReport, Writer, totals
from support.broker_process import BrokerProcess


@pytest.fixture
def spark(spark_session: Any) -> Any:
    kittiwake.spark.register(spark_session)
    return spark_session


def test_a_read_in_several_partitions_returns_every_task_and_leases_nothing(broker: BrokerProcess, spark: Any) -> None:
    with Client(broker.url) as client:
        client.enqueue_many([{"queue": "grp#jobs", "data": f"job {index}".encode()} for index in range(1500)])
        client.enqueue_many(
            [
                {"queue": "grp#jobs", "pid": f"z-{index}", "data": b"\x00\xff", "sender": "s", "receiver": "r",
                 "headers": {"kind": "binary"}}
                for index in range(3)
            ]
        )
        client.enqueue_many([{"queue": "grp#other", "pid": f"o{index}", "data": b"o"} for index in range(7)])
        held = client.lease("grp#jobs", max_tasks=5, lease_secs=300)
        expected = {(view.pid, bytes(view.data)) for view in _all(client, "grp#jobs")}
        before = client.stats(["grp#jobs"])[0]

        frame = (
            spark.read.format("kittiwake").option("url", broker.url).option("queue", "grp#jobs")
            .option("partitions", "4").option("page_size", "100").load()
        )
        planned = frame.rdd  # planned once: its partitions, then its rows
        assert planned.getNumPartitions() > 1
        rows = planned.collect()
        assert sorted((row.pid, bytes(row.data)) for row in rows) == sorted(expected)
        assert len(rows) == len(expected) == 1503
        states = {row.pid: row.state for row in rows}
        assert {states[task.pid] for task in held} == {"leased"}
        assert sum(1 for state in states.values() if state == "available") == 1498
        binary = next(row for row in rows if row.pid == "z-0")
        assert (binary.sender, binary.receiver, binary.headers, binary.queue) == ("s", "r", {"kind": "binary"}, "grp#jobs")
        assert binary.enqueued_at is not None

        after = client.stats(["grp#jobs"])[0]
        assert (after.size, after.available, after.leased) == (before.size, before.available, before.leased)
        assert {view.deliveries for view in _all(client, "grp#jobs") if view.state == "available"} == {0}
        assert all(outcome.ok for outcome in client.dequeue(held))  # the leases were never touched

        # reading by pattern, with queues sharing partitions: test_batch_plan.py, without Spark


def _all(client: Client, queue: str) -> list[Any]:
    views, from_pid = [], None
    while True:
        page = [view for view in client.peek(queue, 1000, from_pid) if view.pid != from_pid]
        if not page:
            return views
        views += page
        from_pid = page[-1].pid


def test_writing_the_same_rows_again_adds_nothing(broker: BrokerProcess, spark: Any) -> None:
    rows = [(f"k{index:03d}", f"payload {index}", "r1" if index % 2 else None, {"n": str(index)}) for index in range(120)]
    frame = spark.createDataFrame(rows, "pid string, data string, receiver string, headers map<string,string>")
    writer = frame.write.format("kittiwake").option("url", broker.url).option("queue", "out").mode("append")
    writer.save()
    writer.save()  # a retried job, or the same save twice: every row collapses
    with Client(broker.url) as client:
        stored = _all(client, "out")
        assert len(stored) == 120
        assert sorted(view.pid for view in stored) == [pid for pid, *_ in rows]
        first = next(view for view in stored if view.pid == "k001")
        assert (bytes(first.data), first.receiver, first.headers) == (b"payload 1", "r1", {"n": "1"})



def test_each_write_task_reports_what_it_added_and_what_collapsed(broker: BrokerProcess) -> None:
    """The writer as each Spark task runs it, without Spark."""
    options = write_options({"url": broker.url, "queue": "out", "batch_size": "2"})
    writer = Writer(options, ("pid", "data"))
    assert writer.write(iter([("a", "1"), ("b", "2"), ("c", "3")])) == WriteReport(enqueued=3, collapsed=0)
    assert writer.write(iter([("a", "1"), ("d", "4")])) == WriteReport(enqueued=1, collapsed=1)
    binary = Writer(write_options({"url": broker.url}), ("queue", "data"))
    assert binary.write(iter([("q2", bytearray(b"\x01\x02"))] * 2)) == WriteReport(enqueued=2, collapsed=0)
    with Client(broker.url) as client:
        views = client.peek("q2", 10)
        assert [bytes(view.data) for view in views] == [b"\x01\x02"] * 2  # no pid: a new FIFO task each time
        assert all(len(view.pid) == 17 for view in views)
    assert totals([WriteReport(3, 0), None, WriteReport(1, 1)]) == WriteReport(enqueued=4, collapsed=1)


def test_bad_options_fail_the_query_with_their_reason(broker: BrokerProcess, spark: Any, tmp_path: Any) -> None:
    with pytest.raises(Exception, match="option 'url' is required"):
        spark.read.format("kittiwake").option("queue", "jobs").load()
    with pytest.raises(Exception, match="'queue' and 'pattern' exclude each other"):
        spark.read.format("kittiwake").option("url", broker.url).option("queue", "a").option("pattern", "b").load().collect()
    with pytest.raises(Exception, match="does not know the column extra"):
        frame = spark.createDataFrame([("q", "d", 1)], "queue string, data string, extra int")
        frame.write.format("kittiwake").option("url", broker.url).mode("append").save()
    with pytest.raises(Exception, match="a stream needs option 'name'"):
        stream = spark.readStream.format("kittiwake").option("url", broker.url).option("queue", "jobs").load()
        query = stream.writeStream.format("parquet").option("path", str(tmp_path / "out")).option(
            "checkpointLocation", str(tmp_path / "checkpoint")
        ).start()
        try:
            query.processAllAvailable()
        finally:
            query.stop()


def test_rows_of_a_mebibyte_go_in_requests_under_the_frame_limit(broker: BrokerProcess, spark: Any) -> None:
    """40 rows of ~1 MB in one Spark task: 1,000 rows a request would be a 40 MB frame, which the
    broker refuses (its frame limit is 16 MiB); the writer cuts requests by bytes too."""
    rows = [(f"big-{index:02d}", bytes([index]) * 1_000_000) for index in range(40)]
    frame = spark.createDataFrame(rows, "pid string, data binary").coalesce(1)
    frame.write.format("kittiwake").option("url", broker.url).option("queue", "big").mode("append").save()
    with Client(broker.url) as client:
        stored = _all(client, "big")
        assert [view.pid for view in stored] == [pid for pid, _ in rows]
        assert all(bytes(view.data) == data for view, (_, data) in zip(stored, rows))
    assert "over the limit" not in broker.log_tail(200)


def test_a_row_over_the_frame_limit_fails_the_write_naming_the_limit(broker: BrokerProcess, spark: Any) -> None:
    frame = spark.createDataFrame([("huge", b"x" * (17 << 20))], "pid string, data binary")
    began = time.monotonic()
    with pytest.raises(Exception, match=rf"over the \d+ bytes .* frame limit of {DEFAULT_MAX_FRAME}"):
        frame.write.format("kittiwake").option("url", broker.url).option("queue", "huge").mode("append").save()
    assert time.monotonic() - began < 20  # refused at once, not retried as a lost connection
    with Client(broker.url) as client:
        assert client.peek("huge", 1) == []

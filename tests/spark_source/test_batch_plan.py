"""Planning and reading a batch read without Spark (`kittiwake.spark.batch_reader`), against a real
broker: partitions of about equal size across and within queues, every task read once by pages,
long pids paged past, and a user without the admin right still served."""

from __future__ import annotations

from pathlib import Path

from kittiwake import Client
from kittiwake.spark.batch_reader import BatchReader, PidRange, plan, read_range
from kittiwake.spark.options import read_options
from support.auth_users import write_auth_file
from support.broker_process import BrokerProcess

READER = ("reader", "reader-token-0123456789abcdef")


def read_all(client: Client, parts: list[list[PidRange]], page_size: int = 7) -> list[str]:
    return [row[1] for part in parts for pid_range in part for row in read_range(client, pid_range, page_size)]


def test_large_queues_are_cut_and_small_ones_share_a_partition(broker: BrokerProcess) -> None:
    with Client(broker.url) as client:
        client.enqueue_many([{"queue": "big", "data": b"b"} for _ in range(400)])
        for name in ("s1", "s2", "s3"):
            client.enqueue_many([{"queue": name, "pid": f"{name}-{index}", "data": b"s"} for index in range(10)])
        parts = plan(client, read_options({"url": broker.url, "pattern": "^(big|s[123])$", "partitions": "5"}))
        big = [part for part in parts if all(pid_range.queue == "big" for pid_range in part)]
        assert len(big) >= 3, parts
        assert any({pid_range.queue for pid_range in part} >= {"s1", "s2"} for part in parts)
        pids = read_all(client, parts)
        assert len(pids) == len(set(pids)) == 430


def test_an_empty_or_missing_queue_plans_nothing(broker: BrokerProcess) -> None:
    with Client(broker.url) as client:
        assert plan(client, read_options({"url": broker.url, "queue": "nothing"})) == []
    assert list(BatchReader(read_options({"url": broker.url, "queue": "nothing"})).read(None)) == []


def test_pages_go_past_pids_of_the_longest_length(broker: BrokerProcess) -> None:
    with Client(broker.url) as client:
        pids = [f"{index:03d}" + "x" * 509 for index in range(20)]  # 512 bytes: no room for a successor
        client.enqueue_many([{"queue": "long", "pid": pid, "data": b"l"} for pid in pids])
        assert read_all(client, [[PidRange("long")]], page_size=3) == pids
        assert read_all(client, [[PidRange("long", pids[5], pids[9])]], page_size=2) == pids[5:9]


def test_a_user_without_admin_reads_a_named_queue_in_ranges(tmp_path: Path) -> None:
    auth = write_auth_file(tmp_path / "users.json", {READER[0]: (READER[1], {"jobs": ["produce", "consume"]})})
    with BrokerProcess(tmp_path / "data", auth_file=auth) as broker:
        url = broker.client_url(*READER)
        with Client(url) as client:
            client.enqueue_many([{"queue": "jobs", "pid": f"p{index:03d}", "data": b"j"} for index in range(90)])
            parts = plan(client, read_options({"url": url, "queue": "jobs", "partitions": "3"}))
            assert len(parts) == 3
            assert read_all(client, parts) == [f"p{index:03d}" for index in range(90)]

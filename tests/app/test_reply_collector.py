"""The reply collector over a real broker: results put straight into a reply queue reach their
slots, in batches, and leave the queue (dequeued from the collector's second thread)."""

from __future__ import annotations

import time

from kittiwake.app.envelope import new_ids
from kittiwake.app.replies import ReplyCollector
from kittiwake.app.serialization import RemoteError, Serializer
from kittiwake.client import Client
from kittiwake.constants import TASK_ID_HEADER
from support.broker_process import BrokerProcess


def _post_results(client: Client, queue: str, submissions: list[str], serializer: Serializer) -> None:
    for start in range(0, len(submissions), 1000):
        client.enqueue_many([
            {"queue": queue, "pid": submission, "data": serializer.dump_result(index),
             "headers": {TASK_ID_HEADER: submission}}
            for index, submission in enumerate(submissions[start : start + 1000], start)
        ])


def _size(client: Client, queue: str) -> int:
    return sum(info.size for info in client.list_queues(pattern=f"^{queue}$"))


def test_results_waiting_in_a_reply_queue_reach_their_slots_and_leave_it(broker: BrokerProcess) -> None:
    serializer = Serializer()
    with Client(broker.url) as client:
        collector = ReplyCollector(lambda: client, serializer, "collector-test")
        submissions = new_ids(2500, time.time())
        slots = collector.slots(submissions)
        assert collector.slots(submissions[:1]) == slots[:1]  # one slot per submission, shared
        _post_results(client, "_replies.collector-test", submissions, serializer)
        collector.watch("_replies.collector-test")
        try:
            for slot in slots:
                assert slot.wait(30)
            assert [(slot.ok, slot.value) for slot in slots] == [(True, index) for index in range(2500)]
            assert collector.received == 2500
            deadline = time.monotonic() + 30
            while _size(client, "_replies.collector-test"):  # the last batch's dequeue may still be on its way
                assert time.monotonic() < deadline, "the results were not dequeued"
                time.sleep(0.05)
        finally:
            collector.close()


def test_collect_once_hands_the_batch_to_the_dequeue_it_is_given(broker: BrokerProcess) -> None:
    serializer = Serializer()
    with Client(broker.url) as client:
        collector = ReplyCollector(lambda: client, serializer, "collect-once")
        submissions = new_ids(3, time.time())
        slots = collector.slots(submissions)
        _post_results(client, "_replies.collect-once", submissions, serializer)
        client.enqueue("_replies.collect-once", serializer.dump_error(RemoteError("E", "m")), pid="nobody-waits")
        handed: list[list[str]] = []
        assert collector.collect_once(["_replies.collect-once"], 0, lambda tasks: handed.append(
            [task.pid for task in tasks])) == 4
        assert sorted(handed[0]) == sorted([*submissions, "nobody-waits"])
        assert all(slot.ok for slot in slots)
        assert _size(client, "_replies.collect-once") == 4  # leased, not dequeued: that was the callable's job
        assert collector.collect_once(["_replies.collect-once"], 0) == 0  # leased already

"""Every argument the engine refuses with BAD_REQUEST, before it changes or writes anything.

docs/testing.md's bad input at the engine's door: empty, long and badly spelled names, NUL and control
characters and invalid UTF-8 (lone surrogates) in pids, oversized data, bad headers, lease times
that are zero, negative, NaN, infinite or too long, and requests with too many items.
"""

from __future__ import annotations

import math

import pytest

from kittiwake import errors
from kittiwake.engine import Engine
from kittiwake.model import DEAD_PID_EXTRA_BYTES, LeaseRef, LeaseRequest, Limits, NewTask
from kittiwake.store.memory import MemoryStore

NOW = 1_000.0
LIMITS = Limits(max_data_bytes=64, max_batch=5)

BAD_QUEUES = [
    pytest.param("", id="empty"),
    pytest.param("q" * 251, id="251-bytes"),
    pytest.param("a b", id="space"),
    pytest.param("crawl#fetch#x", id="two-hashes"),
    pytest.param("#fetch", id="empty-group"),
    pytest.param("crawl#", id="empty-name"),
    pytest.param("caf\u00e9", id="non-ascii"),
    pytest.param("q\x00", id="nul"),
    pytest.param("q\n", id="trailing-newline"),
    pytest.param("q\nx", id="inner-newline"),
    pytest.param("q\udc80", id="lone-surrogate"),
    pytest.param(42, id="not-a-string"),
    pytest.param(None, id="none"),
]

BAD_PIDS = [
    pytest.param("", id="empty"),
    pytest.param("p" * 513, id="513-bytes"),
    pytest.param("\u00e9" * 257, id="514-bytes-in-257-characters"),
    pytest.param("p\x00id", id="nul"),
    pytest.param("p\x07", id="bell"),
    pytest.param("line\nbreak", id="newline"),
    pytest.param("\x1b[31m", id="escape"),
    pytest.param("p\udc80", id="lone-surrogate"),
    pytest.param("\ud800", id="high-surrogate"),
    pytest.param(b"bytes", id="bytes"),
    pytest.param(7, id="int"),
]

BAD_NAMES = [  # sender, receiver, worker
    pytest.param("", id="empty"),
    pytest.param("w" * 256, id="256-bytes"),
    pytest.param("w\x00", id="nul"),
    pytest.param("w\udc80", id="lone-surrogate"),
    pytest.param(3, id="int"),
]

BAD_LEASE_SECS = [
    pytest.param(0, id="zero"),
    pytest.param(0.0, id="zero-float"),
    pytest.param(-1.0, id="negative"),
    pytest.param(math.nan, id="nan"),
    pytest.param(math.inf, id="inf"),
    pytest.param(-math.inf, id="minus-inf"),
    pytest.param(12 * 3600.0 + 1, id="over-max"),
    pytest.param(True, id="bool"),
    pytest.param("30", id="string"),
    pytest.param(None, id="none"),
]

BAD_COUNTS = [
    pytest.param(0, id="zero"),
    pytest.param(-1, id="negative"),
    pytest.param(6, id="over-max-batch"),
    pytest.param(True, id="bool"),
    pytest.param(2.0, id="float"),
]


@pytest.fixture
def store() -> MemoryStore:
    return MemoryStore()


@pytest.fixture
def engine(store) -> Engine:
    engine = Engine(store, limits=LIMITS)
    engine.enqueue([NewTask("q", b"x", pid="p")], NOW)
    [task] = engine.lease(LeaseRequest(["q"], lease_secs=30), NOW)
    engine.lease_id = task.lease_id  # type: ignore[attr-defined]
    store.writes.clear()
    return engine


def refused(call, *args, **kwargs) -> errors.BadRequest:
    with pytest.raises(errors.BadRequest) as caught:
        call(*args, **kwargs)
    assert caught.value.code == "BAD_REQUEST"
    assert caught.value.message
    return caught.value


def good_ref(engine) -> LeaseRef:
    return LeaseRef("q", "p", engine.lease_id)


# ------------------------------------------------------------------ queue names


@pytest.mark.parametrize("queue", BAD_QUEUES)
def test_bad_queue_names_are_refused_everywhere(engine, store, queue):
    refused(engine.enqueue, [NewTask(queue, b"x")], NOW)
    refused(engine.lease, LeaseRequest([queue]), NOW)
    refused(engine.dequeue, [LeaseRef(queue, "p", 1)], NOW)
    refused(engine.renew, [LeaseRef(queue, "p", 1)], 30, NOW)
    refused(engine.release, [LeaseRef(queue, "p", 1)], None, NOW)
    refused(engine.update, enqueue=[NewTask(queue, b"x")], now=NOW)
    refused(engine.peek, queue, 10, None, NOW)
    refused(engine.get, queue, "p", NOW)
    refused(engine.find_by_sender, "svc", queue, 10, NOW)
    refused(engine.delete_queue, queue)
    refused(engine.stats, [queue], None, 0, NOW)
    assert store.writes == []


def test_the_longest_queue_name_is_accepted(engine):
    name = "g" * 100 + "#" + "n" * 149
    assert len(name) == 250
    assert not engine.enqueue([NewTask(name, b"x")], NOW)[0].collapsed


def test_the_dead_letter_queue_of_the_longest_queue_name_can_be_leased(engine):
    name = "n" * 250
    engine.enqueue([NewTask(name, b"x", pid="p", max_attempts=1)], NOW)
    [task] = engine.lease(LeaseRequest([name]), NOW)
    engine.release([LeaseRef(name, "p", task.lease_id)], None, NOW)
    [dead] = engine.lease(LeaseRequest([name + ".dead"]), NOW)
    assert dead.pid.startswith("p~")


def test_a_dead_letter_of_the_longest_pid_can_be_named_by_every_call(engine):
    pid = "p" * Limits().max_pid_bytes
    engine.enqueue([NewTask("q", b"x", pid=pid, max_attempts=1)], NOW)
    [task] = engine.lease(LeaseRequest(["q"]), NOW)
    engine.release([LeaseRef("q", pid, task.lease_id)], None, NOW)
    [dead] = engine.lease(LeaseRequest(["q.dead"]), NOW)
    assert len(dead.pid.encode()) == Limits().max_pid_bytes + DEAD_PID_EXTRA_BYTES
    assert engine.get("q.dead", dead.pid, NOW)["pid"] == dead.pid
    assert engine.peek("q.dead", 1, dead.pid, NOW)[0]["pid"] == dead.pid
    assert [o.ok for o in engine.dequeue([LeaseRef("q.dead", dead.pid, dead.lease_id)], NOW)] == [True]
    refused(engine.enqueue, [NewTask("q", b"x", pid=dead.pid)], NOW)  # only dead letters are that long


# ------------------------------------------------------------------------- pids


@pytest.mark.parametrize("pid", BAD_PIDS)
def test_bad_pids_are_refused_everywhere(engine, store, pid):
    refused(engine.enqueue, [NewTask("q", b"x", pid=pid)], NOW)
    refused(engine.dequeue, [LeaseRef("q", pid, 1)], NOW)
    refused(engine.renew, [LeaseRef("q", pid, 1)], 30, NOW)
    refused(engine.release, [LeaseRef("q", pid, 1)], None, NOW)
    refused(engine.update, enqueue=[NewTask("q", b"x", pid=pid)], now=NOW)
    refused(engine.update, dequeue=[LeaseRef("q", pid, 1)], now=NOW)
    refused(engine.lease, LeaseRequest(["q"], max_pid=pid), NOW)
    refused(engine.peek, "q", 10, pid, NOW)
    refused(engine.get, "q", pid, NOW)
    assert store.writes == []


def test_printable_unicode_pids_of_512_bytes_are_accepted(engine):
    pid = "\u00e9" * 256
    assert len(pid.encode()) == 512
    assert engine.enqueue([NewTask("q", b"x", pid=pid)], NOW)[0].pid == pid
    assert engine.enqueue([NewTask("q", b"x", pid="http://www.google.com/?q=a b")], NOW)[0].pid


def test_one_bad_item_refuses_the_whole_batch(engine, store):
    refused(engine.enqueue, [NewTask("q", b"x", pid="fine"), NewTask("q", b"x", pid="bad\x00")], NOW)
    assert store.writes == []
    assert engine.list_queues(None, 0, 10)[0].size == 1


# ----------------------------------------------------------------- data, fields


def test_data_over_the_limit(engine, store):
    refused(engine.enqueue, [NewTask("q", b"x" * 65)], NOW)
    assert engine.enqueue([NewTask("q", b"x" * 64)], NOW)
    refused(engine.update, enqueue=[NewTask("q", b"x" * 65)], now=NOW)


def test_the_default_data_limit_is_one_mebibyte():
    engine = Engine(MemoryStore())
    refused(engine.enqueue, [NewTask("q", b"\0" * ((1 << 20) + 1))], NOW)
    assert engine.enqueue([NewTask("q", b"\0" * (1 << 20))], NOW)


@pytest.mark.parametrize("data", ["text", None, 42, ["list"]])
def test_data_must_be_bytes(engine, data):
    refused(engine.enqueue, [NewTask("q", data)], NOW)


@pytest.mark.parametrize(
    "headers",
    [
        pytest.param(["not", "a", "map"], id="list"),
        pytest.param({f"h{i}": "v" for i in range(33)}, id="33-headers"),
        pytest.param({"bad key": "v"}, id="space-in-name"),
        pytest.param({"": "v"}, id="empty-name"),
        pytest.param({"k" * 65: "v"}, id="65-byte-name"),
        pytest.param({"k\x00": "v"}, id="nul-in-name"),
        pytest.param({1: "v"}, id="int-name"),
        pytest.param({"k": 1}, id="int-value"),
        pytest.param({"k": b"v"}, id="bytes-value"),
        pytest.param({"k": "v" * 4097}, id="4097-byte-value"),
    ],
)
def test_bad_headers(engine, headers):
    refused(engine.enqueue, [NewTask("q", b"x", headers=headers)], NOW)


def test_a_header_value_that_is_not_utf8(engine):
    refused(engine.enqueue, [NewTask("q", b"x", headers={"k": "\udc80"})], NOW)


@pytest.mark.parametrize("name", BAD_NAMES)
def test_bad_sender_receiver_and_worker_names(engine, name):
    refused(engine.enqueue, [NewTask("q", b"x", sender=name)], NOW)
    refused(engine.enqueue, [NewTask("q", b"x", receiver=name)], NOW)
    refused(engine.lease, LeaseRequest(["q"], receiver=name), NOW)
    refused(engine.lease, LeaseRequest(["q"], worker=name), NOW)
    refused(engine.find_by_sender, name, None, 10, NOW)
    refused(engine.queues_for_receiver, name)


@pytest.mark.parametrize("max_attempts", [0, -1, True, 1.5, 1_000_001])
def test_bad_max_attempts(engine, max_attempts):
    refused(engine.enqueue, [NewTask("q", b"x", max_attempts=max_attempts)], NOW)


# ----------------------------------------------------------------------- leases


@pytest.mark.parametrize("lease_secs", BAD_LEASE_SECS)
def test_bad_lease_times(engine, store, lease_secs):
    refused(engine.lease, LeaseRequest(["q"], lease_secs=lease_secs), NOW)
    refused(engine.renew, [good_ref(engine)], lease_secs, NOW)
    refused(engine.update, renew=[good_ref(engine)], lease_secs=lease_secs, now=NOW)
    assert store.writes == []


def test_the_longest_lease_is_twelve_hours(engine):
    [outcome] = engine.renew([good_ref(engine)], 12 * 3600.0, NOW)
    assert outcome.expires_at == NOW + 12 * 3600.0


@pytest.mark.parametrize("max_tasks", BAD_COUNTS)
def test_bad_max_tasks(engine, max_tasks):
    refused(engine.lease, LeaseRequest(["q"], max_tasks=max_tasks), NOW)


@pytest.mark.parametrize(
    "queues",
    [pytest.param([], id="none"), pytest.param(["q"] * 1001, id="1001-queues"), pytest.param(("q",), id="tuple"),
     pytest.param(None, id="missing")],
)
def test_bad_lease_queue_lists(engine, queues):
    refused(engine.lease, LeaseRequest(queues), NOW)


@pytest.mark.parametrize("lease_id", [0, -5, True, "1", 1.0, None])
def test_bad_lease_ids(engine, lease_id):
    refused(engine.dequeue, [LeaseRef("q", "p", lease_id)], NOW)
    refused(engine.renew, [LeaseRef("q", "p", lease_id)], 30, NOW)
    refused(engine.release, [LeaseRef("q", "p", lease_id)], None, NOW)
    refused(engine.update, dequeue=[LeaseRef("q", "p", lease_id)], now=NOW)


@pytest.mark.parametrize(
    "reason",
    [pytest.param(42, id="int"), pytest.param("r" * 4097, id="4097-bytes"),
     pytest.param("\u00e9" * 2049, id="4098-bytes-in-2049-characters"), pytest.param("r\udc80", id="lone-surrogate")],
)
def test_bad_release_reasons(engine, store, reason):
    refused(engine.release, [good_ref(engine)], reason, NOW)
    refused(engine.update, release=[good_ref(engine)], reason=reason, now=NOW)
    assert store.writes == []
    assert engine.get("q", "p", NOW)["state"] == "leased"


# -------------------------------------------------------------- too many items


def test_too_many_items_in_one_request(engine, store):
    refused(engine.enqueue, [NewTask("q", b"x")] * 6, NOW)
    refused(engine.dequeue, [good_ref(engine)] * 6, NOW)
    refused(engine.renew, [good_ref(engine)] * 6, 30, NOW)
    refused(engine.release, [good_ref(engine)] * 6, None, NOW)
    refused(engine.update, enqueue=[NewTask("q", b"x")] * 3, dequeue=[good_ref(engine)] * 3, now=NOW)
    assert store.writes == []


# ------------------------------------------------------------------ inspection


@pytest.mark.parametrize("count", BAD_COUNTS)
def test_bad_counts_of_inspection_calls(engine, count):
    refused(engine.peek, "q", count, None, NOW)
    refused(engine.find_by_sender, "svc", None, count, NOW)


def test_bad_list_and_stats_arguments(engine):
    refused(engine.list_queues, None, -1, 10)
    refused(engine.list_queues, None, 0, 0)
    refused(engine.list_queues, None, "5", 10)
    refused(engine.stats, None, None, -1, NOW)
    refused(engine.stats, None, None, 1001, NOW)
    refused(engine.stats, "q", None, 0, NOW)
    refused(engine.stats, ["q"] * 10_001, None, 0, NOW)

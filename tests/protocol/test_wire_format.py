"""The bytes on the wire, pinned: field names, their order and their msgpack types.

An old client must keep working against a new broker, and a new client against an old broker.
So the requests a client sends and the replies a broker sends are pinned here byte for byte (as
the msgpack encoding of a literal map, which fixes names, order and types: 60.0 is a float, 60
an int), and the requests older clients sent — which spelled out fields at their default — must
still decode to the very request the client sends now.
"""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from kittiwake import errors
from kittiwake.client import LeaseRef, calls
from kittiwake.client.wire import encode_call
from kittiwake.protocol import decode_request
from kittiwake.protocol.replies import AuthResult, CancelWaitResult, Pong
from support.wire_pair import PEER, START, WirePair

encode = msgspec.msgpack.encode


def body_of(call: calls.Call[Any], request_id: int = 7) -> bytes:
    return encode_call(call, request_id)[4:]


# ----------------------------------------------------------------- requests

SENT = [
    (
        calls.enqueue("jobs", b"hello", pid="a", headers={"k": "v"}, after=[("jobs", "p")]),
        {"id": 7, "op": "enqueue", "tasks": [
            {"queue": "jobs", "data": b"hello", "pid": "a", "headers": {"k": "v"}, "after": [["jobs", "p"]]}]},
    ),
    (
        calls.lease("jobs", max_tasks=10, lease_secs=60, wait_secs=5, worker="w"),
        {"id": 7, "op": "lease", "queues": ["jobs"], "max_tasks": 10, "lease_secs": 60.0, "wait_secs": 5.0,
         "worker": "w"},
    ),
    (
        calls.dequeue(LeaseRef("jobs", "a", 3)),
        {"id": 7, "op": "dequeue", "leases": [{"queue": "jobs", "pid": "a", "lease_id": 3}]},
    ),
    (
        calls.release([LeaseRef("jobs", "a", 3)], "boom", bury=True),
        {"id": 7, "op": "release", "leases": [{"queue": "jobs", "pid": "a", "lease_id": 3}], "reason": "boom",
         "bury": True},
    ),
    (
        calls.update(enqueue=[{"queue": "g#b", "data": b"x"}], dequeue=[LeaseRef("g#a", "p", 4)], lease_secs=10),
        {"id": 7, "op": "update", "enqueue": [{"queue": "g#b", "data": b"x"}],
         "dequeue": [{"queue": "g#a", "pid": "p", "lease_id": 4}], "lease_secs": 10.0},
    ),
    (calls.ping(), {"id": 7, "op": "ping"}),
    (calls.auth("alice", "t0ken"), {"id": 7, "op": "auth", "user": "alice", "token": "t0ken"}),
    (calls.cancel_wait(5), {"id": 7, "op": "cancel_wait", "request_id": 5}),
]


@pytest.mark.parametrize("call, expected", SENT, ids=[call.op for call, _ in SENT])
def test_what_a_client_sends(call: calls.Call[Any], expected: dict[str, Any]) -> None:
    assert body_of(call) == encode(expected)


# What the client sent before requests were built as the protocol's Structs: every field at its
# default that it always named is there. A broker must read each as the request sent today.
OLDER_CLIENTS = [
    (
        {"id": 7, "op": "lease", "queues": ["jobs"], "max_tasks": 1, "lease_secs": 30.0, "wait_secs": 0.0},
        calls.lease("jobs"),
    ),
    (
        {"id": 7, "op": "renew", "leases": [{"queue": "q", "pid": "p", "lease_id": 1}], "lease_secs": 30.0},
        calls.renew(LeaseRef("q", "p", 1)),
    ),
    (
        {"id": 7, "op": "update", "enqueue": [{"queue": "q", "data": b"u", "pid": "u"}], "dequeue": [],
         "renew": [], "release": [], "lease_secs": 10.0},
        calls.update(enqueue=[{"queue": "q", "data": b"u", "pid": "u"}], lease_secs=10),
    ),
    ({"id": 7, "op": "peek", "queue": "q", "n": 10}, calls.peek("q")),
    ({"id": 7, "op": "find_by_sender", "sender": "s", "limit": 100}, calls.find_by_sender("s")),
    ({"id": 7, "op": "list_queues", "min_tasks": 0, "limit": 1000}, calls.list_queues()),
    ({"id": 7, "op": "stats", "sample": 5, "queues": ["q"]}, calls.stats("q", sample=5)),
    ({"id": 7, "op": "requeue_dead", "queue": "q", "limit": 10},
     calls.dead_letters("requeue_dead", "q", None, None, 10)),
]


@pytest.mark.parametrize("older, call", OLDER_CLIENTS, ids=[older["op"] for older, _ in OLDER_CLIENTS])
def test_what_older_clients_send_means_the_same(older: dict[str, Any], call: calls.Call[Any]) -> None:
    assert decode_request(encode(older)) == decode_request(body_of(call))


# ------------------------------------------------------------------ replies


def ok(result: Any, request_id: int) -> bytes:
    return encode({"id": request_id, "ok": True, "result": result})


def test_what_a_broker_replies() -> None:
    pair = WirePair()
    pair.call(calls.ping())
    assert pair.replies[-1] == ok({"now": START}, 1)

    pair.call(calls.enqueue("jobs", b"hello", pid="a", sender="s", headers={"k": "v"}))
    assert pair.replies[-1] == ok([{"queue": "jobs", "pid": "a", "collapsed": False}], 2)

    [task] = pair.call(calls.lease("jobs", lease_secs=60, worker="w"))
    assert pair.replies[-1] == ok([{
        "queue": "jobs", "pid": "a", "data": b"hello", "enqueued_at": START, "sender": "s", "receiver": None,
        "headers": {"k": "v"}, "max_attempts": None, "attempts": 0, "deliveries": 1, "lease_id": task.lease_id,
        "lease_owner": "w", "lease_peer": PEER, "leased_at": START, "lease_expires_at": START + 60,
        "waiting_on": 0, "children": 0, "progress": None, "note": None,
    }], 3)

    pair.call(calls.peek("jobs"))
    assert pair.replies[-1] == ok([{
        "queue": "jobs", "pid": "a", "data": b"hello", "state": "leased", "enqueued_at": START, "sender": "s",
        "receiver": None, "headers": {"k": "v"}, "attempts": 0, "deliveries": 1, "lease_owner": "w",
        "lease_expires_at": START + 60, "waiting_on": 0, "children": 0, "progress": None, "note": None,
    }], 4)

    pair.call(calls.stats("jobs", sample=1))
    assert pair.replies[-1] == ok([{
        "queue": "jobs", "size": 1, "available": 0, "leased": 1, "dead": 0,
        "enqueue_rate_1m": 1 / 60, "enqueue_rate_5m": 1 / 300, "lease_rate_1m": 1 / 60, "lease_rate_5m": 1 / 300,
        "dequeue_rate_1m": 0.0, "dequeue_rate_5m": 0.0, "avg_lease_secs": None, "oldest_task_age_secs": 0.0,
        "leased_sample": [{"queue": "jobs", "pid": "a", "worker": "w", "peer": PEER, "leased_at": START,
                           "expires_at": START + 60}],
        "blocked": 0,
    }], 5)

    pair.call(calls.dequeue([task, LeaseRef("jobs", "zz", 1)]))
    assert pair.replies[-1] == ok([
        {"queue": "jobs", "pid": "a", "ok": True, "code": None, "message": None, "expires_at": None, "dead": False},
        {"queue": "jobs", "pid": "zz", "ok": False, "code": "TASK_NOT_FOUND", "message": "no task 'zz' in 'jobs'",
         "expires_at": None, "dead": False},
    ], 6)

    pair.call(calls.update(enqueue=[{"queue": "jobs", "data": b"", "pid": "u"}]))
    assert pair.replies[-1] == ok({
        "enqueued": [{"queue": "jobs", "pid": "u", "collapsed": False}], "dequeued": [], "renewed": [], "released": [],
    }, 7)

    pair.call(calls.dead_letters("purge_dead", "jobs", ["zz"], None, 10))
    assert pair.replies[-1] == ok({"outcomes": [{
        "queue": "jobs.dead", "pid": "zz", "ok": False, "code": "TASK_NOT_FOUND",
        "message": "no dead letter 'zz' in 'jobs.dead'", "expires_at": None, "dead": False,
    }], "next_pid": None}, 8)

    pair.call(calls.delete_queue("jobs"))
    assert pair.replies[-1] == ok(1, 9)

    with pytest.raises(errors.TaskNotFound):
        pair.call(calls.get("jobs", "a"))
    assert pair.replies[-1] == encode(
        {"id": 10, "ok": False, "error": {"code": "TASK_NOT_FOUND", "message": "no task 'a' in 'jobs'"}}
    )


def test_the_small_records_the_broker_builds() -> None:
    assert encode(Pong(START)) == encode({"now": START})
    assert encode(AuthResult("alice")) == encode({"user": "alice"})
    assert encode(AuthResult(None)) == encode({"user": None})
    assert encode(CancelWaitResult(True)) == encode({"cancelled": True})

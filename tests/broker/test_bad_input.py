"""Bad input to the binary port (docs/testing.md, "Bad input to try"), each a regression test.

Every test ends by checking that a well-behaved client on another connection
is still served: one bad client must never affect the others. The shapes
expected: a frame that cannot be trusted closes the connection after one
`FRAME_TOO_LARGE` error frame with id 0; a request that decodes badly gets an
error reply with its id (0 when even that is unreadable) and the connection
stays open.
"""

from __future__ import annotations

import random
import resource
import socket
import struct
import threading
import time
from typing import Any

import msgspec
import pytest

from kittiwake.protocol import DEFAULT_MAX_FRAME, encode_frame
from support.broker_process import BrokerProcess, RawConnection

_encode = msgspec.msgpack.Encoder().encode


def assert_still_serves(broker: BrokerProcess) -> None:
    """A fresh connection can enqueue, lease and dequeue."""
    assert broker.alive(), broker.log_tail()
    with broker.connect() as conn:
        queue = f"healthy-{time.monotonic_ns()}"
        conn.enqueue(queue, b"still here")
        [task] = conn.lease(queue)
        assert task["data"] == b"still here"
        [outcome] = conn.call("dequeue", leases=[{"queue": queue, "pid": task["pid"], "lease_id": task["lease_id"]}])
        assert outcome["ok"]


def assert_closed_with(conn: RawConnection, code: str) -> None:
    replies = conn.read_until_closed()
    assert [(reply.id, reply.error["code"]) for reply in replies] == [(0, code)]


def raw_body(fields: dict[str, Any], replace: dict[bytes, bytes]) -> bytes:
    """A msgpack request whose strings are patched afterwards: msgpack strs are
    length-prefixed, so a same-length replacement yields bytes no encoder makes."""
    body = _encode(fields)
    for placeholder, raw in replace.items():
        assert len(placeholder) == len(raw) and placeholder in body
        body = body.replace(placeholder, raw)
    return body


# ------------------------------------------------------------ framing


def test_garbage_bytes_close_the_connection(broker: BrokerProcess) -> None:
    garbage = random.Random(20240601).randbytes(4096)
    assert struct.unpack(">I", garbage[:4])[0] > DEFAULT_MAX_FRAME
    with broker.connect() as conn:
        conn.send_raw(garbage)
        assert_closed_with(conn, "FRAME_TOO_LARGE")
    assert_still_serves(broker)


def test_garbage_inside_a_frame_is_a_malformed_request(broker: BrokerProcess) -> None:
    with broker.connect() as conn:
        for body in (b"\xff" * 5, b"\xc1", random.Random(7).randbytes(300), _encode([1, 2, 3]), _encode({"op": "ping"})):
            conn.send_raw(encode_frame(body))
            reply = conn.read_reply()
            assert (reply.id, reply.ok, reply.error["code"]) == (0, False, "MALFORMED_FRAME")
        assert conn.call("ping")
    assert_still_serves(broker)


def test_deep_nesting_and_odd_keys_get_error_replies_not_tracebacks(broker: BrokerProcess) -> None:
    """Found by fuzzing decode_request: 5,000 nested arrays made msgspec raise RecursionError,
    which reached the connection's last-resort handler (a traceback logged per frame); a key
    that is not a string cost the reply its id."""
    ping = b"\x83\xa2id\x07\xa2op\xa4ping"  # a map of 3 entries: "id": 7, "op": "ping", then one more
    with broker.connect() as conn:
        conn.send_raw(encode_frame(ping + b"\xa3foo" + b"\x91" * 5000 + b"\x01"))
        reply = conn.read_reply()
        assert (reply.ok, reply.error["code"]) == (False, "MALFORMED_FRAME"), reply
        assert "nested too deeply" in reply.error["message"]
        conn.send_raw(encode_frame(ping + b"\xcb" + bytes(8) + b"\xc0"))  # the key 0.0
        reply = conn.read_reply()
        assert (reply.id, reply.ok, reply.error["code"]) == (7, False, "MALFORMED_FRAME"), reply
        assert conn.call("ping")
    assert "Traceback" not in broker.log_tail(400), broker.log_tail()
    assert_still_serves(broker)


def test_truncated_frame_then_close(broker: BrokerProcess) -> None:
    with broker.connect() as conn:
        frame = RawConnection.frame("enqueue", 1, tasks=[{"queue": "cut", "data": b"x" * 100}])
        conn.send_raw(frame[: len(frame) // 2])
    assert_still_serves(broker)
    with broker.connect() as conn:
        assert conn.call("list_queues", pattern="^cut$") == []


def test_truncated_frame_then_silence_does_not_hold_up_others(broker: BrokerProcess) -> None:
    with broker.connect() as slow:
        frame = RawConnection.frame("enqueue", 1, tasks=[{"queue": "slow", "data": b"y" * 1000}])
        slow.send_raw(frame[:10])
        for _ in range(3):
            assert_still_serves(broker)
        # the slow client finishes its frame at last and is answered
        slow.send_raw(frame[10:])
        reply = slow.read_reply()
        assert reply.id == 1 and reply.ok


@pytest.mark.parametrize(
    "prefix",
    [
        struct.pack(">I", 2**31),
        struct.pack(">I", 2**32 - 1),
        struct.pack(">I", DEFAULT_MAX_FRAME + 1),
        struct.pack(">Q", 2**63),  # an 8-byte length: its first 4 bytes read as 2^31
    ],
    ids=["2^31", "2^32-1", "max-frame+1", "2^63"],
)
def test_huge_length_prefix_closes_the_connection_before_any_allocation(broker: BrokerProcess, prefix: bytes) -> None:
    rss_before = broker.rss_bytes()
    with broker.connect() as conn:
        conn.send_raw(prefix + b"\x00" * 64)
        assert_closed_with(conn, "FRAME_TOO_LARGE")
    assert broker.rss_bytes() < rss_before + 16 * 1024 * 1024
    assert_still_serves(broker)


def test_zero_length_frames_are_malformed_requests(broker: BrokerProcess) -> None:
    with broker.connect() as conn:
        conn.send_raw(b"\x00\x00\x00\x00" * 3)
        for reply in conn.read_replies(3):
            assert (reply.id, reply.error["code"]) == (0, "MALFORMED_FRAME")
        assert conn.call("ping")
    assert_still_serves(broker)


def test_an_http_request_is_refused(broker: BrokerProcess) -> None:
    with broker.connect() as conn:
        conn.send_raw(b"GET / HTTP/1.1\r\nHost: localhost\r\nUser-Agent: curl/8.0\r\nAccept: */*\r\n\r\n")
        assert_closed_with(conn, "FRAME_TOO_LARGE")
    assert_still_serves(broker)


def test_a_tls_client_hello_is_refused(broker: BrokerProcess) -> None:
    # record header (handshake, TLS 1.0 record version, length) then ClientHello
    hello = bytes.fromhex("16030100c4010000c00303") + random.Random(3).randbytes(32) + b"\x00" * 160
    with broker.connect() as conn:
        conn.send_raw(hello)
        assert_closed_with(conn, "FRAME_TOO_LARGE")
    assert_still_serves(broker)


# ------------------------------------------------------------ requests


@pytest.mark.parametrize(
    ("op", "fields"),
    [
        ("lease", {"queues": "jobs"}),
        ("lease", {"queues": [1, 2]}),
        ("lease", {"queues": ["jobs"], "max_tasks": "ten"}),
        ("lease", {"queues": ["jobs"], "lease_secs": None}),
        ("enqueue", {"tasks": [{"queue": "jobs", "data": 12345}]}),
        ("enqueue", {"tasks": [{"queue": "jobs", "data": "text, not bytes"}]}),
        ("enqueue", {"tasks": {"queue": "jobs", "data": b"x"}}),
        ("enqueue", {"tasks": [{"queue": "jobs", "data": b"x", "headers": {"k": 1}}]}),
        ("enqueue", {}),
        ("dequeue", {"leases": [{"queue": "jobs", "pid": "1", "lease_id": "seven"}]}),
        ("renew", {"leases": [{"queue": "jobs", "pid": "1", "lease_id": 1.5}]}),
        ("release", {"leases": [{"queue": "jobs", "pid": 1, "lease_id": 1}]}),
        ("ping", {"unexpected": True}),
        ("peek", {"queue": ["jobs"]}),
    ],
)
def test_wrong_field_types_are_bad_requests(broker: BrokerProcess, op: str, fields: dict[str, Any]) -> None:
    with broker.connect() as conn:
        reply = conn.request(op, **fields)
        assert not reply.ok and reply.error["code"] == "BAD_REQUEST", reply
        assert conn.call("ping")
    assert_still_serves(broker)


def test_an_unknown_op_is_refused_with_its_id(broker: BrokerProcess) -> None:
    with broker.connect() as conn:
        reply = conn.request("drop_all_tables")
        assert not reply.ok and reply.error["code"] == "UNKNOWN_OP"
        reply = conn.request("x" * 10_000)
        assert not reply.ok and reply.error["code"] == "UNKNOWN_OP"
        assert len(reply.error["message"]) < 200
        assert conn.call("ping")
    assert_still_serves(broker)


LONG = "a" * 10_000
BAD_NAMES = {
    "nul": "jo\x00bs",
    "control": "jo\x1bbs",
    "10kB": LONG,
    "space": "my jobs",
    "two-hashes": "a#b#c",
    "empty": "",
}


@pytest.mark.parametrize("name", list(BAD_NAMES.values()), ids=list(BAD_NAMES))
def test_bad_strings_in_queue_names_and_pids_are_bad_requests(broker: BrokerProcess, name: str) -> None:
    with broker.connect() as conn:
        requests: list[tuple[str, dict[str, Any]]] = [
            ("enqueue", {"tasks": [{"queue": name, "data": b"x"}]}),
            ("lease", {"queues": [name]}),
            ("peek", {"queue": name}),
            ("delete_queue", {"queue": name}),
        ]
        if name != "a#b#c" and name != "my jobs":  # legal pids, illegal queue names
            requests += [
                ("enqueue", {"tasks": [{"queue": "fine", "data": b"x", "pid": name}]}),
                ("get", {"queue": "fine", "pid": name}),
                ("dequeue", {"leases": [{"queue": "fine", "pid": name, "lease_id": 1}]}),
                ("lease", {"queues": ["fine"], "worker": name}),
                ("enqueue", {"tasks": [{"queue": "fine", "data": b"x", "sender": name}]}),
            ]
        for op, fields in requests:
            reply = conn.request(op, **fields)
            assert not reply.ok and reply.error["code"] == "BAD_REQUEST", (op, reply)
            assert len(reply.error["message"]) < 1000
        assert conn.call("list_queues") == []
    assert_still_serves(broker)


@pytest.mark.parametrize(
    "invalid",
    [b"\xff\xfe", b"\xc3\x28", b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80"],
    ids=["ff-fe", "truncated-2-byte", "surrogate", "5-byte"],
)
def test_invalid_utf8_in_names_is_a_bad_request(broker: BrokerProcess, invalid: bytes) -> None:
    placeholder = b"Z" * len(invalid)
    with broker.connect() as conn:
        bodies = [
            raw_body({"id": 1, "op": "enqueue", "tasks": [{"queue": "q" + placeholder.decode(), "data": b"x"}]},
                     {placeholder: invalid}),
            raw_body({"id": 2, "op": "enqueue", "tasks": [{"queue": "q", "pid": placeholder.decode(), "data": b"x"}]},
                     {placeholder: invalid}),
            raw_body({"id": 3, "op": "lease", "queues": ["q"], "worker": placeholder.decode()}, {placeholder: invalid}),
        ]
        conn.send_raw(b"".join(encode_frame(body) for body in bodies))
        replies = conn.read_replies(3)
        assert sorted((reply.id, reply.error["code"]) for reply in replies) == [
            (1, "BAD_REQUEST"), (2, "BAD_REQUEST"), (3, "BAD_REQUEST")
        ]
        # an op name that is not UTF-8 leaves no trustworthy id
        conn.send_raw(encode_frame(raw_body({"id": 4, "op": "pingZZ"}, {b"pingZZ": b"ping\xff\xfe"})))
        reply = conn.read_reply()
        assert (reply.id, reply.error["code"]) == (0, "MALFORMED_FRAME")
        assert conn.call("list_queues") == []
    assert_still_serves(broker)


# ------------------------------------------------------------ volume


def test_a_hundred_thousand_pipelined_pings_in_one_write(broker: BrokerProcess) -> None:
    count = 100_000
    with broker.connect(timeout=60) as conn:
        data = b"".join(RawConnection.frame("ping", request_id) for request_id in range(1, count + 1))
        # send from a thread: the replies must be read while the requests go out
        sender = threading.Thread(target=conn.send_raw, args=(data,))
        started = time.monotonic()
        sender.start()
        replies = conn.read_replies(count)
        sender.join()
        assert [reply.id for reply in replies] == list(range(1, count + 1))
        assert all(reply.ok for reply in replies)
        assert time.monotonic() - started < 30
    assert_still_serves(broker)


def test_pipelining_without_reading_keeps_memory_bounded(broker: BrokerProcess) -> None:
    with broker.connect() as conn:
        # peeks of 20 tasks of 4 KiB: each 40-byte request asks for an 80 KiB reply
        for number in range(20):
            conn.enqueue("big", b"z" * 4096, pid=f"{number:02d}")
    rss_before = broker.rss_bytes()
    hog = RawConnection(broker.host, broker.port, timeout=3.0)
    hog.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    chunk = b"".join(
        RawConnection.frame("peek", request_id, queue="big", n=20) if request_id % 2 else RawConnection.frame("ping", request_id)
        for request_id in range(1, 20_001)
    )
    target = 50 * 1024 * 1024
    sent = 0
    try:
        while sent < target:
            hog.sock.sendall(chunk)
            sent += len(chunk)
    except socket.timeout:
        pass  # the broker stopped reading: the backpressure under test
    try:
        assert sent < target, "the broker kept reading while its replies piled up"
        rss = broker.rss_bytes()
        assert rss < 300 * 1024 * 1024, f"broker RSS is {rss >> 20} MiB"
        # a few write buffers' worth, not a backlog of replies (which is ~200 MiB here)
        assert rss < rss_before + 64 * 1024 * 1024, f"broker RSS grew from {rss_before >> 20} to {rss >> 20} MiB"
        assert_still_serves(broker)
    finally:
        hog.close()
    assert_still_serves(broker)
    assert broker.rss_bytes() < 300 * 1024 * 1024


def test_long_polls_of_a_client_that_never_reads_are_not_retried_into_its_buffer(broker: BrokerProcess) -> None:
    # retries of parked long-polls ignored the output backpressure requests get: with short leases,
    # 8 MiB of tasks leased again and again to 150 waiters of a client reading nothing grew the
    # broker by 1.2 GiB from 13 KB of requests
    hog = RawConnection(broker.host, broker.port, timeout=3.0)
    hog.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    hog.send_raw(b"".join(RawConnection.frame("lease", 10 + i, queues=["looping"], max_tasks=8, lease_secs=0.05,
                                              wait_secs=300.0) for i in range(150)))  # and never reads
    time.sleep(0.5)
    rss_before = broker.rss_bytes()
    try:
        with broker.connect() as feeder:
            for index in range(8):
                feeder.enqueue("looping", bytes([index]) * (1 << 20), pid=f"{index}", max_attempts=1_000_000)
        time.sleep(4.0)  # eighty lease lengths
        rss = broker.rss_bytes()
        assert rss < rss_before + 96 * 1024 * 1024, f"broker RSS grew from {rss_before >> 20} to {rss >> 20} MiB"
        assert_still_serves(broker)
    finally:
        hog.close()


def test_thousands_of_idle_connections(broker: BrokerProcess) -> None:
    count = 5000
    needed = count + 500
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < needed:
        pytest.skip(f"the open-files hard limit {hard} is below {needed}")
    if soft != resource.RLIM_INFINITY and soft < needed:
        resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))
    idle: list[RawConnection] = []
    try:
        for _ in range(count):
            idle.append(broker.connect())
        with broker.connect() as conn:
            for number in range(10):
                conn.enqueue("busy", str(number).encode())
            assert len(conn.lease("busy", max_tasks=10)) == 10
        # the idle ones are open, and answer when they speak
        for conn in (idle[0], idle[count // 2], idle[-1]):
            assert conn.call("ping")
    finally:
        for conn in idle:
            conn.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert_still_serves(broker)


def test_a_flood_of_queue_creations_in_one_batch(broker: BrokerProcess) -> None:
    with broker.connect(timeout=60) as conn:
        halves = [
            [{"queue": f"flood#q{number:05d}", "data": b"x"} for number in range(start, start + 10_000)]
            for start in (0, 10_000)
        ]
        conn.send_raw(b"".join(RawConnection.frame("enqueue", n + 1, tasks=half) for n, half in enumerate(halves)))
        for reply in conn.read_replies(2):
            assert reply.ok and len(reply.result) == 10_000
        queues = conn.call("list_queues", pattern="^flood#", limit=100_000)
        assert len(queues) == 20_000
        # over the per-request limit: refused whole, nothing created
        too_many = [{"queue": f"more#q{number:05d}", "data": b"x"} for number in range(10_001)]
        reply = conn.request("enqueue", tasks=too_many)
        assert not reply.ok and reply.error["code"] == "BAD_REQUEST"
        assert conn.call("list_queues", pattern="^more#") == []
    assert_still_serves(broker)


def test_good_frames_before_an_oversized_length_are_answered(broker) -> None:
    """Requests in front of a bad length in the same write are served, then the connection closes."""
    raw = broker.connect()
    good = raw.frame("enqueue", 1, tasks=[{"queue": "before-bad", "pid": "p", "data": b"x"}])
    raw.send_raw(good + (2**31).to_bytes(4, "big") + b"junk")
    replies = raw.read_until_closed()
    assert replies[0].id == 1 and replies[0].ok, replies
    assert replies[-1].error["code"] == "FRAME_TOO_LARGE"
    other = broker.connect()
    assert [t["pid"] for t in other.call("peek", queue="before-bad")] == ["p"]
    other.close()


# ------------------------------------------------------------ patterns


def test_a_catastrophic_pattern_neither_hangs_its_caller_nor_stalls_other_clients(broker: BrokerProcess) -> None:
    """`(a+)+$` against `x#aaa…a-` takes a backtracking matcher 2^n steps (minutes at 30 a's);
    the broker must answer it promptly, and serve other clients while it does."""
    with broker.connect() as setup:
        setup.enqueue("x#" + "a" * 30 + "-", b"bait")
        setup.enqueue("work", b"held")
        [held] = setup.lease("work", lease_secs=60)
    bound_secs = 5.0  # generous: a backtracking matcher needs minutes here
    with broker.connect(timeout=bound_secs) as evil, broker.connect(timeout=bound_secs) as other:
        request_id = evil.send("list_queues", pattern="(a+)+$")
        time.sleep(0.2)  # let the broker start on the pattern before the other client speaks
        assert other.call("ping")
        [renewed] = other.call("renew", leases=[{"queue": "work", "pid": held["pid"], "lease_id": held["lease_id"]}],
                               lease_secs=60)
        assert renewed["ok"]
        reply = evil.read_reply()
        assert (reply.id, reply.ok, reply.result) == (request_id, True, [])
    assert_still_serves(broker)


@pytest.mark.parametrize("pattern", [r"(a)\1", "a(?=b)", "(?<!x)a", "(", "a" * 1025])
def test_patterns_beyond_the_linear_time_syntax_are_bad_requests(broker: BrokerProcess, pattern: str) -> None:
    with broker.connect() as conn:
        conn.enqueue("a#b", b"x")
        for op in ("list_queues", "stats"):
            reply = conn.request(op, pattern=pattern)
            assert not reply.ok and reply.error["code"] == "BAD_REQUEST", (op, reply)
            assert "pattern" in reply.error["message"] and len(reply.error["message"]) < 300
        assert [row["queue"] for row in conn.call("list_queues", pattern=r"^a#\w$")] == ["a#b"]
    assert_still_serves(broker)

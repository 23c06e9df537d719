"""Bad input to a broker that asks for credentials, and to its TLS port (TESTING.md, "Bad input to try").

The companion of `test_bad_input.py` for the authenticated handshake: each
case gets a clear error or a closed connection, and an authenticated client
on another connection is served afterwards. Before authenticating, a client
can only be refused: whatever it sends other than a good `auth` closes the
connection with one `UNAUTHORIZED` frame (id 0, or the auth's id).
"""

from __future__ import annotations

import random
import socket
import ssl
import struct
import time
from pathlib import Path
from typing import Iterator

import msgspec
import pytest

from kittiwake.protocol import encode_frame
from support.auth_users import ALICE, standard_auth_file
from support.broker_process import BrokerProcess, RawConnection
from support.tls_certificates import Certificates

_encode = msgspec.msgpack.Encoder().encode


@pytest.fixture
def secured(tmp_path: Path, certificates: Certificates) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path / "data", tls=certificates, auth_file=standard_auth_file(tmp_path / "users.json"))
    try:
        yield process
    finally:
        process.kill()


def assert_still_serves(broker: BrokerProcess) -> None:
    """Fresh authenticated connections, plaintext and TLS, can enqueue, lease and dequeue."""
    assert broker.alive(), broker.log_tail()
    for tls in (False, True):
        with broker.connect(tls=tls) as conn:
            assert conn.auth(*ALICE).ok
            queue = f"alice.healthy-{time.monotonic_ns()}"
            conn.enqueue(queue, b"still here")
            [task] = conn.lease(queue)
            [outcome] = conn.call("dequeue", leases=[{"queue": queue, "pid": task["pid"], "lease_id": task["lease_id"]}])
            assert outcome["ok"]


def closing_codes(conn: RawConnection) -> list[tuple[int, str]]:
    return [(reply.id, reply.error["code"]) for reply in conn.read_until_closed()]


@pytest.mark.parametrize(
    "body",
    [b"\xff" * 5, random.Random(11).randbytes(300), _encode([1, 2, 3]), _encode({"op": "auth"}), b""],
    ids=["ff", "random", "array", "no-id", "empty"],
)
def test_garbage_frames_before_auth_close_the_connection(secured: BrokerProcess, body: bytes) -> None:
    with secured.connect() as conn:
        conn.send_raw(encode_frame(body))
        assert closing_codes(conn) == [(0, "UNAUTHORIZED")]
    assert_still_serves(secured)


def test_garbage_bytes_before_auth_close_the_connection(secured: BrokerProcess) -> None:
    with secured.connect() as conn:
        conn.send_raw(random.Random(5).randbytes(4096))
        assert closing_codes(conn) in ([(0, "FRAME_TOO_LARGE")], [(0, "UNAUTHORIZED")])
    assert_still_serves(secured)


@pytest.mark.parametrize(
    "fields",
    [
        {"user": "u" * 10_000, "token": "t" * 20},
        {"user": "alice", "token": "t" * 1_000_000},
        {"user": 12, "token": "t" * 20},
        {"user": "alice"},
        {"user": "alice", "token": "alice-token-0123456789abcdef", "extra": True},
        {"user": "al\x00ice", "token": "\xff" * 20},
    ],
    ids=["10kB-user", "1MB-token", "int-user", "no-token", "unknown-field", "nul-and-latin1"],
)
def test_oversize_or_malformed_credentials_close_the_connection(secured: BrokerProcess, fields: dict) -> None:
    with secured.connect() as conn:
        conn.send("auth", **fields)
        codes = closing_codes(conn)
        assert len(codes) == 1 and codes[0][1] == "UNAUTHORIZED", codes
    assert_still_serves(secured)


def test_each_op_before_auth_is_refused_and_nothing_runs(secured: BrokerProcess) -> None:
    for op, fields in [
        ("ping", {}),
        ("enqueue", {"tasks": [{"queue": "alice.sneaky", "data": b"x"}]}),
        ("list_queues", {}),
        ("delete_queue", {"queue": "alice.jobs"}),
        ("drop_all_tables", {}),
    ]:
        with secured.connect() as conn:
            conn.send(op, **fields)
            assert closing_codes(conn) == [(0, "UNAUTHORIZED")], op
    with secured.connect() as conn:
        assert conn.auth(*ALICE).ok
        assert conn.call("list_queues") == []


def test_requests_after_a_refused_auth_are_not_run(secured: BrokerProcess) -> None:
    with secured.connect() as conn:
        conn.send_raw(
            RawConnection.frame("auth", 1, user="alice", token="wrong-token-0123456789")
            + RawConnection.frame("enqueue", 2, tasks=[{"queue": "alice.after-refusal", "data": b"x"}])
        )
        assert closing_codes(conn) == [(1, "UNAUTHORIZED")]
    with secured.connect() as conn:
        assert conn.auth(*ALICE).ok
        assert conn.call("list_queues") == []


def test_a_connection_that_never_authenticates_is_closed(tmp_path: Path) -> None:
    users = standard_auth_file(tmp_path / "users.json")
    with BrokerProcess(tmp_path / "data", auth_file=users, extra_args=["--auth-timeout-secs", "0.5"]) as broker:
        with broker.connect() as silent, broker.connect() as halfway:
            frame = RawConnection.frame("auth", 1, user="alice", token="alice-token-0123456789abcdef")
            halfway.send_raw(frame[:7])  # a frame begun and never finished
            for conn in (silent, halfway):
                codes = closing_codes(conn)
                assert codes == [(0, "UNAUTHORIZED")], codes
        with broker.connect() as conn:
            assert conn.auth(*ALICE).ok


def test_a_half_frame_before_auth_then_close(secured: BrokerProcess) -> None:
    with secured.connect() as conn:
        frame = RawConnection.frame("auth", 1, user="alice", token="alice-token-0123456789abcdef")
        conn.send_raw(frame[: len(frame) // 2])
    assert_still_serves(secured)


def test_a_tls_client_hello_to_the_plaintext_port_is_refused(secured: BrokerProcess) -> None:
    context = ssl.create_default_context(cafile=str(secured.tls.ca))
    with socket.create_connection((secured.host, secured.port), timeout=10) as raw:
        with pytest.raises((ssl.SSLError, ConnectionError)):
            context.wrap_socket(raw, server_hostname="localhost")
    hello = bytes.fromhex("16030100c4010000c00303") + random.Random(3).randbytes(32) + b"\x00" * 160
    with secured.connect() as conn:
        conn.send_raw(hello)
        assert closing_codes(conn) == [(0, "FRAME_TOO_LARGE")]
    assert_still_serves(secured)


@pytest.mark.parametrize(
    "data",
    [
        RawConnection.frame("auth", 1, user="alice", token="alice-token-0123456789abcdef"),
        RawConnection.frame("ping", 1),
        b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n",
        struct.pack(">I", 2**31) + b"\x00" * 64,
    ],
    ids=["auth-frame", "ping-frame", "http", "huge-length"],
)
def test_plaintext_to_the_tls_port_is_closed(secured: BrokerProcess, data: bytes) -> None:
    with socket.create_connection((secured.host, secured.tls_port), timeout=10) as raw:
        raw.sendall(data)
        received = b""
        try:
            while chunk := raw.recv(65536):
                received += chunk
        except ConnectionResetError:
            pass
        # the TLS layer answers with an alert record at most, never with a reply frame
        assert not received or received[0] == 0x15, received[:32]
    assert_still_serves(secured)


def test_a_tls_handshake_left_half_done_does_not_hold_up_others(secured: BrokerProcess) -> None:
    hello = bytes.fromhex("16030100c4010000c00303") + random.Random(8).randbytes(32)
    stalled = [socket.create_connection((secured.host, secured.tls_port), timeout=10) for _ in range(20)]
    try:
        for sock in stalled:
            sock.sendall(hello)  # a ClientHello cut short, then silence
        assert_still_serves(secured)
    finally:
        for sock in stalled:
            sock.close()
    assert_still_serves(secured)


def test_hundreds_of_unauthenticated_connections_do_not_hold_up_others(secured: BrokerProcess) -> None:
    idle = []
    try:
        for _ in range(500):  # past the cap per address (256): the rest are refused, not kept
            idle.append(secured.connect(source="127.0.0.3"))
        assert_still_serves(secured)  # from another address
    finally:
        for conn in idle:
            conn.close()
    assert_still_serves(secured)

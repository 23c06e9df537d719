"""Bad input and brute force on every face of one broker (docs/testing.md, "Every face, every user").

One broker with an auth file of several users and every face on (UDP, the SQS
API, the dashboard): each HTTP port gets the bad input of the binary port's
tests (garbage, a TLS hello, a binary frame, huge heads and lengths, invalid
UTF-8, half a request then silence); the UDP port gets garbage datagrams; each
test ends by checking that a client of every other port is still served.
Brute force: a thousand wrong tokens through the dashboard's login run the key
derivation only as often as the broker's failure budget allows, as on the
binary port; wrong SigV4 signatures cost a keyed hash each and stall nobody.
"""

from __future__ import annotations

import http.client
import json
import re
import socket
import time
from pathlib import Path
from typing import Iterator

import pytest

from kittiwake import Client
from kittiwake.protocol import encode_frame, encode_request
from support.auth_users import ALICE, ROOT, standard_auth_file
from support.broker_process import BrokerProcess

TLS_CLIENT_HELLO = bytes.fromhex("16030100a5010000a10303") + b"\x00" * 32 + b"\x00\x00\x02\x13\x01\x01\x00"


@pytest.fixture(scope="module")
def faced(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    directory = tmp_path_factory.mktemp("faces")
    users = standard_auth_file(directory / "users.json")
    extra = ["--udp-port", "0", "--sqs-port", "0", "--http-port", "0"]
    with BrokerProcess(directory / "data", auth_file=users, extra_args=extra) as broker:
        yield broker


def assert_every_port_serves(broker: BrokerProcess) -> None:
    assert broker.udp_port is not None and broker.http_port is not None and broker.sqs_port is not None
    with Client(broker.client_url(*ALICE)) as client:
        client.enqueue("alice.still", b"x")
    with Client(f"kwu://{ALICE[0]}:{ALICE[1]}@{broker.host}:{broker.udp_port}") as client:
        client.enqueue("alice.still", b"y")
    connection = http.client.HTTPConnection(broker.host, broker.http_port, timeout=10)
    try:
        connection.request("GET", "/healthz")
        assert connection.getresponse().status == 200
    finally:
        connection.close()
    with socket.create_connection((broker.host, broker.sqs_port), timeout=10) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert sock.recv(65536).startswith(b"HTTP/1.1 ")  # an SQS error, answered


def _exchange(port: int, data: bytes, timeout: float = 10.0) -> bytes:
    """Send `data`, then read until the broker closes (or the timeout): what came back."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(data)
        received = b""
        try:
            while chunk := sock.recv(65536):
                received += chunk
        except (ConnectionResetError, TimeoutError):
            pass
        return received


BAD_REQUESTS = {
    "garbage": bytes(range(256)) * 4,
    "tls hello": TLS_CLIENT_HELLO,
    "a binary frame": encode_frame(encode_request("ping", 1, {})),
    "a huge head": b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"a" * 100_000 + b"\r\n\r\n",
    "a length of 2^63": b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 9223372036854775808\r\n\r\n",
    "a negative length": b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: -5\r\n\r\n",
    "invalid utf-8 in the path": b"GET /api/queue?name=\xff\xfe HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
    "nul bytes": b"GET /\x00 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
    "no host": b"GET /healthz HTTP/1.1\r\n\r\n",
}


@pytest.mark.parametrize("face", ["sqs", "http"])
@pytest.mark.parametrize("name", sorted(BAD_REQUESTS))
def test_bad_bytes_on_an_http_port_get_a_clear_answer_and_hurt_no_one(faced: BrokerProcess, face: str, name: str) -> None:
    port = faced.sqs_port if face == "sqs" else faced.http_port
    assert port is not None
    answer = _exchange(port, BAD_REQUESTS[name])
    status = answer.split(b" ", 2)[1] if answer.startswith(b"HTTP/1.1 ") else b""
    assert status in (b"400", b"401", b"403", b"404", b"405", b"413", b"415", b"421", b"431"), answer[:300]
    assert faced.alive()
    assert_every_port_serves(faced)


def test_half_a_request_then_silence_holds_up_no_one(faced: BrokerProcess) -> None:
    assert faced.sqs_port is not None and faced.http_port is not None
    held = []
    try:
        for port in (faced.sqs_port, faced.http_port) * 20:
            sock = socket.create_connection(("127.0.0.1", port), timeout=10)
            sock.sendall(b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1000\r\n\r\nhalf")
            held.append(sock)
        assert_every_port_serves(faced)
    finally:
        for sock in held:
            sock.close()


def test_garbage_datagrams_are_dropped_and_the_udp_port_goes_on(faced: BrokerProcess) -> None:
    assert faced.udp_port is not None
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        for size in (0, 1, 7, 100, 1400, 9000, 60000):
            sock.sendto(bytes(range(256)) * (size // 256) + b"\xff" * (size % 256), ("127.0.0.1", faced.udp_port))
    assert faced.alive()
    assert_every_port_serves(faced)


def test_a_thousand_wrong_dashboard_logins_run_the_key_derivation_a_handful_of_times(tmp_path: Path) -> None:
    users = standard_auth_file(tmp_path / "users.json")
    with BrokerProcess(tmp_path / "data", auth_file=users, extra_args=["--http-port", "0"]) as broker:
        assert broker.http_port is not None
        with Client(broker.client_url(*ALICE)) as client:  # verified before the guessing: cached since
            client.ping()
        connection = http.client.HTTPConnection(broker.host, broker.http_port, timeout=30)
        refused = 0
        started = time.monotonic()
        try:
            for attempt in range(1000):
                body = json.dumps({"user": ROOT[0], "token": f"guess-{attempt:06d}-0123456789"})
                connection.request("POST", "/api/session", body=body, headers={
                    "Content-Type": "application/json", "Origin": f"http://127.0.0.1:{broker.http_port}",
                    "Host": f"127.0.0.1:{broker.http_port}"})
                response = connection.getresponse()
                response.read()
                refused += response.status in (401, 503)
                if response.getheader("connection") == "close":
                    connection.close()
        finally:
            connection.close()
        assert refused == 1000, f"{refused} refused in {time.monotonic() - started:.1f} s"
        with Client(broker.client_url(*ALICE)) as client:  # the binary port is served all along
            client.ping()
        assert broker.terminate() == 0
        log = broker.log_path.read_text()
    summary = re.search(r"(\d+) more failed authentications from 127\.0\.0\.1 in \d+ s, (\d+) of them refused unchecked", log)
    assert summary is not None, log[-3000:]
    assert int(summary.group(2)) >= 1000 - 10, summary.group(0)


def test_wrong_sigv4_signatures_are_refused_cheaply(faced: BrokerProcess) -> None:
    assert faced.sqs_port is not None
    connection = http.client.HTTPConnection(faced.host, faced.sqs_port, timeout=30)
    try:
        for attempt in range(300):
            authorization = (f"AWS4-HMAC-SHA256 Credential={ROOT[0]}/20261127/eu-west-1/sqs/aws4_request, "
                             f"SignedHeaders=content-type;host;x-amz-date;x-amz-target, Signature={attempt:064x}")
            connection.request("POST", "/", body=b"{}", headers={
                "Host": f"127.0.0.1:{faced.sqs_port}", "Content-Type": "application/x-amz-json-1.0",
                "X-Amz-Target": "AmazonSQS.ListQueues", "X-Amz-Date": time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()),
                "Authorization": authorization})
            response = connection.getresponse()
            response.read()
            assert response.status in (400, 403), response.status
    finally:
        connection.close()
    assert_every_port_serves(faced)

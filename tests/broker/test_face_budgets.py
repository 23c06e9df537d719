"""Every face under the broker's one set of budgets, tried over real sockets as an outsider would.

* one connection cap for all ports, fitted to the open-files limit: idle HTTP
  connections cannot take the descriptors a binary client needs, and a
  refusal is answered and logged, never a silent reset;
* one budget of request bytes held while they arrive: HTTP bodies count in
  it as binary frames do, so many connections sending most of a large body
  cannot raise the broker's memory past it; with an auth file, a client
  showing no credentials, or credentials that are not valid, is refused a
  large body before it is read;
* the HTTP ports answer only their own host names (DNS rebinding);
* the start-up warnings name every face that listens beyond the loopback.
"""

from __future__ import annotations

import http.client
import json
import resource
import socket
import time
from pathlib import Path

import pytest

from kittiwake import Client
from support.auth_users import ALICE, standard_auth_file
from support.broker_process import BrokerProcess, RawConnection
from support.http_api import basic, call

OPEN_FILES = 256


def _few_open_files() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (OPEN_FILES, OPEN_FILES))


def _status(host: str, port: int, path: str, headers: dict[str, str]) -> int:
    connection = http.client.HTTPConnection(host, port, timeout=10)
    try:
        connection.request("GET", path, headers=headers)
        response = connection.getresponse()
        response.read()
        return response.status
    finally:
        connection.close()


def test_idle_http_connections_cannot_take_the_descriptors_a_binary_client_needs(tmp_path: Path) -> None:
    with BrokerProcess(tmp_path / "data", preexec_fn=_few_open_files, extra_args=["--http-port", "0"]) as broker:
        assert broker.http_port is not None
        idle: list[socket.socket] = []
        try:
            for _ in range(OPEN_FILES):  # more than the process may hold
                idle.append(socket.create_connection((broker.host, broker.http_port), timeout=10))
            refused = idle[-1]  # the last HTTP connections were over the cap: answered, then closed
            refused.settimeout(10)
            answer = refused.recv(4096)
            head, _, body = answer.partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 503 ") and f"content-length: {len(body)}".encode() in head, answer
            with RawConnection(broker.host, broker.port) as raw:  # the HTTP port took the slots, not the fds
                replies = raw.read_until_closed(timeout=10)
            assert [reply.error["code"] for reply in replies if reply.error] == ["TOO_MANY_CONNECTIONS"], replies
        finally:
            for sock in idle:
                sock.close()
        deadline = time.monotonic() + 10
        while True:  # their slots come back as the broker sees them close
            try:
                with Client(broker.url, connect_timeout=2) as client:
                    client.enqueue("after", b"x")
                break
            except Exception:
                assert time.monotonic() < deadline, broker.log_tail()
                time.sleep(0.1)
        log = broker.log_path.read_text()
    assert f"the open-files limit is {OPEN_FILES}: connections are capped at" in log
    assert "connection refused on the" in log and "its cap" in log


def _rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def _send_most_of_a_body(sockets: list[socket.socket], body_bytes: int, secs: float) -> int:
    """Send each socket's body until the broker stops reading (the kernel's buffers fill) or `secs` pass."""
    chunk = b"x" * 65536
    sent = [0] * len(sockets)
    deadline = time.monotonic() + secs
    for sock in sockets:
        sock.setblocking(False)
    progress = True
    while progress and time.monotonic() < deadline:
        progress = False
        for index, sock in enumerate(sockets):
            room = body_bytes - 1024 - sent[index]  # never the whole body: the request stays unfinished
            if room <= 0:
                continue
            try:
                sent[index] += sock.send(chunk[:room])
                progress = True
            except BlockingIOError:
                pass
        if not progress:
            time.sleep(0.2)  # the broker may still be reading what the kernel holds
            progress = any(_writable(sock) for sock in sockets)
    return sum(sent)


def _writable(sock: socket.socket) -> bool:
    try:
        sock.send(b"x")
    except BlockingIOError:
        return False
    return True


def test_http_bodies_on_many_connections_count_in_the_one_read_budget(tmp_path: Path) -> None:
    budget_mb = 16
    with BrokerProcess(tmp_path / "data", extra_args=["--sqs-port", "0", "--max-buffered-mb", str(budget_mb)]) as broker:
        assert broker.sqs_port is not None
        before = _rss_bytes(broker.pid)
        body_bytes = 8 * 1024 * 1024
        sockets = []
        try:
            for _ in range(40):
                sock = socket.create_connection((broker.host, broker.sqs_port), timeout=10)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 64 * 1024)
                sock.sendall(
                    f"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/x-amz-json-1.0\r\n"
                    f"X-Amz-Target: AmazonSQS.ListQueues\r\nContent-Length: {body_bytes}\r\n\r\n".encode()
                )
                sockets.append(sock)
            sent = _send_most_of_a_body(sockets, body_bytes, secs=20)
            grown = _rss_bytes(broker.pid) - before
            # the kernel's buffers hold some of what was sent; the broker holds at most its budget
            assert grown < (budget_mb + 48) * 1024 * 1024, f"grew {grown >> 20} MiB after {sent >> 20} MiB sent"
            with Client(broker.url, connect_timeout=5) as client:  # and it serves everyone else
                client.enqueue("other.client", b"x")
        finally:
            for sock in sockets:
                sock.close()


@pytest.mark.parametrize("face", ["--sqs-port", "--http-port"])
def test_with_auth_a_large_body_without_credentials_is_refused_before_it_is_read(tmp_path: Path, face: str) -> None:
    users = standard_auth_file(tmp_path / "users.json")
    with BrokerProcess(tmp_path / "data", auth_file=users, extra_args=[face, "0"]) as broker:
        port = broker.sqs_port if face == "--sqs-port" else broker.http_port
        assert port is not None
        with socket.create_connection((broker.host, port), timeout=10) as sock:
            sock.sendall(
                b"POST /api/session HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/x-amz-json-1.0\r\n"
                b"X-Amz-Target: AmazonSQS.ListQueues\r\nContent-Length: 200000\r\n\r\n" + b"x" * 1000
            )
            answer = sock.recv(65536)  # before the rest of the body was ever sent
        assert answer.split(b" ", 2)[1] in (b"401", b"403"), answer[:200]


def test_with_auth_the_dashboard_reads_a_large_body_only_from_valid_credentials(tmp_path: Path) -> None:
    users = standard_auth_file(tmp_path / "users.json")
    with BrokerProcess(tmp_path / "data", auth_file=users, extra_args=["--http-port", "0"]) as broker:
        assert broker.http_port is not None
        with Client(broker.client_url(*ALICE)) as alice:
            alice.enqueue("alice.jobs", b"1", pid="by-cookie")
            alice.enqueue("alice.jobs", b"2", pid="by-token")
        status, headers, _ = call(broker, "POST", "/api/session", {"user": ALICE[0], "token": ALICE[1]})
        assert status == 200
        session = headers["set-cookie"].split(";", 1)[0]
        # credentials that are there but not valid: each is refused from the head, the body never sent
        for shown in (f"Cookie: {session[:-4]}xxxx", "Cookie: theme=dark", "Cookie: kw_session=",
                      "Authorization: " + basic(ALICE[0], "not-alices-token-0123456789")["Authorization"],
                      "Authorization: " + basic("nobody", ALICE[1])["Authorization"],
                      "Authorization: Bearer no-colon", "Authorization: Digest x"):
            with socket.create_connection((broker.host, broker.http_port), timeout=10) as sock:
                sock.sendall(
                    b"POST /api/queue/cancel HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                    + shown.encode() + b"\r\nContent-Length: 200000\r\n\r\n" + b"x" * 1000
                )
                answer = sock.recv(65536)  # before the rest of the body was ever sent
            head, _, text = answer.partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 401 "), (shown, answer[:300])
            assert json.loads(text)["error"]["code"] == "UNAUTHORIZED", (shown, text)
        # valid ones, a session's cookie or a user's token: the large body is read and acted on
        for pid, shown_headers in (("by-cookie", {"Cookie": session}), ("by-token", basic(*ALICE))):
            padded = {"queue": "alice.jobs", "pids": [pid], "padding": "x" * 100_000}
            status, _, result = call(broker, "POST", "/api/queue/cancel", padded, shown_headers)
            assert (status, result.get("cancelled")) == (200, 1), (pid, status, result)


@pytest.mark.parametrize("face", ["--sqs-port", "--http-port"])
def test_the_http_ports_answer_only_their_own_host_names(tmp_path: Path, face: str) -> None:
    extra = [face, "0", "--http-host-name", "broker.test"]
    with BrokerProcess(tmp_path / "data", extra_args=extra) as broker:
        port = broker.sqs_port if face == "--sqs-port" else broker.http_port
        assert port is not None
        path = "/healthz" if face == "--http-port" else "/"
        ok = {200, 400, 405}  # what the face says of the request itself: it got past the host check
        assert _status(broker.host, port, path, {"Host": f"127.0.0.1:{port}"}) in ok
        assert _status(broker.host, port, path, {"Host": f"localhost:{port}"}) in ok
        assert _status(broker.host, port, path, {"Host": f"broker.test:{port}"}) in ok
        assert _status(broker.host, port, path, {"Host": f"[::1]:{port}"}) in ok
        # a page of another site whose name now resolves to the broker (DNS rebinding) reaches nothing
        assert _status(broker.host, port, path, {"Host": f"attacker.example:{port}"}) == 421
        assert _status(broker.host, port, path, {"Host": "broker.test.attacker.example"}) == 421


def test_a_rebound_page_cannot_read_or_act_on_tasks_without_auth(tmp_path: Path) -> None:
    with BrokerProcess(tmp_path / "data", extra_args=["--http-port", "0"]) as broker:
        assert broker.http_port is not None
        with Client(broker.url) as client:
            client.enqueue("private", b"secret")
        rebound = {"Host": f"attacker.example:{broker.http_port}", "Origin": f"http://attacker.example:{broker.http_port}"}
        assert _status(broker.host, broker.http_port, "/api/queue/tasks?name=private", rebound) == 421
        connection = http.client.HTTPConnection(broker.host, broker.http_port, timeout=10)
        try:
            connection.request("POST", "/api/queue/cancel", body=b'{"queue": "private", "pids": ["x"]}',
                               headers={**rebound, "Content-Type": "application/json"})
            assert connection.getresponse().status == 421
        finally:
            connection.close()


def test_every_face_beyond_the_loopback_says_what_it_exposes(tmp_path: Path, certificates: object) -> None:
    users = standard_auth_file(tmp_path / "users.json")
    extra = ["--udp-port", "0", "--sqs-port", "0", "--http-port", "0"]
    # the binary port is TLS only: the faces are what still travel in clear
    with BrokerProcess(tmp_path / "data", host="0.0.0.0", auth_file=users, tls=certificates, plaintext=False,
                       extra_args=extra) as broker:
        log = broker.log_path.read_text()
    warnings = [line for line in log.splitlines() if " WARNING " in line]
    assert any("UDP port" in line and "in clear" in line for line in warnings), warnings
    assert any("SQS API" in line and "unencrypted" in line for line in warnings), warnings
    assert any("dashboard" in line and "unencrypted" in line for line in warnings), warnings
    assert not any("plaintext port open" in line for line in warnings), warnings


def test_every_face_beyond_the_loopback_without_auth_warns_that_anyone_may_use_it(tmp_path: Path) -> None:
    extra = ["--udp-port", "0", "--sqs-port", "0", "--http-port", "0"]
    with BrokerProcess(tmp_path / "data", host="0.0.0.0", extra_args=extra) as broker:
        log = broker.log_path.read_text()
    warnings = [line for line in log.splitlines() if " WARNING " in line and "without --auth-file" in line]
    assert len(warnings) == 4, warnings  # the binary port, UDP, SQS, the dashboard

"""`/api/stream` on a real broker: events pushed as queues change, refusals before the stream, slow readers cut off.

A broker subprocess with `--http-port` for the module; the events are read
with http.client as a browser's EventSource reads them (a line at a time,
through the chunked framing). The slow-reader test runs the broker in this
process (`support.in_process_broker`) to lower its stream buffer bound and
the kernel's send buffer of the connection, so that a client that stops
reading is cut off within a few events; so does the test of history points
and of a session that ends under an open stream. Rights taken away under an
open stream are taken away in the auth file with `kittiwake auth`, as an
operator does; the broker re-reads the file on its own.
"""

from __future__ import annotations

import http.client
import json
import socket
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

from click.testing import CliRunner

from kittiwake import Client
from kittiwake.broker import BrokerConfig
from kittiwake.broker.security import SecurityConfig
from kittiwake.cli.auth_command import auth
from kittiwake.observe.face import ObserveFace
from kittiwake.observe.stream import SharedViews, event
from support.auth_users import ALICE, ROOT, standard_auth_file
from support.broker_process import BrokerProcess
from support.http_api import basic, call, error_code, get
from support.in_process_broker import InProcessBroker

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with BrokerProcess(tmp_path_factory.mktemp("stream") / "data", extra_args=["--http-port", "0"]) as process:
        yield process


class Events:
    """An open event stream: `next()` is the next (event, data) pair; comments and `retry:` are kept aside."""

    def __init__(self, host: str, port: int, path: str, headers: dict[str, str] | None = None) -> None:
        self.connection = http.client.HTTPConnection(host, port, timeout=15)
        self.connection.request("GET", path, headers=headers or {})
        self.response = self.connection.getresponse()
        self.comments: list[str] = []

    def next(self) -> tuple[str, Any]:
        name, data = "message", None
        while True:
            line = self.response.readline()
            assert line, "the stream ended"
            text = line.decode().rstrip("\n")
            if text.startswith(":") or text.startswith("retry:"):
                self.comments.append(text)
            elif text.startswith("event: "):
                name = text[len("event: "):]
            elif text.startswith("data: "):
                data = json.loads(text[len("data: "):])
            elif text == "" and data is not None:
                return name, data

    def until(self, name: str, accept: Any = lambda data: True, timeout: float = 15.0) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            got, data = self.next()
            if got == name and accept(data):
                return data
        raise AssertionError(f"no {name} event as wanted within {timeout} s")

    def close(self) -> None:
        self.connection.close()


def test_the_stream_pushes_the_queue_table_as_tasks_arrive(broker: BrokerProcess) -> None:
    events = Events(broker.host, broker.http_port, "/api/stream?view=queues&filter=s.&sort=size")
    try:
        assert events.response.status == 200
        assert events.response.getheader("content-type").startswith("text/event-stream")
        overview = events.until("overview")
        assert "totals" in overview and "broker" in overview
        first = events.until("queues")
        assert first["total"] == 0 and first["sort"] == "size"
        assert any(comment.startswith("retry:") for comment in events.comments)
        with Client(broker.url) as client:
            client.enqueue("s.one", "x")
            client.enqueue("s.two", "x")
            client.enqueue("s.two", "y")
        events.until("overview", lambda data: data["totals"]["tasks"] >= 3)  # each second: overview, then the table
        table = events.until("queues", lambda data: data["total"] == 2)
        assert [(row["queue"], row["size"]) for row in table["queues"]] == [("s.two", 2), ("s.one", 1)]
    finally:
        events.close()


def test_the_queue_view_streams_one_queue(broker: BrokerProcess) -> None:
    with Client(broker.url) as client:
        client.enqueue("s.single", "x")
        events = Events(broker.host, broker.http_port, "/api/stream?view=queue&name=s.single")
        try:
            assert events.until("queue")["stats"]["size"] == 1
            client.enqueue("s.single", "y")
            assert events.until("queue", lambda data: data["stats"]["size"] == 2)["stats"]["available"] == 2
        finally:
            events.close()


def test_bad_streams_are_refused_before_they_start(broker: BrokerProcess) -> None:
    for path, status, code in (("/api/stream?view=bogus", 400, "BAD_REQUEST"),
                               ("/api/stream?view=queue", 400, "BAD_REQUEST"),
                               ("/api/stream?view=queues&limit=9999", 400, "BAD_REQUEST"),
                               ("/api/stream?view=queue&name=s.nowhere", 404, "QUEUE_NOT_FOUND")):
        got, _, answer = call(broker, "GET", path)
        assert (got, error_code(answer)) == (status, code), path
    assert call(broker, "POST", "/api/stream", {})[0] == 405
    assert "/api/stream" in get(broker, "/api/")["paths"]


def test_a_client_that_stops_reading_is_cut_off_and_the_broker_goes_on(tmp_path: Path) -> None:
    config = BrokerConfig(data_dir=str(tmp_path / "data"), port=0, durability="os")
    face = ObserveFace(0)
    process_broker = InProcessBroker(config, None, faces=[face])
    try:
        server = face.server
        assert server is not None
        port = process_broker.broker.face_port("http")
        assert port is not None
        server.max_stream_buffer_bytes = 64 * 1024
        with Client(process_broker.url) as client:
            # 300 long names: each queues event is some 100 KB, and the ages on it change every second
            client.enqueue_many([{"queue": f"slow.{index:03d}." + "n" * 200, "data": "x"} for index in range(300)])
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.settimeout(10)
        sock.connect(("127.0.0.1", port))
        while not server.connections:
            time.sleep(0.01)

        def small_send_buffer() -> None:  # or the kernel takes megabytes before the broker holds any
            for connection in server.connections:
                connection.transport.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)

        process_broker.call_in_loop(small_send_buffer)
        sock.sendall(f"GET /api/stream?view=queues&limit=500 HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
        deadline = time.monotonic() + 60
        while server.streams_cut == 0 and time.monotonic() < deadline:
            time.sleep(0.05)  # and never read
        assert server.streams_cut == 1

        class Reader:  # the broker is still there for everybody else
            host, http_port = "127.0.0.1", port

        assert get(Reader, "/api/overview")["totals"]["queues"] == 300
        with Client(process_broker.url) as client:
            client.enqueue("slow.after", "x")
        try:  # the cut connection ends: what was sent, then a reset or the end
            while sock.recv(65536):
                pass
        except ConnectionResetError:
            pass
        sock.close()
    finally:
        process_broker.close()


def test_history_points_ride_the_stream_and_an_ended_session_ends_it(tmp_path: Path) -> None:
    users = standard_auth_file(tmp_path / "users.json")
    config = BrokerConfig(data_dir=str(tmp_path / "data"), port=0, durability="os",
                          security=SecurityConfig(auth_file=str(users)))
    face = ObserveFace(0)
    process_broker = InProcessBroker(config, None, faces=[face])
    try:
        assert face.observer is not None
        face.observer.history.points.append({"t": 1_800_000_000, "enqueued": 2.5})  # as the sampler adds them
        port = process_broker.broker.face_port("http")

        class Port:
            host, http_port = "127.0.0.1", port

        _, headers, _ = call(Port, "POST", "/api/session", {"user": ROOT[0], "token": ROOT[1]})
        cookie = headers["set-cookie"].split(";")[0]
        assert call(Port, "GET", "/api/stream")[0] == 401  # no credentials, no stream
        events = Events("127.0.0.1", port, "/api/stream", {"Cookie": cookie})
        try:
            assert events.response.status == 200
            assert events.until("history") == {"t": 1_800_000_000, "enqueued": 2.5}
            assert call(Port, "DELETE", "/api/session", headers={"Cookie": cookie})[0] == 200
            assert events.until("error")["error"]["code"] == "UNAUTHORIZED"
            assert events.response.readline() == b""  # and the stream ends
        finally:
            events.close()
    finally:
        process_broker.close()


def test_rights_taken_away_under_open_streams_stop_their_events(tmp_path: Path) -> None:
    users = standard_auth_file(tmp_path / "users.json")
    with BrokerProcess(tmp_path / "data", extra_args=["--http-port", "0"], auth_file=users) as broker:
        with Client(broker.client_url(*ROOT)) as client:
            client.enqueue("alice.watched", "x")
        _, headers, _ = call(broker, "POST", "/api/session", {"user": ALICE[0], "token": ALICE[1]})
        cookie = {"Cookie": headers["set-cookie"].split(";")[0]}  # as the page's EventSource sends it
        one = Events(broker.host, broker.http_port, "/api/stream?view=queue&name=alice.watched", cookie)
        table = Events(broker.host, broker.http_port, "/api/stream?view=queues&filter=alice.", basic(*ALICE))
        try:
            assert one.until("queue")["stats"]["size"] == 1
            assert [row["queue"] for row in table.until("queues")["queues"]] == ["alice.watched"]
            result = CliRunner().invoke(auth, ["set-rights", "--file", str(users), ALICE[0], "--rights", "alice.other.*=all"])
            assert result.exit_code == 0, result.output
            # the file is re-read within a second; each stream's next tick runs with the rights as they are
            assert one.until("error", timeout=10)["error"]["code"] == "FORBIDDEN"
            assert table.until("queues", lambda data: data["total"] == 0, timeout=10)["queues"] == []
            with Client(broker.client_url(*ROOT)) as client:
                client.enqueue("alice.watched", "y")  # a change alice may no longer see
            result = CliRunner().invoke(auth, ["remove-user", "--file", str(users), ALICE[0]])
            assert result.exit_code == 0, result.output
            for events in (one, table):  # a user removed: each stream says why, then ends
                name, data = events.next()
                while name != "error":
                    assert name != "queue" and not (name == "queues" and data["queues"]), data  # nothing of it
                    name, data = events.next()
                assert data["error"]["code"] == "UNAUTHORIZED"
                assert events.response.readline() == b""
        finally:
            one.close()
            table.close()


def test_shared_views_are_computed_once_per_interval() -> None:
    now = [0.0]
    shared = SharedViews(clock=lambda: now[0], max_age_secs=0.5)
    made: list[int] = []

    def make() -> int:
        made.append(1)
        return len(made)

    assert shared.get("k", make) == 1 and shared.get("k", make) == 1 and shared.get("other", make) == 2
    now[0] = 0.6
    assert shared.get("k", make) == 3 and shared.computed == 3


def test_an_event_is_one_line_of_json() -> None:
    assert event("queues", {"queue": "a", "data": b"\xff"}) == (
        b'event: queues\ndata: {"queue":"a","data":"/w==","data_encoding":"base64"}\n\n'
    )

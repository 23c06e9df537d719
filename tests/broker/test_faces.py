"""Faces plug into a broker from above (`kittiwake.broker.faces`): the broker names none of them.

A face of this test's own — a TCP port where each line is a queue name and
the answer is the task it enqueued there — starts, serves through the host's
group commit (`local_calls`), hears committed passes, is listed with its port
and connections, and stops in order, with no change to the broker.
"""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import pytest

from kittiwake import Client
from kittiwake.broker import BrokerConfig
from kittiwake.broker.faces import Exposure, Face, Host
from kittiwake.broker.local_calls import LocalCalls, request_id
from kittiwake.broker.listening import format_listening_line, parse_listening_line
from kittiwake.broker.server import listening_of
from kittiwake.engine.tally import Tally
from kittiwake.model import NewTask
from kittiwake.protocol import messages as m
from support.in_process_broker import InProcessBroker


class LineFace:
    """One line in (a queue name), one enqueue through the host, the result's pid back."""

    def __init__(self, name: str = "lines") -> None:
        self.name = name
        self.events: list[str] = []
        self.tallies: list[Tally] = []
        self.host: Host | None = None
        self._server: asyncio.AbstractServer | None = None
        self._clients: set[asyncio.StreamWriter] = set()
        self._unsubscribe = lambda: None

    async def start(self, host: Host) -> int:
        self.host = host
        calls = LocalCalls(host)
        self._unsubscribe = host.on_commit(lambda tally, secs: self.tallies.append(tally))

        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            self._clients.add(writer)
            try:
                while line := await reader.readline():
                    queue = line.decode().strip()
                    request = m.Enqueue(id=request_id(), op="enqueue", tasks=[NewTask(queue, b"from a face")])
                    [outcome] = await calls.call(request, peer="face")
                    writer.write(f"{outcome.pid}\n".encode())
            finally:
                self._clients.discard(writer)
                writer.close()

        self._server = await asyncio.start_server(serve, host.address, 0)
        self.events.append("start")
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    def stop_accepting(self) -> None:
        self.events.append("stop_accepting")
        self._unsubscribe()
        if self._server is not None:
            self._server.close()

    async def stop(self) -> None:
        self.events.append("stop")
        for writer in list(self._clients):
            writer.close()

    def connections(self) -> int:
        return len(self._clients)

    def exposure_warnings(self, exposure: Exposure) -> list[str]:
        return [f"the lines face on {exposure.address} is for tests"]


def test_a_face_of_its_own_plugs_in_without_changing_the_broker(tmp_path: Path) -> None:
    face = LineFace()
    face_type: type[Face] = LineFace  # satisfies the protocol, as mypy checks
    assert face_type is LineFace
    broker = InProcessBroker(BrokerConfig(data_dir=str(tmp_path / "data"), port=0), None, faces=[face])
    try:
        port = broker.broker.face_port("lines")
        line = format_listening_line(listening_of(broker.broker))
        assert port is not None and f"lines_port={port} " in line
        assert parse_listening_line(line).face_ports["lines"] == port
        assert broker.broker.ports()["lines_port"] == port
        assert "the lines face on 127.0.0.1 is for tests" in broker.broker.exposure_warnings()
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(b"faces.one\n")
            pid = sock.makefile("rb").readline().decode().strip()
            assert broker.call_in_loop(broker.broker.connection_counts)["lines"] == 1
        with Client(broker.url) as client:  # durable, and seen by every other way in
            [task] = client.peek("faces.one")
            assert (task.pid, task.data) == (pid, b"from a face")
        assert any(tally for tally in face.tallies), "the face heard no committed pass"
    finally:
        broker.close()
    assert face.events == ["start", "stop_accepting", "stop"]


def test_several_faces_hear_every_commit_and_unsubscribe_alone(tmp_path: Path) -> None:
    first, second = LineFace("first"), LineFace("second")
    broker = InProcessBroker(BrokerConfig(data_dir=str(tmp_path / "data"), port=0), None, faces=[first, second])
    try:
        with Client(broker.url) as client:
            client.enqueue("faces.two", b"x")
        assert first.tallies and second.tallies
        broker.call_in_loop(first.stop_accepting)  # only the first stops listening
        heard = len(first.tallies), len(second.tallies)
        with Client(broker.url) as client:
            client.enqueue("faces.two", b"y")
        assert len(first.tallies) == heard[0] and len(second.tallies) > heard[1]
    finally:
        broker.close()


def test_two_faces_of_one_name_are_refused(tmp_path: Path) -> None:
    from kittiwake.broker import Broker

    with pytest.raises(ValueError, match="share a name"):
        Broker(BrokerConfig(data_dir=str(tmp_path / "data"), port=0), faces=[LineFace(), LineFace()])


def test_the_composition_root_builds_the_faces_its_options_ask_for() -> None:
    from kittiwake.cli.broker_command import build_faces

    assert build_faces() == []
    faces = build_faces(udp_port=0, sqs_port=0, http_port=0, http_host_names=("broker.test",))
    assert [face.name for face in faces] == ["udp", "sqs", "http"]


class StuckFace(LineFace):
    """A face whose stop never returns."""

    async def stop(self) -> None:
        self.events.append("stop")
        await asyncio.Event().wait()


def test_a_face_that_never_stops_does_not_hold_up_the_broker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A SIGTERM must end the broker whatever a face or extension does on its way out: each step of
    the stop is awaited for `STOP_STEP_SECS` at most, then left behind, logged."""
    from kittiwake.broker import server

    monkeypatch.setattr(server, "STOP_STEP_SECS", 0.2)
    face = StuckFace()
    broker = InProcessBroker(BrokerConfig(data_dir=str(tmp_path / "data"), port=0), None, faces=[face])
    broker.close()  # `run` gives up after 30 s: it would, without the bound
    assert face.events == ["start", "stop_accepting", "stop"]
    assert "the lines face did not finish within" in caplog.text

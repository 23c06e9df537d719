"""Whether a broker is there now (`client.probe`), and closing a client that waits to reconnect — what a
stopping worker relies on to stop without a broker that has gone away."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import pytest

from kittiwake import Client, errors
from kittiwake.client.probe import broker_answers
from support.auth_users import standard_auth_file
from support.broker_process import BrokerProcess


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_broker_there_answers_and_a_killed_one_does_not(broker: BrokerProcess) -> None:
    assert broker_answers(broker.url)
    broker.kill()
    started = time.monotonic()
    assert not broker_answers(broker.url, connect_secs=0.5)
    assert time.monotonic() - started < 3  # about its connect budget, not the client's 10 s


def test_a_broker_that_refuses_the_caller_is_there(tmp_path: Path) -> None:
    with BrokerProcess(tmp_path / "data", auth_file=standard_auth_file(tmp_path / "users.json")) as broker:
        assert broker_answers(broker.client_url("alice", "not-her-token"))


def test_closing_a_client_ends_a_call_waiting_to_reconnect() -> None:
    client = Client(f"kw://127.0.0.1:{free_port()}", connect_timeout=30.0)
    failures: list[BaseException] = []

    def call() -> None:
        try:
            client.ping()
        except errors.KittiwakeError as error:
            failures.append(error)

    caller = threading.Thread(target=call)
    caller.start()
    time.sleep(0.3)  # in its backoff between refused attempts now
    closed_at = time.monotonic()
    client.close()
    caller.join(timeout=5)
    assert not caller.is_alive()
    assert time.monotonic() - closed_at < 2  # not the 30 s budget
    assert len(failures) == 1 and isinstance(failures[0], errors.BrokerUnreachable)
    assert "closed" in str(failures[0])
    with pytest.raises(errors.BrokerUnreachable):
        client.ping()

"""The bare ceiling of `bench ops` (`kittiwake.bench.sqlite_ceiling`) over a real socket: it starts like
a broker (its listening line), enqueues durably with a pid's dedupe as the broker does, and refuses
every other op with UNKNOWN_OP."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from kittiwake import Client, errors
from kittiwake.testing import BrokerProcess


def test_the_ceiling_enqueues_collapses_on_a_pid_and_speaks_nothing_else(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "kittiwake.bench.sqlite_ceiling"]
    with BrokerProcess(tmp_path / "ceiling", command=command, args=["--durability", "fsync"]) as server:
        with Client(server.url) as client:
            assert not client.enqueue("q", b"x", pid="p1").collapsed
            assert client.enqueue("q", b"other", pid="p1").collapsed
            outcomes = client.enqueue_many([{"queue": "q", "data": b"y", "pid": "p2"},
                                            {"queue": "q", "data": b"y", "pid": "p1"}])
            assert [outcome.collapsed for outcome in outcomes] == [False, True]
            with pytest.raises(errors.UnknownOperation):
                client.lease("q")
            with pytest.raises(errors.BadRequest):
                client.enqueue("q", b"no pid")
        server.restart()  # what was acknowledged is on disk
        with Client(server.url) as client:
            assert client.enqueue("q", b"again", pid="p2").collapsed

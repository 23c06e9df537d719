"""requeue_dead and purge_dead over a real broker: each request bounded, and all or nothing.

A request by pid used to act on every dead letter of that pid at once (one request held the
broker's loop for all of them), and a requeue that met a dead letter it could not move stopped
midway: those before it were requeued, and the reply was an error. Here a broker process is
asked over its socket, as a client would.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest
from click.testing import CliRunner

from kittiwake import Client
from kittiwake.cli.main import cli
from kittiwake.model import DEAD_PID_HEADER
from support.broker_process import BrokerProcess

BAD = "b~00000000000000001"


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path / "data", 0, ["--durability", "os"])
    try:
        yield process
    finally:
        process.kill()


def test_a_requeue_leaves_a_dead_letter_it_cannot_move_and_moves_the_others(broker: BrokerProcess) -> None:
    with Client(broker.url) as client:
        # a dead letter whose original-pid header is no pid (a client with rights on q.dead wrote it)
        client.enqueue("q.dead", b"bad", pid=BAD, headers={DEAD_PID_HEADER: "b\x01"})
        for named in (True, False):
            client.enqueue("q", b"good", pid="a")
            [task] = client.lease("q")
            client.release([task], "boom", bury=True)
            good = next(view.pid for view in client.peek("q.dead") if view.pid != BAD)
            page = client.requeue_dead("q", [good, BAD] if named else None)
            assert [(o.pid, o.ok, o.code) for o in page.outcomes] == [(good, True, None), (BAD, False, "BAD_DEAD_LETTER")]
            assert [view.pid for view in client.peek("q")] == ["a"]
            assert [view.pid for view in client.peek("q.dead")] == [BAD]  # it stays, the pages after it go on
            [task] = client.lease("q")
            client.dequeue([task])


def test_a_pids_thousands_of_dead_letters_take_bounded_requests(broker: BrokerProcess) -> None:
    with Client(broker.url) as client:
        client.enqueue_many([{"queue": "q.dead", "data": b"x", "pid": f"p~{n:017}", "headers": {DEAD_PID_HEADER: "p"}}
                             for n in range(2500)])
        first = client.purge_dead("q", ["p"])
        assert len(first.outcomes) == 1000 and first.next_pid == f"p~{999:017}"
        purged, after = len(first.outcomes), first.next_pid
        while after is not None:
            page = client.purge_dead("q", ["p"], after_pid=after)
            assert len(page.outcomes) <= 1000 and all(outcome.ok for outcome in page.outcomes)
            purged, after = purged + len(page.outcomes), page.next_pid
        assert purged == 2500 and client.peek("q.dead") == []


def test_the_cli_walks_a_named_pid_a_page_at_a_time(broker: BrokerProcess) -> None:
    with Client(broker.url) as client:
        client.enqueue_many([{"queue": "q.dead", "data": b"x", "pid": f"p~{n:017}", "headers": {DEAD_PID_HEADER: "p"}}
                             for n in range(2500)])
        done = CliRunner().invoke(cli, ["--url", broker.url, "dead", "purge", "q", "p"])
        assert done.exit_code == 0, done.output
        assert "purged 2500 dead letters of q" in done.output, done.output
        assert client.peek("q.dead") == []

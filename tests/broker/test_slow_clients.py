"""Clients that start frames and never finish them, or hold connections doing nothing.

Over real sockets to a broker subprocess with shortened timeouts. A half-sent
frame is cut after `--frame-timeout`; a connection with nothing in flight is
closed after `--idle-timeout`, one with a parked long-poll is not; and however
many connections send big partial frames, the broker holds at most
`--max-buffered-mb` of them and keeps serving a well-behaved client meanwhile.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
import time
from pathlib import Path

import pytest

from kittiwake.client import AsyncClient, Client
from kittiwake.protocol import DEFAULT_MAX_FRAME
from support.broker_process import BrokerDidNotStart, BrokerProcess, RawConnection

from test_bad_input import assert_still_serves  # tests/broker is on sys.path (no package)

MIB = 1024 * 1024


def assert_cut_with(conn: RawConnection, code: str, within_secs: float) -> None:
    """The broker sends one error frame with id 0 and closes, within `within_secs` (a generous bound)."""
    replies = conn.read_until_closed(timeout=within_secs)
    assert [(reply.id, reply.error["code"]) for reply in replies] == [(0, code)]


def test_a_half_sent_frame_is_cut_after_the_frame_timeout(tmp_path: Path) -> None:
    with BrokerProcess(tmp_path / "data", extra_args=["--frame-timeout", "1"]) as broker:
        with broker.connect() as stalled, broker.connect() as trickling:
            frame = RawConnection.frame("enqueue", 1, tasks=[{"queue": "half", "data": b"x" * 1000}])
            stalled.send_raw(frame[: len(frame) // 2])
            trickling.send_raw(frame[:10])
            for byte in frame[10:16]:  # a byte now and then never completes the frame in time
                time.sleep(0.3)
                try:
                    trickling.send_raw(bytes([byte]))
                except OSError:
                    break
            assert_still_serves(broker)
            assert_cut_with(stalled, "FRAME_TIMEOUT", within_secs=10)
            assert_cut_with(trickling, "FRAME_TIMEOUT", within_secs=10)
        assert_still_serves(broker)
        with broker.connect() as conn:
            assert conn.call("list_queues", pattern="^half$") == []


def test_frames_that_keep_completing_are_never_cut(tmp_path: Path) -> None:
    with BrokerProcess(tmp_path / "data", extra_args=["--frame-timeout", "1"]) as broker:
        with broker.connect() as conn:
            started = time.monotonic()
            while time.monotonic() - started < 2.5:  # longer than the timeout, in slow pieces
                frame = RawConnection.frame("ping", conn.next_id())
                conn.send_raw(frame[:3])
                time.sleep(0.2)
                conn.send_raw(frame[3:])
                assert conn.read_reply().ok


def test_an_idle_connection_is_closed_but_not_one_with_a_parked_long_poll(tmp_path: Path) -> None:
    with BrokerProcess(tmp_path / "data", extra_args=["--idle-timeout", "1"]) as broker:
        with broker.connect() as idle, broker.connect() as polling, broker.connect() as busy:
            request_id = polling.send("lease", queues=["nothing-yet"], wait_secs=2.5)
            started = time.monotonic()
            while time.monotonic() - started < 1.5:  # a request every 0.3 s is never idle
                assert busy.call("ping")
                time.sleep(0.3)
            assert_cut_with(idle, "IDLE_TIMEOUT", within_secs=10)
            reply = polling.read_reply()  # answered at its deadline, not cut before it
            assert (reply.id, reply.ok, reply.result) == (request_id, True, [])
            assert polling.call("ping")
            assert_cut_with(polling, "IDLE_TIMEOUT", within_secs=10)
        with Client(broker.url) as client:  # a client's pooled connection closed while idle is replaced
            assert client.ping()
            time.sleep(1.5)
            assert client.ping()

        async def ping_across_an_idle_close() -> None:
            client = AsyncClient(broker.url)
            try:
                assert await client.ping()
                await asyncio.sleep(1.5)
                assert await client.ping()
            finally:
                await client.close()

        asyncio.run(ping_across_an_idle_close())


def send_partial_frame(broker: BrokerProcess, announced: int, sent: int, done: threading.Event,
                       sockets: list[socket.socket]) -> None:
    """Announce a frame of `announced` bytes and send `sent` of them, as far as the broker reads."""
    sock = socket.create_connection((broker.host, broker.port), timeout=10)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 64 * 1024)
    sockets.append(sock)
    sock.settimeout(0.5)
    chunk = b"\x00" * (256 * 1024)
    try:
        sock.sendall(struct.pack(">I", announced))
        remaining = sent
        while remaining > 0 and not done.is_set():
            try:
                remaining -= sock.send(chunk[: min(len(chunk), remaining)])
            except socket.timeout:
                continue  # the broker stopped reading from us: backpressure
    except OSError:
        pass


def test_many_big_partial_frames_stay_within_the_read_budget(tmp_path: Path) -> None:
    budget_mb, frame_timeout_secs = 32, 5
    with BrokerProcess(tmp_path / "data", extra_args=["--max-buffered-mb", str(budget_mb),
                                                      "--frame-timeout", str(frame_timeout_secs)]) as broker:
        assert_still_serves(broker)
        rss_before = broker.rss_bytes()
        bound = rss_before + (budget_mb + 24) * MIB  # the budget, a read per connection, allocator slack
        done = threading.Event()
        sockets: list[socket.socket] = []
        hogs = [
            threading.Thread(target=send_partial_frame, args=(broker, DEFAULT_MAX_FRAME, 12 * MIB, done, sockets))
            for _ in range(24)  # 288 MiB offered
        ]
        try:
            for hog in hogs:
                hog.start()
            time.sleep(frame_timeout_secs / 2)  # they push what the broker takes; their frames are not cut yet
            rss = broker.rss_bytes()
            assert rss < bound, f"broker RSS grew from {rss_before // MIB} to {rss // MIB} MiB, budget {budget_mb} MiB"
            for _ in range(3):
                assert_still_serves(broker)  # whole small requests are read whatever the budget holds
        finally:
            done.set()
            for hog in hogs:
                hog.join(timeout=10)
            for sock in sockets:
                sock.close()
        # the frame timeout frees what the hogs held, and a big frame gets through
        with broker.connect(timeout=30) as conn:
            assert conn.enqueue("big", b"b" * (1024 * 1024 - 100))["collapsed"] is False
        assert broker.rss_bytes() < bound
        assert_still_serves(broker)


def test_large_frames_arriving_together_all_complete_within_a_small_budget(tmp_path: Path) -> None:
    """No livelock: past the reserve line one large frame at a time goes on to completion."""
    with BrokerProcess(tmp_path / "data", extra_args=["--max-buffered-mb", "16", "--max-frame", str(8 * MIB)]) as broker:
        results: list[object] = []
        all_started = threading.Barrier(10)

        def enqueue_big(number: int) -> None:
            with broker.connect(timeout=60) as conn:
                tasks = [{"queue": "bulk", "pid": f"{number}-{index}", "data": bytes(1000 * 1000)} for index in range(7)]
                frame = RawConnection.frame("enqueue", 1, tasks=tasks)
                conn.send_raw(frame[:MIB])  # ten first megabytes are past the reserve line together
                try:
                    all_started.wait(timeout=10)
                except threading.BrokenBarrierError:
                    pass
                conn.send_raw(frame[MIB:])
                reply = conn.read_reply()
                results.append(len(reply.result) if reply.ok else reply.error)

        senders = [threading.Thread(target=enqueue_big, args=(number,)) for number in range(10)]  # 70 MB at once
        for sender in senders:
            sender.start()
        for sender in senders:
            sender.join(timeout=90)
        assert results == [7] * 10
        with broker.connect() as conn:
            assert conn.call("list_queues", pattern="^bulk$")[0]["size"] == 70


@pytest.mark.parametrize(
    "flag, value",
    [("--frame-timeout", "0"), ("--frame-timeout", "-1"), ("--idle-timeout", "-1"), ("--max-buffered-mb", "0"),
     ("--max-buffered-mb", "8")],  # 8 MiB is below one frame of the default 16 MiB
)
def test_bad_settings_stop_the_broker_at_start(tmp_path: Path, flag: str, value: str) -> None:
    with pytest.raises(BrokerDidNotStart) as refused:
        BrokerProcess(tmp_path / "data", extra_args=[flag, value])
    assert refused.value.returncode != 0, refused.value
    name = flag[2:].replace("-", "_")
    assert name in refused.value.log_tail.splitlines()[-1].replace("-", "_"), refused.value

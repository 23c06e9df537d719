"""The loss-injecting relay does what its faults say, and the UDP loss bench's rows are valid."""

from __future__ import annotations

import socket
import threading
from typing import Iterator

import pytest

from kittiwake.bench.udp_loss import UdpLossSettings, audit, measure
from kittiwake.bench.udp_relay import Faults, UdpRelay


@pytest.fixture
def echo() -> Iterator[tuple[str, int]]:
    """A UDP echo server on its own thread."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    sock.settimeout(0.1)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                data, source = sock.recvfrom(65_535)
            except socket.timeout:
                continue
            sock.sendto(data, source)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield sock.getsockname()
    stop.set()
    thread.join()
    sock.close()


def exchange(port: int, count: int, wait: float = 0.5) -> list[bytes]:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as client:
        client.connect(("127.0.0.1", port))
        for n in range(count):
            client.send(b"%d" % n)
        client.settimeout(wait)
        got = []
        try:
            while True:
                got.append(client.recv(65_535))
        except socket.timeout:
            return got


def test_without_faults_everything_comes_back_in_order(echo: tuple[str, int]) -> None:
    with UdpRelay(echo) as relay:
        got = exchange(relay.port, 100)
        counts = relay.counts()
    assert got == [b"%d" % n for n in range(100)]
    assert (counts.upstream.forwarded, counts.downstream.forwarded, counts.total("dropped")) == (100, 100, 0)


def test_drops_are_counted_and_the_rest_arrives(echo: tuple[str, int]) -> None:
    with UdpRelay(echo, Faults(drop_rate=0.3, seed=5)) as relay:
        got = exchange(relay.port, 200)
        counts = relay.counts()
    assert counts.total("dropped") > 0
    assert len(got) == 200 - counts.total("dropped")
    assert counts.upstream.received == 200


def test_duplicates_arrive_twice(echo: tuple[str, int]) -> None:
    with UdpRelay(echo, Faults(duplicate_rate=1.0, seed=1)) as relay:
        got = exchange(relay.port, 10)
        counts = relay.counts()
    assert (counts.upstream.duplicated, counts.downstream.duplicated) == (10, 20)
    assert len(got) == 40 and set(got) == {b"%d" % n for n in range(10)}


def test_held_datagrams_are_overtaken(echo: tuple[str, int]) -> None:
    with UdpRelay(echo, Faults(reorder_rate=0.5, reorder_delay_secs=0.05, seed=2)) as relay:
        got = exchange(relay.port, 50)
        counts = relay.counts()
    assert sorted(got) == sorted(b"%d" % n for n in range(50))
    assert counts.total("reordered") > 0 and got != [b"%d" % n for n in range(50)]


def test_the_same_seed_makes_the_same_decisions() -> None:
    # one arrival order (no replies to interleave with): one set of decisions
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sink:
        sink.bind(("127.0.0.1", 0))
        runs = []
        for _ in range(2):
            with UdpRelay(sink.getsockname(), Faults(drop_rate=0.2, duplicate_rate=0.1, seed=9)) as relay:
                exchange(relay.port, 100, wait=0.3)
                counts = relay.counts().upstream
                runs.append((counts.dropped, counts.duplicated))
    assert runs[0] == runs[1] and runs[0][0] > 0


def test_bad_fault_rates_are_refused() -> None:
    with pytest.raises(ValueError):
        Faults(drop_rate=1.5)


def test_audit_counts_like_the_queue_checker() -> None:
    counts = audit(ok=["a", "b", "c"], unknown=["d", "e"], drained=["a", "a", "c", "d", "z"])
    assert counts == {"lost": 1, "duplicated": 1, "unexpected": 1, "recovered": 1}


def test_the_udp_loss_bench_rows_are_valid() -> None:
    rows = measure(UdpLossSettings(loss_rates=(0.0, 0.05), seconds=0.5, threads=4, durability="os"))
    assert [(row["transport"], row["loss"]) for row in rows] == [
        ("udp", 0.0), ("udp", 0.05), ("udp-direct", None), ("tcp", None)]
    for row in rows:
        assert row["valid"] and row["lost"] == 0 and row["duplicated"] == 0, row
        assert row["tasks"] > 0

"""The broker watch of a stopping worker process (pure: the probe is a stand-in)."""

from __future__ import annotations

import threading

from kittiwake.client.url import BrokerAddress, parse_url
from kittiwake.worker.stopping import BrokerWatch

ADDRESS = parse_url("kw://127.0.0.1:7370")


def test_nothing_is_probed_before_the_stop_and_the_watch_ends_with_it() -> None:
    probes: list[BrokerAddress] = []
    stopping = threading.Event()
    watch = BrokerWatch(ADDRESS, stopping, lambda: None, answers=lambda address: probes.append(address) or True)
    watch.start()
    watch.finish()  # a process that never stopped gracefully (recycled)
    assert probes == [] and not watch.gone.is_set()


def test_a_broker_that_goes_away_during_the_stop_is_given_up_on_once() -> None:
    answers = iter([True, True, False, False])
    gave_up = threading.Event()
    calls: list[int] = []
    stopping = threading.Event()

    def on_gone() -> None:
        calls.append(1)
        gave_up.set()

    watch = BrokerWatch(ADDRESS, stopping, on_gone, every_secs=0.01, answers=lambda address: next(answers))
    watch.start()
    stopping.set()
    assert gave_up.wait(5)
    watch.finish()
    assert calls == [1] and watch.gone.is_set()


def test_a_probe_that_fails_takes_the_broker_as_there() -> None:
    stopping = threading.Event()
    probed = threading.Event()

    def broken(address: BrokerAddress) -> bool:
        probed.set()
        raise RuntimeError("a bug")

    watch = BrokerWatch(ADDRESS, stopping, lambda: None, every_secs=0.01, answers=broken)
    watch.start()
    stopping.set()
    assert probed.wait(5)
    watch.finish()
    assert not watch.gone.is_set()

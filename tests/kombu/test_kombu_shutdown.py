"""A Celery worker shutting down gives up on brokers that are gone and leaves the others alone
(`kittiwake.kombu.shutdown`, without Celery: the transports are stand-ins)."""

from __future__ import annotations

import socket

import pytest

from kittiwake.client.url import BrokerAddress, parse_url
from kittiwake.kombu import shutdown
from support.broker_process import BrokerProcess


class StandIn:
    def __init__(self, url: str) -> None:
        self.broker_address: BrokerAddress = parse_url(url)
        self.gave_up = 0

    def give_up(self) -> None:
        self.gave_up += 1


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_producer_tracks_nothing() -> None:
    if shutdown._connected:
        pytest.skip("this process already connected Celery's signal")
    shutdown.track(StandIn("kw://127.0.0.1:7370"))
    assert len(shutdown._transports) == 0


def test_only_the_transports_of_a_gone_broker_give_up_and_only_once(broker: BrokerProcess) -> None:
    there = StandIn(broker.url)
    gone = [StandIn(f"kw://127.0.0.1:{free_port()}")]
    gone.append(StandIn(gone[0].broker_address.url))  # two connections to one broker: probed once
    shutdown.connect_to_celery()  # what a `celery` command does
    for transport in (there, *gone):
        shutdown.track(transport)
    shutdown.give_up_on_gone_brokers()
    shutdown.give_up_on_gone_brokers()  # the next round: they are tracked no more
    assert there.gave_up == 0
    assert [transport.gave_up for transport in gone] == [1, 1]

"""Fixtures for worker tests: the test app pointed at the test's broker."""

from __future__ import annotations

from typing import Iterator

import pytest

from support.broker_process import BrokerProcess
from worker.harness import connected_app


@pytest.fixture
def app(broker: BrokerProcess) -> Iterator[object]:
    yield from connected_app(broker.url)

"""Store health on a fake clock: when writes pause during an outage, when it ends, and how little it logs."""

from __future__ import annotations

import logging
import sqlite3

import pytest

from kittiwake.broker.store_health import LOG_EVERY_SECS, WRITE_RETRY_SECS, StoreHealth
from kittiwake.store.faults import StorageFault


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


FULL = sqlite3.OperationalError("database or disk is full")


def test_a_single_failure_does_not_pause_writes_and_a_committed_write_ends_it() -> None:
    clock = Clock()
    health = StoreHealth(clock)
    health.pass_failed(FULL, StorageFault.FULL, 3)
    assert health.failing and not health.writes_paused()
    health.pass_committed(wrote=True)
    assert not health.failing and health.fault is None


def test_a_second_failure_pauses_writes_for_a_while() -> None:
    clock = Clock()
    health = StoreHealth(clock)
    health.pass_failed(FULL, StorageFault.FULL, 1)
    health.pass_failed(FULL, StorageFault.FULL, 1)
    assert health.writes_paused()
    clock.now += WRITE_RETRY_SECS - 0.01
    assert health.writes_paused()
    clock.now += 0.02
    assert not health.writes_paused()
    assert health.failing  # until a write commits


def test_a_pass_that_found_no_engine_does_not_pause_writes() -> None:
    clock = Clock()
    health = StoreHealth(clock)
    health.rebuild_failed(sqlite3.OperationalError("disk I/O error"), StorageFault.IO_ERROR)
    health.pass_failed(FULL, StorageFault.IO_ERROR, 1, tried=False)
    clock.now += WRITE_RETRY_SECS
    assert health.may_rebuild() and not health.writes_paused()


def test_a_pass_that_only_read_does_not_end_the_outage() -> None:
    clock = Clock()
    health = StoreHealth(clock)
    health.pass_failed(FULL, StorageFault.FULL, 1)
    health.pass_committed(wrote=False)
    assert health.failing
    health.pass_failed(FULL, StorageFault.FULL, 1)
    assert health.writes_paused()  # still the same outage: its second failure


def test_a_failed_rebuild_is_retried_once_a_while() -> None:
    clock = Clock()
    health = StoreHealth(clock)
    assert health.may_rebuild()
    health.rebuild_failed(sqlite3.OperationalError("disk I/O error"), StorageFault.IO_ERROR)
    assert not health.may_rebuild()
    clock.now += WRITE_RETRY_SECS
    assert health.may_rebuild()
    assert health.fault is StorageFault.IO_ERROR


def test_a_long_outage_logs_a_line_per_period_not_per_pass(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="kittiwake.broker")
    clock = Clock()
    health = StoreHealth(clock)
    for _ in range(3000):  # 30 s at a hundred failed passes a second
        health.pass_failed(FULL, StorageFault.FULL, 1)
        clock.now += 0.01
    health.pass_committed(wrote=True)
    messages = [record.getMessage() for record in caplog.records]
    # the first failure, a line per LOG_EVERY_SECS in between, the recovery
    assert 3 <= len(messages) <= 2 + 30 / LOG_EVERY_SECS, messages
    assert all("storage still failing" in message for message in messages[1:-1])
    assert "storage failure (the disk is full)" in messages[0]
    assert "storage recovered" in messages[-1] and "3000 passes" in messages[-1]

"""The cold-restart data directory: written through the store, deterministic, and
giving every recovery path work; the full scan it is measured against agrees with
the sizes recovery now reads from `queue_sizes`."""

from __future__ import annotations

import time
from pathlib import Path

from kittiwake.bench.cold_restart import LEASE_OWNER, QUEUES, build, full_scan
from kittiwake.engine.engine import LEASE_ID_COUNTER
from kittiwake.store.sqlite import SqliteStore

TASKS = 4000  # 500 per queue: one task of each role in every queue


def test_every_recovery_path_has_work(tmp_path: Path) -> None:
    now = time.time()
    data = build(tmp_path / "data", TASKS, now, lambda fraction, tasks: None)
    assert data.tasks == TASKS and len(data.queues) == QUEUES
    assert (data.total("size"), data.total("running"), data.total("expired"), data.total("blocked")) == (TASKS, 8, 8, 8)
    store = SqliteStore(data.directory)
    try:
        recovery = store.recover(now)
        sizes = {summary.queue: (summary.size, summary.blocked) for summary in recovery.queues}
        assert sizes == {queue: (counts.size, counts.blocked) for queue, counts in data.queues.items()}
        assert len(recovery.leased) == len(recovery.expired) == QUEUES
        assert {task.lease_owner for task in (*recovery.leased, *recovery.expired)} == {LEASE_OWNER}
        assert recovery.counters[LEASE_ID_COUNTER] >= max(task.lease_id for task in recovery.leased)
        for parent in recovery.leased:  # each running lease is the parent of one blocked task
            (child,) = store.children_of(parent.queue, parent.pid)
            blocked = store.load_task(*child)
            assert blocked is not None and blocked.waiting_on == 1 and child[0] == parent.queue
    finally:
        store.close()


def test_the_full_scan_agrees_with_recovery_and_every_build_is_the_same(tmp_path: Path) -> None:
    first = build(tmp_path / "first", TASKS, time.time(), lambda fraction, tasks: None)
    second = build(tmp_path / "second", TASKS, time.time(), lambda fraction, tasks: None)
    _, rows = full_scan(first.directory)
    assert full_scan(second.directory)[1] == rows
    store = SqliteStore(first.directory)
    try:
        summaries = {s.queue: (s.size, s.max_pid, s.max_fifo_pid, s.blocked) for s in store.recover(time.time()).queues}
    finally:
        store.close()
    scanned = {queue: (count, max_pid, max_fifo, blocked)
               for queue, _gen, count, max_pid, max_fifo, _lease_id, blocked in rows}
    assert scanned == summaries

"""`bench scale`'s cold restart: a broker started on millions of tasks it has never seen (TaskMaster §5.3).

TaskMaster recovers a node in "a few seconds" whatever it holds. A broker
restarted over its own fill (the `restart` figure) has its tasks in the OS
page cache and no more of them than the benchmark could enqueue through the
wire; this figure holds the broker to its target (docs/performance.md) at a size the wire
would take too long to fill:

1. `build`: a data directory of `tasks` tasks (10M by default) written
   straight through `SqliteStore` in commits of `BUILD_BATCH`, deterministic
   (fixed pids, times and 32-byte data) and spread over `QUEUES` queues. One
   task in `ROLE_EVERY` of each kind gives every recovery path work: a running
   lease (read back as leased), a lease that ran out while no broker was
   watching (its failed attempt is counted by the first sweep), and a task
   blocked on the running one two before it (an edge and a parent count).
2. `measure_broker`: a broker process on that directory; seconds from spawn to
   its listening line (`listening_s`) and then to the first successful lease
   at the head of the first queue (`first_lease_s`; together `recovery_s`).
   The task is dequeued, and a `stats` call must report exactly the sizes,
   leases and blocked tasks written.
3. The reference, on the same file once the broker has stopped: the
   statement recovery ran before schema version 1, a GROUP BY over every task
   row (`full_scan_s`), and, like for like, `SqliteStore.recover()` as it is
   now (`store_recover_s`). `ratio` is full scan / `recovery_s`, so above 1
   the new start-up is ahead even counting the process start it pays and the
   scan does not.

Both the broker and the scan read a file the build has just written, so it
sits in the OS page cache for each: the ratio compares work, not disk reads.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from kittiwake.bench.harness import BrokerProcess, first_lease
from kittiwake.bench.settings import COLD_QUEUE_PREFIX
from kittiwake.bench.wire import BlockingConnection
from kittiwake.engine.engine import FIFO_COUNTER, LEASE_ID_COUNTER
from kittiwake.engine.mutations import Mutation, PutEdge, PutTask, SetCounter
from kittiwake.model import Task, fifo_pid
from kittiwake.store.sqlite import SqliteStore

QUEUES = 8
BUILD_BATCH = 100_000  # tasks per commit
BUILD_CACHE_MB = 256
ROLE_EVERY = 1000
RUNNING, EXPIRED, BLOCKED = 1, 2, 3  # a task's place in its queue mod ROLE_EVERY
BLOCKED_PARENT_OFFSET = (BLOCKED - RUNNING) * QUEUES  # a blocked task waits on the running one two before it
DATA_BYTES = 32
BASE_MICROS = 1_700_000_000_000_000  # 2023-11-14: pids, enqueue times and lease ids, the same in every build
LEASE_SECS = 86_400.0  # a running lease outlives any run of the benchmark
LEASE_OWNER = "bench-cold-worker"
SQLITE_CACHE_MB = 64  # the broker's default page cache, for the reference scan too
DISK_BYTES_PER_TASK = 200  # about 130 in the file, with room for the WAL while building

# What recovery read at start-up before schema version 1: every task row.
FULL_SCAN = (
    "SELECT queue, gen, count(*), max(pid), "
    "max(CASE WHEN length(pid) = 17 AND pid NOT GLOB '*[^0-9]*' THEN pid END), max(lease_id), "
    "sum(waiting_on > 0) "
    "FROM tasks GROUP BY queue, gen"
)
FULL_SCAN_SOURCE = "GROUP BY over every task row (recovery before schema version 1), same file"


def queue_name(index: int) -> str:
    """Task `index` goes to queue index mod QUEUES, so each queue gets every role."""
    return f"{COLD_QUEUE_PREFIX}{index % QUEUES}"


@dataclass
class QueueCounts:
    size: int = 0
    running: int = 0  # leases still running after the restart
    expired: int = 0  # leases that ran out while no broker was watching
    blocked: int = 0


@dataclass
class ColdData:
    """What `build` wrote, to check the restarted broker against."""

    directory: Path
    tasks: int
    build_s: float
    db_mb: float
    queues: dict[str, QueueCounts] = field(default_factory=dict)

    def total(self, kind: str) -> int:
        return sum(getattr(counts, kind) for counts in self.queues.values())


def _task(index: int, total: int, now: float, counts: dict[str, QueueCounts]) -> tuple[Task, PutEdge | None]:
    queue = queue_name(index)
    micros = BASE_MICROS + index
    task = Task(queue, fifo_pid(micros), b"%0*d" % (DATA_BYTES, index), micros / 1e6)
    tally = counts[queue]
    tally.size += 1
    role = (index // QUEUES) % ROLE_EVERY
    edge = None
    if role == RUNNING:
        tally.running += 1
        task.lease_id, task.deliveries, task.lease_owner = micros, 1, LEASE_OWNER
        task.leased_at, task.lease_expires_at = now, now + LEASE_SECS
        task.children = 1 if index + BLOCKED_PARENT_OFFSET < total else 0
    elif role == EXPIRED:
        tally.expired += 1
        task.lease_id, task.deliveries, task.lease_owner = micros, 1, LEASE_OWNER
        task.leased_at, task.lease_expires_at = micros / 1e6, micros / 1e6 + 60.0
    elif role == BLOCKED:
        tally.blocked += 1
        task.waiting_on = 1
        parent = index - BLOCKED_PARENT_OFFSET
        edge = PutEdge(queue_name(parent), fifo_pid(BASE_MICROS + parent), queue, task.pid)
    return task, edge


def _size_mb(directory: Path) -> float:
    return round(sum(path.stat().st_size for path in directory.iterdir() if path.is_file()) / 1024 / 1024, 1)


def build(directory: Path, tasks: int, now: float, progress: Callable[[float, int], None]) -> ColdData:
    """Write `tasks` tasks into a new data directory through the store, `BUILD_BATCH` per commit."""
    started = time.monotonic()
    counts = {queue_name(index): QueueCounts() for index in range(min(tasks, QUEUES))}
    store = SqliteStore(directory, durability="os", cache_mb=BUILD_CACHE_MB)  # set-up, not measured
    try:
        for first in range(0, tasks, BUILD_BATCH):
            mutations: list[Mutation] = []
            edges: list[Mutation] = []
            for index in range(first, min(tasks, first + BUILD_BATCH)):
                task, edge = _task(index, tasks, now, counts)
                mutations.append(PutTask(task))
                if edge is not None:
                    edges.append(edge)
            store.write(mutations)
            store.write(edges)
            store.commit()
            done = min(tasks, first + BUILD_BATCH)
            progress(done / tasks, done)
        # what a broker that issued these ids would have persisted
        store.write([SetCounter(LEASE_ID_COUNTER, BASE_MICROS + tasks), SetCounter(FIFO_COUNTER, BASE_MICROS + tasks)])
        store.commit()
    finally:
        store.close()
    return ColdData(directory, tasks, time.monotonic() - started, _size_mb(directory), counts)


def _stats_mismatches(stats: list[dict[str, Any]], expected: dict[str, QueueCounts]) -> list[str]:
    """Every way the broker's stats differ from what was written (running leases stay leased;
    expired ones are back, counted as available once the sweep has taken them)."""
    found = {row["queue"]: row for row in stats}
    wrong = []
    for queue, counts in expected.items():
        row = found.get(queue)
        if row is None:
            wrong.append(f"{queue}: missing")
            continue
        want = {"size": counts.size, "leased": counts.running, "blocked": counts.blocked,
                "available": counts.size - counts.running - counts.blocked}
        got = {key: row.get(key) for key in want}
        if got != want:
            wrong.append(f"{queue}: {got} != {want}")
    return wrong


def measure_broker(data: ColdData, log_path: Path, durability: str) -> dict[str, Any]:
    """Start a broker on the built directory: time to listening and to the first lease; check stats."""
    broker = BrokerProcess(data.directory, log_path, durability)
    spawned = time.monotonic()
    try:
        listening_s = broker.start()
        with BlockingConnection(broker.host, broker.port) as link:
            task, _ = first_lease(link, queue_name(0))
            recovery_s = time.monotonic() - spawned
            data.queues[task["queue"]].size -= 1  # dequeued
            stats = link.request("stats", queues=sorted(data.queues), sample=0)
        rss_after_restart_mb = broker.rss_mb()
    finally:
        shutdown_s = broker.stop()
    mismatches = _stats_mismatches(stats, data.queues)
    return {
        "recovery_s": round(recovery_s, 3),
        "listening_s": round(listening_s, 3),
        "first_lease_s": round(recovery_s - listening_s, 3),
        "shutdown_s": round(shutdown_s, 3),
        "rss_after_restart_mb": rss_after_restart_mb,
        "tasks_found": sum(row["size"] for row in stats),
        "tasks_expected": data.total("size"),
        "stats_match": not mismatches,
        "stats_mismatches": mismatches[:QUEUES],
    }


def full_scan(directory: Path) -> tuple[float, list[tuple]]:
    """Seconds for the pre-version-1 recovery scan on a closed broker's file, and its rows."""
    db = sqlite3.connect(directory / "kittiwake.db")
    try:
        db.execute(f"PRAGMA cache_size=-{SQLITE_CACHE_MB * 1024}")
        started = time.perf_counter()
        rows = db.execute(FULL_SCAN).fetchall()
        elapsed = time.perf_counter() - started
    finally:
        db.close()
    return elapsed, rows


def store_recover(directory: Path) -> float:
    """Seconds to open the store and run today's `recover()` on the same file."""
    started = time.perf_counter()
    store = SqliteStore(directory, cache_mb=SQLITE_CACHE_MB)
    try:
        store.recover(time.time())
        return time.perf_counter() - started
    finally:
        store.close()


def run_cold_restart(root: Path, tasks: int, durability: str,
                     bar: Callable[[str], Callable[[float, int], None]]) -> dict[str, Any]:
    """Build, restart, scan; the figure's numbers. The data directory is deleted afterwards."""
    directory = root / "cold-data"
    needed_gb = tasks * DISK_BYTES_PER_TASK / 1024 ** 3
    free_gb = disk_free_gb(root)
    if free_gb < needed_gb:
        raise RuntimeError(f"the cold restart needs about {needed_gb:.1f} GB free in {root}, "
                           f"there are {free_gb:.1f} GB (--dir elsewhere, or fewer --recovery-tasks)")
    try:
        data = build(directory, tasks, time.time(), bar(f"cold restart: write {tasks:,} tasks through the store"))
        measured = measure_broker(data, root / "cold-broker.log", durability)
        full_scan_s, scanned = full_scan(directory)
        store_recover_s = store_recover(directory)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    return {
        "tasks_on_disk": tasks,
        "queues": len(data.queues),
        "leased_running": data.total("running"),
        "leased_expired": data.total("expired"),
        "blocked": data.total("blocked"),
        "data_bytes": DATA_BYTES,
        "build_s": round(data.build_s, 1),
        "build_tasks_per_s": round(tasks / data.build_s) if data.build_s > 0 else None,
        "db_mb": data.db_mb,
        **measured,
        "full_scan_s": round(full_scan_s, 3),
        "full_scan_tasks": sum(row[2] for row in scanned),
        "store_recover_s": round(store_recover_s, 4),
    }


def disk_free_gb(path: Path) -> float:
    stats = os.statvfs(path)
    return stats.f_bavail * stats.f_frsize / 1024 ** 3

"""The benchmark harness: a broker subprocess, a pool of load processes, percentiles.

Every benchmark (`ops`, `latency`, `scale`) runs in a `Session`: a throwaway
directory, a broker started as its own process on it
(`python -m kittiwake.broker --data DIR --port 0 --durability ...`, through
`kittiwake.testing.BrokerProcess`, the launcher the tests use too), and one
or two load processes (`kittiwake.bench.load`) that drive it. Nothing of the
benchmark runs inside the broker's process, and the parent process only
coordinates and draws progress bars: it sets one measurement window for every
load process (the monotonic clock is shared by all processes), polls their
task counters, and merges what they send back.

Besides the load's own figures the harness reads the broker's CPU time
(`/proc/PID/stat`) and memory (`/proc/PID/status`) so each result shows
whether the broker or the load was the bottleneck.

Percentiles are nearest-rank over every measured operation (no sampling, no
histogram buckets): p50, p90, p99, p99.9 (`p999`) and max, in milliseconds.
"""

from __future__ import annotations

import math
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from kittiwake import testing
from kittiwake.bench.jobs import CountedLoad, FsyncProbe, LoadResult, Scenario, TimedLoad, WakeProbe
from kittiwake.bench.load import serve
from kittiwake.bench.processes import ProcessPool
from kittiwake.bench.settings import (
    DURABILITY,
    FILL_BATCH,
    FILL_CONNECTIONS,
    FIRST_LEASE_TIMEOUT_SECS,
    LOAD_PROCESSES,
    PROBE_LEASE_SECS,
)
from kittiwake.bench.wire import BlockingConnection, lease_refs

BROKER_START_TIMEOUT_SECS = 300.0  # a restart over a million tasks is allowed to take a while
BROKER_STOP_TIMEOUT_SECS = 120.0
PERCENTILES = (("p50", 50.0), ("p90", 90.0), ("p99", 99.0), ("p999", 99.9))

# Progress callbacks get (fraction done 0..1, tasks finished so far).
Progress = Callable[[float, int], None]


def _no_progress(fraction: float, tasks: int) -> None:
    pass


# ------------------------------------------------------------ percentiles


def latency_summary_ms(samples_ns: Iterable[int]) -> dict[str, float] | None:
    """Nearest-rank p50, p90, p99, p99.9 and max in ms; None without samples."""
    ordered = sorted(samples_ns)
    if not ordered:
        return None
    count = len(ordered)
    summary = {}
    for name, percent in PERCENTILES:
        rank = max(1, math.ceil(percent / 100.0 * count))
        summary[name] = round(ordered[rank - 1] / 1e6, 4)
    summary["max"] = round(ordered[-1] / 1e6, 4)
    return summary


# ------------------------------------------------------------------ broker


class BrokerProcess(testing.BrokerProcess):
    """A broker on `data_dir` (or on the store `store_url` names) for a benchmark: `kittiwake.testing`'s
    launcher with the durability chosen, its log at `log_path`, not started until `start()`; plus its
    memory (its CPU time is the launcher's `cpu_secs()`), and `stop()` that times the clean stop."""

    def __init__(self, data_dir: Path, log_path: Path, durability: str = DURABILITY,
                 extra_args: Sequence[str] = (), store_url: str | None = None,
                 command: Sequence[str] | None = None) -> None:
        super().__init__(data_dir, store_url=store_url, args=["--durability", durability, *extra_args],
                         log_path=log_path, start_timeout_secs=BROKER_START_TIMEOUT_SECS, command=command)
        self.durability = durability

    def stop(self) -> float:
        """SIGTERM and wait (SIGKILL after `BROKER_STOP_TIMEOUT_SECS`); seconds until it exited."""
        if not self.alive():
            return 0.0
        started = time.monotonic()
        try:
            self.terminate(BROKER_STOP_TIMEOUT_SECS)
        except subprocess.TimeoutExpired:
            self.kill()
        return time.monotonic() - started

    def _status_kb(self, key: str) -> float:
        try:
            with open(f"/proc/{self.pid}/status") as status:
                for line in status:
                    if line.startswith(key + ":"):
                        return float(line.split()[1])
        except OSError:
            pass
        return float("nan")

    def rss_mb(self) -> float:
        """Resident memory now (VmRSS)."""
        return round(self._status_kb("VmRSS") / 1024.0, 1)

    def peak_rss_mb(self) -> float:
        """Highest resident memory so far (VmHWM)."""
        return round(self._status_kb("VmHWM") / 1024.0, 1)


# -------------------------------------------------------------- load pool


class LoadPool(ProcessPool):
    """The load processes of a benchmark session."""

    def __init__(self, processes: int) -> None:
        super().__init__(processes, serve)

    def run(self, jobs: Sequence[Any], progress: Callable[[int], None] = lambda tasks: None) -> LoadResult:
        """Run one job per process (len(jobs) <= size) and merge the results."""
        if len(jobs) > self.size:
            raise ValueError("more jobs than load processes")
        busy = range(len(jobs))
        for index, job in zip(busy, jobs):
            self.start(index, job)
        merged = LoadResult()
        waiting = set(busy)
        failure: str | None = None
        while waiting:
            progress(sum(self.count(index) for index in busy))
            for index in sorted(waiting):
                if self.done(index, 0.05):
                    waiting.discard(index)
                    try:
                        merged.merge(self.result(index))
                    except RuntimeError as exc:  # the others still finish, so none is left running
                        failure = failure or str(exc)
        progress(sum(self.count(index) for index in busy))
        if failure:
            raise RuntimeError(failure)
        return merged


def split_connections(connections: int, processes: int) -> list[tuple[int, ...]]:
    """Deal connection numbers 0..connections-1 round-robin over the processes."""
    shares = [tuple(range(first, connections, processes)) for first in range(processes)]
    return [share for share in shares if share]


# ------------------------------------------------------------------ phases


@dataclass
class Measured:
    """One measured figure: the merged load result plus the broker's CPU over the run."""

    result: LoadResult
    seconds: float  # the measurement window (timed) or first start → last end (counted)
    broker_cpu_percent: float | None = None

    @property
    def client_cpu_percent(self) -> float | None:
        """The load processes' CPU over their run, as a percentage of one core (summed)."""
        result = self.result
        return round(100.0 * result.cpu_secs / result.wall_secs, 1) if result.wall_secs > 0 else None

    @property
    def tasks_per_sec(self) -> float:
        return self.result.tasks / self.seconds if self.seconds > 0 else 0.0

    @property
    def latency_ms(self) -> dict[str, float] | None:
        return latency_summary_ms(self.result.latencies_ns)


def _exit_on_signal(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)


class Session:
    """A throwaway directory, a broker on it (or on the store `store_url` names), and a pool of load processes.

    `brokers` > 1 starts that many brokers on the store `store_url` names (which must let several
    share it: PostgreSQL with brokers=many); load connection n then talks to broker n mod `brokers`,
    and the broker CPU reported is theirs summed. `broker` is the first, for set-up calls. `command`
    starts another server in the broker's place (`sqlite_ceiling`, the bare reference of `ops`)."""

    def __init__(self, *, durability: str = DURABILITY, processes: int = LOAD_PROCESSES, parent_dir: str | None = None,
                 keep: bool = False, broker_args: Sequence[str] = (), store_url: str | None = None,
                 brokers: int = 1, command: Sequence[str] | None = None) -> None:
        if brokers > 1 and store_url is None:
            raise ValueError("several brokers need a store they can share (--store postgresql://…?brokers=many)")
        self.root = Path(tempfile.mkdtemp(prefix="kittiwake-bench-", dir=parent_dir))
        self.keep = keep
        self.brokers = [
            BrokerProcess(self.root / "data", self.root / f"broker{'' if n == 0 else n}.log", durability, broker_args,
                          store_url, command)
            for n in range(brokers)
        ]
        self.broker = self.brokers[0]
        self.pool: LoadPool | None = None
        self.processes = processes
        self.startup_secs = 0.0
        self._previous_sigterm: Any = None

    def __enter__(self) -> Session:
        if threading.current_thread() is threading.main_thread():
            # a SIGTERM to the benchmark stops its broker and load processes too
            self._previous_sigterm = signal.signal(signal.SIGTERM, _exit_on_signal)
        try:
            self.pool = LoadPool(self.processes)
            self.startup_secs = max(broker.start() for broker in self.brokers)
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for broker in self.brokers:
            broker.stop()
        if self.pool is not None:
            self.pool.close()
            self.pool = None
        if not self.keep:
            shutil.rmtree(self.root, ignore_errors=True)
        if self._previous_sigterm is not None:
            signal.signal(signal.SIGTERM, self._previous_sigterm)
            self._previous_sigterm = None

    def link(self) -> BlockingConnection:
        """A connection for set-up calls from this process, one at a time."""
        return BlockingConnection(self.broker.host, self.broker.port)

    def _others(self) -> tuple[tuple[str, int], ...]:
        return tuple((broker.host, broker.port) for broker in self.brokers[1:])

    def _broker_cpu_secs(self) -> float:
        return sum(broker.cpu_secs() for broker in self.brokers)

    def timed(self, scenario: Scenario, clients: int, warmup_secs: float, seconds: float,
              progress: Progress = _no_progress, processes: int | None = None) -> Measured:
        """Closed-loop load from every load process: warm up, then measure for `seconds`."""
        assert self.pool is not None
        shares = split_connections(clients, min(processes or self.pool.size, self.pool.size))
        start_ns = time.monotonic_ns() + 300_000_000  # time for every process to connect
        measure_ns = start_ns + int(warmup_secs * 1e9)
        stop_ns = measure_ns + int(seconds * 1e9)
        jobs = [TimedLoad(self.broker.host, self.broker.port, scenario, share, start_ns, measure_ns, stop_ns,
                          self._others()) for share in shares]
        broker_cpu: dict[str, float] = {}
        span = (stop_ns - start_ns) / 1e9

        def watch(tasks: int) -> None:
            now = time.monotonic_ns()
            if "measure" not in broker_cpu and now >= measure_ns:
                broker_cpu["measure"] = self._broker_cpu_secs()
            if "stop" not in broker_cpu and now >= stop_ns:
                broker_cpu["stop"] = self._broker_cpu_secs()
            progress(min(1.0, max(0.0, (now - start_ns) / 1e9 / span)), tasks)

        result = self.pool.run(jobs, watch)
        measured = Measured(result, seconds)
        if "measure" in broker_cpu and "stop" in broker_cpu:
            measured.broker_cpu_percent = round(100.0 * (broker_cpu["stop"] - broker_cpu["measure"]) / seconds, 1)
        return measured

    def counted(self, scenario: Scenario, connections: int, ops: int | None, warmup_ops: int = 0,
                total_tasks: int | None = None, progress: Progress = _no_progress,
                processes: int | None = None) -> Measured:
        """Closed-loop load that ends after a number of operations (or tasks) per connection."""
        assert self.pool is not None
        shares = split_connections(connections, min(processes or self.pool.size, self.pool.size))
        jobs = [CountedLoad(self.broker.host, self.broker.port, scenario, share, ops, warmup_ops, self._others())
                for share in shares]
        expected = total_tasks or max(1, connections * ((ops or 0) + warmup_ops) * scenario.batch)
        cpu_before = self._broker_cpu_secs()
        wall_before = time.monotonic()
        result = self.pool.run(jobs, lambda tasks: progress(min(1.0, tasks / expected), tasks))
        wall = time.monotonic() - wall_before
        seconds = (result.last_end_ns - result.first_start_ns) / 1e9 if result.ops else 0.0
        measured = Measured(result, seconds)
        if wall > 0:
            measured.broker_cpu_percent = round(100.0 * (self._broker_cpu_secs() - cpu_before) / wall, 1)
        return measured

    def probe(self, job: WakeProbe | FsyncProbe, expected: int, progress: Progress = _no_progress) -> Measured:
        """One probe in one load process (sequential samples)."""
        assert self.pool is not None
        result = self.pool.run([job], lambda done: progress(min(1.0, done / max(1, expected)), done))
        seconds = (result.last_end_ns - result.first_start_ns) / 1e9 if result.ops else 0.0
        return Measured(result, seconds)

    def fill(self, tasks_by_queue: dict[str, int], batch: int = FILL_BATCH, connections: int = FILL_CONNECTIONS,
             progress: Progress = _no_progress) -> Measured | None:
        """Enqueue FIFO tasks (of `settings.DATA_BYTES`) until each queue holds at least the given count more."""
        total = sum(tasks_by_queue.values())
        if total <= 0:
            return None
        merged: Measured | None = None
        done = 0
        for queue, count in tasks_by_queue.items():
            if count <= 0:
                continue
            streams = min(connections, max(1, count // batch))
            per_stream = math.ceil(count / streams)
            scenario = Scenario("fifo_enqueue", (queue,), batch=batch, budget_tasks=per_stream)
            offset = done
            measured = self.counted(scenario, streams, None, total_tasks=per_stream * streams,
                                    progress=lambda fraction, tasks: progress(min(1.0, (offset + tasks) / total),
                                                                              offset + tasks))
            done += per_stream * streams
            if measured.result.errors:
                raise RuntimeError(f"filling {queue} failed: {measured.result.first_error}")
            merged = measured
        return merged


# ------------------------------------------------------------ set-up calls


def queue_sizes(link: BlockingConnection, pattern: str) -> dict[str, int]:
    """Sizes of the queues whose names match a regex."""
    return {row["queue"]: row["size"] for row in link.request("list_queues", pattern=pattern, limit=1_000_000)}


def first_lease(link: BlockingConnection, queue: str) -> tuple[dict[str, Any], float]:
    """Lease from `queue` until a task comes back (a broker that just started may still be
    recovering), then dequeue it: the task, and the monotonic time its lease came back."""
    started = time.monotonic()
    while True:
        leased = link.request("lease", queues=[queue], max_tasks=1, lease_secs=PROBE_LEASE_SECS)
        if leased:
            leased_at = time.monotonic()
            link.request("dequeue", leases=lease_refs(leased))
            return leased[0], leased_at
        if time.monotonic() - started > FIRST_LEASE_TIMEOUT_SECS:
            raise RuntimeError(f"no task could be leased from {queue} after the restart")
        time.sleep(0.01)

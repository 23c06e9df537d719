"""The plain data load processes exchange with the harness: jobs in, results out.

Every job is a frozen, picklable dataclass sent over a pipe to a load process
(`load.serve`); every answer is a `LoadResult`. Times are
`time.monotonic_ns()` readings, one clock for every process on the machine.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field

from kittiwake.bench.settings import DATA_BYTES, FSYNC_BLOCK_BYTES, WORK_LEASE_SECS


@dataclass(frozen=True)
class Scenario:
    """What every connection of a run does; connection i works on queues[i % len(queues)].

    kinds: `enqueue` (explicit random pids), `fifo_enqueue` (broker-assigned
    pids), `lease_dequeue` (lease up to `batch`, then dequeue them: two
    requests), `spread_enqueue` (FIFO tasks dealt round-robin over all of
    `queues`), `list_queues` (with `pattern`), `stats` (of `queues[0]`).
    `batch` is tasks per request; `budget_tasks` (per connection) ends an
    enqueue run after that many tasks.
    """

    kind: str
    queues: tuple[str, ...]
    batch: int = 1
    data_bytes: int = DATA_BYTES
    pattern: str | None = None
    budget_tasks: int | None = None
    lease_secs: float = WORK_LEASE_SECS


def addresses(job: TimedLoad | CountedLoad) -> tuple[tuple[str, int], ...]:
    """Where a load job's connections go: connection number n to the (n mod count)th broker."""
    return ((job.host, job.port), *job.others)


@dataclass(frozen=True)
class TimedLoad:
    """Run `connections` (global connection numbers) from `start_ns` until `stop_ns`;
    operations that complete at or after `measure_ns` are measured."""

    host: str
    port: int
    scenario: Scenario
    connections: tuple[int, ...]
    start_ns: int
    measure_ns: int
    stop_ns: int
    others: tuple[tuple[str, int], ...] = ()  # more brokers on the same store (see `addresses`)


@dataclass(frozen=True)
class CountedLoad:
    """Each connection runs `warmup_ops` unmeasured operations, then `ops` measured
    ones (or, with `ops=None`, until its scenario's task budget is spent)."""

    host: str
    port: int
    scenario: Scenario
    connections: tuple[int, ...]
    ops: int | None
    warmup_ops: int = 0
    others: tuple[tuple[str, int], ...] = ()  # more brokers on the same store (see `addresses`)


@dataclass(frozen=True)
class WakeProbe:
    """Enqueue → lease reply of a worker already parked in a long-poll lease, `samples` times."""

    host: str
    port: int
    queue: str
    samples: int
    warmup: int = 20
    data_bytes: int = DATA_BYTES
    park_secs: float = 0.002  # sleep after sending the lease so it is parked when the enqueue lands


@dataclass(frozen=True)
class FsyncProbe:
    """Write 4 KiB and os.fsync it, `samples` times (or until `max_secs`), in `directory`:
    over a block of a file written beforehand (`append=False`), or at its end; `pause_secs`
    apart (an idle system's commit: a disk and CPUs that went quiet are slower to answer)."""

    directory: str
    samples: int
    append: bool = False
    max_secs: float = 20.0
    block_bytes: int = FSYNC_BLOCK_BYTES
    pause_secs: float = 0.0


@dataclass
class LoadResult:
    """What one load process measured. Latencies are nanoseconds, one per measured operation."""

    tasks: int = 0  # tasks finished by measured operations
    ops: int = 0  # measured operations that finished at least one task
    errors: int = 0
    empties: int = 0  # leases that found nothing
    first_error: str | None = None
    latencies_ns: array = field(default_factory=lambda: array("q"))
    first_start_ns: int = 0  # earliest start of a measured operation
    last_end_ns: int = 0  # latest end of a measured operation
    cpu_secs: float = 0.0  # user + system CPU of this process during the job
    wall_secs: float = 0.0

    def merge(self, other: LoadResult) -> None:
        self.tasks += other.tasks
        self.ops += other.ops
        self.errors += other.errors
        self.empties += other.empties
        self.first_error = self.first_error or other.first_error
        self.latencies_ns.extend(other.latencies_ns)
        starts = [t for t in (self.first_start_ns, other.first_start_ns) if t]
        self.first_start_ns = min(starts) if starts else 0
        self.last_end_ns = max(self.last_end_ns, other.last_end_ns)
        self.cpu_secs += other.cpu_secs
        self.wall_secs = max(self.wall_secs, other.wall_secs)

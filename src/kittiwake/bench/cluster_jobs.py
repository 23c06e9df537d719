"""The helper processes of `kittiwake bench cluster`: what each does with its `Client`.

Each job runs in a process of `processes.ProcessPool` (spawned, so the consumers and producers
share no GIL with the benchmark nor with each other) and talks to the brokers only through
`kittiwake.client.Client`, the path users take: `kw://host:port` for one broker, `kw://a,b,…`
for a cluster (`near=` names the node its leases ask first). Every job connects (a `ping`, which
fetches a cluster's map) before it is timed.

* `Fill`: FIFO tasks in `enqueue_many` batches (a cluster client deals each batch's tasks over the
  nodes round-robin, so the nodes end up even).
* `Drain`: from `start_ns` (the monotonic clock is shared by every process), lease up to `batch`
  tasks and dequeue them until a lease comes back empty; its requests (one per call on one broker;
  `routing_stats` on a cluster), its CPU and its window.
* `Pops`: one task per lease, dequeued by a second client, until `tasks` were popped: the leasing
  client's requests per node (Fabriq's hops are the requests a pop sends to nodes other than the
  consumer's own) and the router's own hops (steps beyond the first).
* `Pushes`: single enqueues, round-robin over several URLs (one broker, a cluster) so that every
  system sees the same disk and the same neighbours: each URL's round trips.
* `Produce`: `tasks` single FIFO enqueues.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from multiprocessing.sharedctypes import Synchronized
from typing import Any

from kittiwake.bench.processes import cpu_secs, serve_jobs

LEASE_SECS = 300.0  # a drain's leases outlive the drain: nothing is redelivered meanwhile
POPS_EMPTY_LIMIT = 1000  # empty leases a pop run tolerates (announcements catching up) before it gives up
POPS_TIMEOUT_SECS = 300.0


@dataclass(frozen=True)
class Fill:
    url: str
    queue: str
    tasks: int
    batch: int
    data_bytes: int


@dataclass(frozen=True)
class Drain:
    url: str
    near: str | None
    queue: str
    batch: int
    start_ns: int


@dataclass
class Drained:
    tasks: int = 0
    leases: int = 0  # lease calls, the last (empty) one included
    requests: int = 0  # requests sent to brokers by those calls and the dequeues
    first_ns: int = 0
    last_ns: int = 0
    cpu_secs: float = 0.0
    hops: int = 0  # the router's hops (cluster only)


@dataclass(frozen=True)
class Pops:
    url: str
    near: str
    queue: str
    tasks: int


@dataclass
class Popped:
    pops: int = 0
    empties: int = 0
    leases: int = 0
    lease_requests: int = 0  # every request of the lease calls (the local node's included)
    remote_requests: int = 0  # those sent to another node than `near`: Fabriq's hops
    router_hops: int = 0  # steps beyond the first (`routing_stats`)
    per_node: dict[str, int] = field(default_factory=dict)


PUSH_BLOCK = 50  # pushes timed on one system before the next system's block (`pushes`)


@dataclass(frozen=True)
class Pushes:
    systems: tuple[tuple[str, ...], ...]  # each system's URLs: its pushes go to them in turn
    queue: str
    samples: int
    warmup: int
    data_bytes: int


@dataclass(frozen=True)
class Produce:
    url: str
    queue: str
    tasks: int
    data_bytes: int
    start_ns: int


def _client(url: str, near: str | None = None) -> Any:
    from kittiwake.client import Client

    client = Client(url, near=near)
    client.ping()
    return client


def _wait_until(start_ns: int) -> None:
    delay = (start_ns - time.monotonic_ns()) / 1e9
    if delay > 0:
        time.sleep(delay)


def fill(job: Fill, counter: Synchronized[int]) -> int:
    from kittiwake.model import NewTask

    data = b"x" * job.data_bytes
    with _client(job.url) as client:
        done = 0
        while done < job.tasks:
            count = min(job.batch, job.tasks - done)
            client.enqueue_many([NewTask(job.queue, data) for _ in range(count)])
            done += count
            counter.value = done
    return done


def _requests(stats: Any) -> int:
    return sum(stats.requests.values())


def drain(job: Drain, counter: Synchronized[int]) -> Drained:
    with _client(job.url, job.near) as client:
        cluster = client.address.cluster
        before = client.routing_stats()
        _wait_until(job.start_ns)
        cpu_before = cpu_secs()
        result = Drained(first_ns=time.monotonic_ns())
        while True:
            tasks = client.lease(job.queue, max_tasks=job.batch, lease_secs=LEASE_SECS)
            result.leases += 1
            if not tasks:
                break
            client.dequeue(tasks)
            result.tasks += len(tasks)
            counter.value = result.tasks
        result.last_ns = time.monotonic_ns()
        result.cpu_secs = cpu_secs() - cpu_before
        if cluster:
            after = client.routing_stats()
            result.requests = _requests(after) - _requests(before)
            result.hops = sum(after.hops.values()) - sum(before.hops.values())
        else:
            result.requests = 2 * result.leases - 1  # a lease and a dequeue per batch, the empty lease alone
    return result


def pops(job: Pops, counter: Synchronized[int]) -> Popped:
    with _client(job.url, job.near) as leaser, _client(job.url) as acker:
        before = leaser.routing_stats()
        result = Popped()
        deadline = time.monotonic() + POPS_TIMEOUT_SECS
        while result.pops < job.tasks and result.empties < POPS_EMPTY_LIMIT and time.monotonic() < deadline:
            tasks = leaser.lease(job.queue, max_tasks=1, lease_secs=LEASE_SECS)
            result.leases += 1
            if not tasks:
                result.empties += 1
                continue
            acker.dequeue(tasks)
            result.pops += len(tasks)
            counter.value = result.pops
        after = leaser.routing_stats()
    per_node = {node: count - before.per_node.get(node, 0) for node, count in after.per_node.items()}
    result.per_node = {node: count for node, count in per_node.items() if count}
    result.lease_requests = after.requests.get("lease", 0) - before.requests.get("lease", 0)
    result.remote_requests = sum(count for node, count in result.per_node.items() if node != job.near)
    result.router_hops = after.hops.get("lease", 0) - before.hops.get("lease", 0)
    return result


def pushes(job: Pushes, counter: Synchronized[int]) -> list[list[int]]:
    """Single enqueues timed on each system in turn, a block of `PUSH_BLOCK` at a time: each system
    sees its pushes back to back as one client's would, and the blocks' alternation spreads any
    drift of the machine over both. (Alternating every push would time a broker hit every other
    push against nodes each hit every fourth: idle gaps of different lengths, which cost a process
    woken on a 2-core machine more than the cluster does.) A system of several URLs (plain brokers,
    say) gets its pushes in turn, one client per URL, as a cluster's FIFO spreader sends them.
    Samples (ns) by system, in `job.systems` order."""
    data = b"x" * job.data_bytes
    clients = [[_client(url) for url in urls] for urls in job.systems]
    samples: list[list[int]] = [[] for _ in job.systems]
    total = job.warmup + job.samples
    try:
        for start in range(0, total, PUSH_BLOCK):
            for system, taken in zip(clients, samples):
                for index in range(start, min(total, start + PUSH_BLOCK)):
                    client = system[index % len(system)]
                    started = time.perf_counter_ns()
                    client.enqueue(job.queue, data)
                    elapsed = time.perf_counter_ns() - started
                    if index >= job.warmup:
                        taken.append(elapsed)
            counter.value = max(0, min(total, start + PUSH_BLOCK) - job.warmup)
    finally:
        for system in clients:
            for client in system:
                client.close()
    return samples


def produce(job: Produce, counter: Synchronized[int]) -> int:
    data = b"x" * job.data_bytes
    with _client(job.url) as client:
        _wait_until(job.start_ns)
        for index in range(job.tasks):
            client.enqueue(job.queue, data)
            counter.value = index + 1
    return job.tasks


JOBS: dict[type, Any] = {Fill: fill, Drain: drain, Pops: pops, Pushes: pushes, Produce: produce}


def serve(pipe: Any, counter: Synchronized[int]) -> None:
    """A helper process: run each job the benchmark sends (`processes.serve_jobs`)."""
    serve_jobs(pipe, counter, lambda job: JOBS[type(job)](job, counter))

"""What runs inside a load process: closed-loop connections on raw pipelined frames.

A load process drives the broker the way TaskMaster §6 drove its node: many
clients, each one connection with one request in flight (closed loop), 1 KB of
data per task. Each client is a `ClosedLoop` over a `wire.RawConnection` that
hands it every reply from the connection's `data_received` callback, on uvloop
when it is installed: a reply writes the next request at once, with no task,
future or coroutine per request. That keeps the client's cost per request to a
few tens of microseconds, so two load processes on the machine's second core
can outrun one broker; the harness reports the clients' CPU next to the
broker's so a reader can check. A `Script` says what a client sends and what a
reply finished; replies are decoded only as far as it needs (`wire`).

A run stops either at a point in time (`TimedLoad`: warm up, then count what
completes inside the window) or after a number of operations (`CountedLoad`:
for probes and for filling queues). Every clock reading is
`time.monotonic_ns()`, which is one clock for every process on the machine, so
the parent can set the window for all processes at once.

Jobs and results are the plain picklable dataclasses of `jobs`: the parent
(`harness`) sends a job over a pipe, the process answers with a `LoadResult`.
Sequential probes (long-poll wake-up, fsync) live in `probes`.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from multiprocessing.connection import Connection as Pipe
from multiprocessing.sharedctypes import Synchronized
from typing import Any

from kittiwake.bench.jobs import CountedLoad, FsyncProbe, LoadResult, Scenario, TimedLoad, WakeProbe, addresses
from kittiwake.bench.probes import run_fsync_probe, run_wake_probe
from kittiwake.bench.processes import cpu_secs, serve_jobs
from kittiwake.bench.wire import (
    ErrorBody,
    LeasedRef,
    RawConnection,
    decode_items,
    decode_lease,
    decode_status,
    error_text,
    open_connection,
)

# An operation that finished nothing (an empty lease, an error reply) waits this
# long before the next request, so a drained queue does not turn into a spin.
IDLE_PAUSE_SECS = 0.001
# A counted run gives up on a connection after this many operations in a row
# finished nothing (its queue is empty and nobody refills it): about 2 s.
MAX_IDLE_OPS_IN_A_ROW = 2000
# How often a load process publishes its running task count for progress bars.
PROGRESS_EVERY_SECS = 0.1
# A connection that still waits for its last reply this long after the end of
# its run is given up (counted as an error).
DRAIN_TIMEOUT_SECS = 60.0

# --------------------------------------------------------------- scripts


class Script:
    """One connection's closed loop: the next request, and what a reply finished.

    `request` returns the next request's op and fields. `on_reply` returns the
    number of tasks the operation finished (0 for an empty lease or an error),
    or None when the operation needs another round trip (a lease that now has
    to be dequeued).
    """

    exhausted = False  # no more requests to send (task budget spent)

    def __init__(self) -> None:
        self.errors = 0
        self.empties = 0
        self.first_error: str | None = None

    def request(self) -> tuple[str, dict[str, Any]]:
        raise NotImplementedError

    def on_reply(self, body: bytes) -> int | None:
        raise NotImplementedError

    def fail(self, text: str) -> int:
        """Count an error (the first one's text goes into the report); no task finished."""
        self.errors += 1
        if self.first_error is None:
            self.first_error = text
        return 0

    def _refused(self, what: str, error: ErrorBody | None) -> int:
        if error is None:
            return self.fail(f"{what}: error reply without an error body")
        return self.fail(error_text(what, error.code, error.message))


class EnqueueScript(Script):
    """Enqueue `batch` tasks per request: random 64-bit hex pids, or FIFO (no pid)."""

    def __init__(self, queues: list[str], data: bytes, batch: int, explicit_pid: bool,
                 rng: random.Random, budget_tasks: int | None) -> None:
        super().__init__()
        self.queues = queues
        self.data = data
        self.batch = batch
        self.explicit_pid = explicit_pid
        self.rng = rng
        self.budget = budget_tasks
        self.cursor = 0  # next queue, for spreading over many queues
        self.in_flight = 0
        # On one queue every request carries the same task maps (a request is encoded as it is
        # sent), only their pids drawn anew: no maps built per request.
        if explicit_pid or len(queues) == 1:
            self._tasks: list[dict[str, Any]] | None = [{"queue": queues[0], "data": data} for _ in range(batch)]
            self._fields = {"tasks": self._tasks}
        else:
            self._tasks = None

    def request(self) -> tuple[str, dict[str, Any]]:
        count = self.batch if self.budget is None else min(self.batch, self.budget)
        if self.budget is not None:
            self.budget -= count
            self.exhausted = self.budget <= 0
        self.in_flight = count
        tasks = self._tasks
        if tasks is not None:
            if self.explicit_pid:
                bits = self.rng.getrandbits
                for task in tasks:
                    task["pid"] = f"{bits(64):016x}"
            return "enqueue", self._fields if count == self.batch else {"tasks": tasks[:count]}
        queues = self.queues
        start = self.cursor
        data = self.data
        spread = [{"queue": queues[(start + i) % len(queues)], "data": data} for i in range(count)]
        self.cursor = (start + count) % len(queues)
        return "enqueue", {"tasks": spread}

    def on_reply(self, body: bytes) -> int | None:
        reply = decode_status(body)
        if not reply.ok:
            return self._refused("enqueue", reply.error)
        return self.in_flight


class LeaseDequeueScript(Script):
    """Lease up to `batch` tasks of one queue, then dequeue them: two requests per operation."""

    def __init__(self, queue: str, batch: int, lease_secs: float, worker: str) -> None:
        super().__init__()
        self.lease_fields = {"queues": [queue], "max_tasks": batch, "lease_secs": lease_secs, "worker": worker}
        self.leased: list[LeasedRef] | None = None

    def request(self) -> tuple[str, dict[str, Any]]:
        if self.leased is None:
            return "lease", self.lease_fields
        return "dequeue", {"leases": self.leased}

    def on_reply(self, body: bytes) -> int | None:
        if self.leased is None:
            reply = decode_lease(body)
            if not reply.ok:
                return self._refused("lease", reply.error)
            if not reply.result:
                self.empties += 1
                return 0
            self.leased = reply.result
            return None
        items = decode_items(body)
        self.leased = None
        if not items.ok:
            return self._refused("dequeue", items.error)
        done = 0
        for item in items.result or ():
            if item.ok:
                done += 1
            else:
                self.fail(error_text("dequeue item", item.code or "INTERNAL", item.message or ""))
        return done


class QueryScript(Script):
    """The same read-only request again and again (list_queues, stats)."""

    def __init__(self, op: str, fields: dict[str, Any]) -> None:
        super().__init__()
        self.op = op
        self.fields = fields

    def request(self) -> tuple[str, dict[str, Any]]:
        return self.op, self.fields

    def on_reply(self, body: bytes) -> int | None:
        reply = decode_status(body)
        if not reply.ok:
            return self._refused(self.op, reply.error)
        return 1


def make_script(scenario: Scenario, connection: int, data: bytes) -> Script:
    queues = list(scenario.queues)
    own = [queues[connection % len(queues)]] if queues else []
    kind = scenario.kind
    rng = random.Random(connection * 7919 + os.getpid())
    if kind == "enqueue":
        return EnqueueScript(own, data, scenario.batch, True, rng, scenario.budget_tasks)
    if kind == "fifo_enqueue":
        return EnqueueScript(own, data, scenario.batch, False, rng, scenario.budget_tasks)
    if kind == "spread_enqueue":
        script = EnqueueScript(queues, data, scenario.batch, False, rng, scenario.budget_tasks)
        # each connection deals its share from its own place in the ring, so the
        # queues fill evenly instead of every connection starting at the first
        script.cursor = (connection * (scenario.budget_tasks or 0)) % len(queues)
        return script
    if kind == "lease_dequeue":
        return LeaseDequeueScript(own[0], scenario.batch, scenario.lease_secs, f"bench-{connection}")
    if kind == "list_queues":
        return QueryScript("list_queues", {"pattern": scenario.pattern, "limit": 100_000})
    if kind == "stats":
        return QueryScript("stats", {"queues": queues[:1], "sample": 10})
    raise ValueError(f"unknown scenario kind {kind!r}")


# ----------------------------------------------------------- closed loops


class Tally:
    """What the connections of one process measured so far."""

    def __init__(self) -> None:
        self.result = LoadResult()
        self.finished_tasks = 0  # every task finished, measured or not (for progress)


class ClosedLoop:
    """One client: one connection, one request in flight, driven from the connection's callbacks."""

    def __init__(self, script: Script, tally: Tally, *, measure_ns: int, stop_ns: int,
                 warmup_ops: int, ops: int | None) -> None:
        self.script = script
        self.tally = tally
        self.measure_ns = measure_ns
        self.stop_ns = stop_ns
        self.warmup_ops = warmup_ops
        self.ops = ops
        self.completed = 0  # operations finished, measured or not
        self.idle_in_a_row = 0  # operations in a row that finished nothing
        self.measured = 0
        self.connection: RawConnection | None = None
        self.op_start_ns = 0
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.closing = False

    async def connect(self, host: str, port: int) -> None:
        self.connection = await open_connection(host, port, self.receive, self.lost)

    def start(self) -> None:
        self.send()

    def send(self) -> None:
        now = time.monotonic_ns()
        script = self.script
        if now >= self.stop_ns or script.exhausted or (self.ops is not None and self.measured >= self.ops):
            self.finish()
            return
        self.op_start_ns = now
        op, fields = script.request()
        assert self.connection is not None
        self.connection.send(op, fields)

    def receive(self, body: bytes) -> None:
        tasks = self.script.on_reply(body)
        if tasks is None:  # the operation's next round trip
            op, fields = self.script.request()
            assert self.connection is not None
            self.connection.send(op, fields)
            return
        now = time.monotonic_ns()
        self.completed += 1
        self.tally.finished_tasks += tasks
        if tasks and now >= self.measure_ns and self.completed > self.warmup_ops:
            result = self.tally.result
            result.latencies_ns.append(now - self.op_start_ns)
            result.tasks += tasks
            result.ops += 1
            if not result.first_start_ns or self.op_start_ns < result.first_start_ns:
                result.first_start_ns = self.op_start_ns
            if now > result.last_end_ns:
                result.last_end_ns = now
            self.measured += 1
        if tasks:
            self.idle_in_a_row = 0
            self.send()
            return
        self.idle_in_a_row += 1
        if self.ops is not None and self.idle_in_a_row >= MAX_IDLE_OPS_IN_A_ROW:
            self.script.fail(f"gave up after {self.idle_in_a_row} operations in a row finished nothing (queue empty?)")
            self.finish()
            return
        asyncio.get_running_loop().call_later(IDLE_PAUSE_SECS, self.send)

    def finish(self) -> None:
        if self.closing:
            return
        self.closing = True
        script = self.script
        result = self.tally.result
        result.errors += script.errors
        result.empties += script.empties
        result.first_error = result.first_error or script.first_error
        if self.connection is not None:
            self.connection.close()
        if not self.done.done():
            self.done.set_result(None)

    def lost(self, exc: Exception | None) -> None:
        if not self.closing:
            self.script.fail(f"connection lost: {exc or 'closed by broker'}")
            self.finish()


async def _publish_progress(tally: Tally, counter: Synchronized) -> None:
    while True:
        counter.value = tally.finished_tasks
        await asyncio.sleep(PROGRESS_EVERY_SECS)


async def run_load(job: TimedLoad | CountedLoad, counter: Synchronized) -> LoadResult:
    """Open every connection, run the closed loops, return what was measured."""
    data = os.urandom(job.scenario.data_bytes)
    tally = Tally()
    clients: list[ClosedLoop] = []
    brokers = addresses(job)
    for number in job.connections:
        script = make_script(job.scenario, number, data)
        if isinstance(job, TimedLoad):
            client = ClosedLoop(script, tally, measure_ns=job.measure_ns, stop_ns=job.stop_ns, warmup_ops=0, ops=None)
        else:
            client = ClosedLoop(script, tally, measure_ns=0, stop_ns=2**63 - 1, warmup_ops=job.warmup_ops, ops=job.ops)
        await client.connect(*brokers[number % len(brokers)])
        clients.append(client)
    if isinstance(job, TimedLoad):
        await asyncio.sleep(max(0.0, (job.start_ns - time.monotonic_ns()) / 1e9))
    publisher = asyncio.ensure_future(_publish_progress(tally, counter))
    cpu_before = cpu_secs()
    wall_before = time.monotonic()
    for client in clients:
        client.start()
    pending = [client.done for client in clients]
    if isinstance(job, TimedLoad):
        deadline = max(0.0, (job.stop_ns - time.monotonic_ns()) / 1e9) + DRAIN_TIMEOUT_SECS
        await asyncio.wait(pending, timeout=deadline)
    else:
        await asyncio.wait(pending)
    for client in clients:
        if not client.done.done():
            client.script.fail("no reply before the drain timeout")
            client.finish()
    result = tally.result
    result.cpu_secs = cpu_secs() - cpu_before
    result.wall_secs = time.monotonic() - wall_before
    publisher.cancel()
    counter.value = tally.finished_tasks
    return result


# ---------------------------------------------------------- process main


def serve(pipe: Pipe, counter: Synchronized) -> None:
    """A load process: run each job the parent sends, answer ("ok", result) or ("error", text)."""

    def run(job: Any) -> Any:
        if isinstance(job, FsyncProbe):
            return run_fsync_probe(job, counter)
        if isinstance(job, WakeProbe):
            return asyncio.run(run_wake_probe(job, counter))
        return asyncio.run(run_load(job, counter))

    serve_jobs(pipe, counter, run)

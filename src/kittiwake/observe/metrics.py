"""`GET /metrics`: the broker in Prometheus' text format, for Prometheus and its kin to scrape.

Families (every name starts `kittiwake_`; counters end `_total`, times are
in seconds and say so; no label holds a task's pid):

* `kittiwake_queue_tasks{queue, state}` (gauge) — tasks in a queue now, by
  state: `available` (may be leased), `leased`, `blocked` (waiting for
  parents) and `dead` (in its dead-letter queue `<queue>.dead`). The largest
  queues (tasks of every state) get series of their own, up to
  `--metrics-queue-series`; the rest are added up in `queue="other"`.
* `kittiwake_queues` (gauge) — queues holding at least one task (a
  dead-letter queue is its queue's `dead` state, not a queue of its own).
* `kittiwake_tasks_enqueued_total{queue}` — new tasks (not enqueues that
  collapsed onto a task that exists; a dead letter requeued is one).
* `kittiwake_tasks_leased_total{queue}` — leases granted.
* `kittiwake_tasks_dequeued_total{queue}` — tasks finished.
* `kittiwake_tasks_released_total{queue}` — tasks handed back by their worker.
* `kittiwake_tasks_dead_lettered_total{queue}` — tasks moved to the dead
  letters (last attempt failed, cancelled, a parent failed), counted on
  their own queue.
* `kittiwake_tasks_expired_total{queue}` — leases that ran out.
* `kittiwake_task_wait_seconds{queue}` (histogram) — from enqueue to the
  task's first lease (buckets from 1 ms to an hour).
* `kittiwake_task_run_seconds{queue}` (histogram) — from lease to dequeue
  (a dequeue after the lease ran out and was taken back is not timed). A
  queue's histograms appear with their first observation.
* `kittiwake_store_commit_seconds` (histogram) — how long each group commit
  that wrote something took to make its batch durable.
* `kittiwake_workers{state}` (gauge) — worker processes in the registry
  (`_workers`): `busy` (running or holding tasks), `idle`, `stopping`, and
  `lost` (its record's lease ran out: it stopped renewing).
* `kittiwake_connections{transport}` (gauge) — open connections: `tcp`
  (kw:// and kws://) and `http` (this port and the SQS API's).
* `kittiwake_build_info{version, python, store}` (gauge, always 1).

A broker that is a cluster node (`kittiwake broker --cluster FILE --node NAME`)
adds `node="NAME"` to every series (`faces.Host.labels`), so the series of
several nodes scraped into one Prometheus stay apart.

The counters and histograms count what committed passes did since the
broker started (`observations`): a series per queue for the first
`--metrics-queue-series` queues to be active, the rest in `queue="other"`; a
queue idle and empty for 10 minutes gives its series up. Every series only
goes up. Sizes and workers are read from the engine at each scrape, in time
linear in the number of queues (while the store fails and the broker has no
engine, they are left out).

With an auth file, a scrape needs a user's credentials (HTTP basic auth:
`user:token`, or a dashboard session), and shows the queues the user has
admin on; the others are added up in `other`, with the workers only if the
user has admin on `_workers`.
"""

from __future__ import annotations

import heapq
import json
import platform
import time
from typing import TYPE_CHECKING, Callable, Iterator

from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import CollectorRegistry

import kittiwake
from kittiwake import errors
from kittiwake.broker.access import Permission, Principal
from kittiwake.broker.http_server import HttpRequest, HttpResponse
from kittiwake.constants import WORKERS_QUEUE
from kittiwake.engine.queue_state import QueueState
from kittiwake.engine.tally import MOVES
from kittiwake.model import DEAD_SUFFIX
from kittiwake.observe.observations import OTHER, Histogram, Observations, Series

if TYPE_CHECKING:
    from kittiwake.observe.registrar import Registrar

STATES = ("available", "leased", "blocked", "dead")
WORKER_STATES = ("busy", "idle", "stopping", "lost")
MAX_WORKER_RECORDS = 10_000  # records read per scrape
Visible = Callable[[str], bool] | None  # None: every queue


# ------------------------------------------------------------------ queue sizes


def queue_sizes(
    queues: dict[str, QueueState], top: int, visible: Visible = None
) -> tuple[list[tuple[str, list[int]]], list[int], int]:
    """The `top` largest queues' tasks per state (`STATES`), largest first (equal sizes in the
    queues' order), everything else added up, and the number of queues holding a task.

    A row is a queue with its dead letters: a dead-letter queue `<q>.dead` is the `dead` state of
    `<q>`, whether `<q>` holds tasks or not. A queue the viewer may not see (`visible`), or named
    `other`, is added up with the rest, and so are the dead letters of `<q>` when the viewer may
    not see `<q>.dead` (a right on `<q>` does not cover it). One pass over the queues keeping the largest in a heap of
    `top` (as `heapq.nlargest`, inline: a scrape of 100K queues makes no object per queue, so it
    neither calls a key function 100K times nor wakes the garbage collector)."""
    dead_of: dict[str, int] = {}  # queue → tasks in its dead-letter queue
    for name, queue in queues.items():
        if queue.size > 0 and name.endswith(DEAD_SUFFIX):
            dead_of[name[: -len(DEAD_SUFFIX)]] = queue.size
    hidden_dead = 0  # of dead-letter queues the viewer may not see, whether it may see their queues or not
    if visible is not None:
        for name in [name for name in dead_of if not visible(name + DEAD_SUFFIX)]:
            hidden_dead += dead_of.pop(name)
    folding = visible is not None or OTHER in queues or OTHER in dead_of
    heap: list[tuple[int, int, str]] = []  # (tasks, -place, queue): the smallest of the largest first
    totals = [0, 0, 0, 0]  # every row's states: available, leased, blocked, dead
    rest = [0, 0, 0, 0]  # the rows folded into `other`
    count = 0

    def row(name: str, tasks: int, states: list[int]) -> None:
        nonlocal count
        count += 1
        if folding and (name == OTHER or (visible is not None and not visible(name))):
            _add(rest, states)
            return
        _add(totals, states)
        entry = (tasks, -count, name)
        if len(heap) < top:
            heapq.heappush(heap, entry)
        elif top and entry > heap[0]:
            heapq.heapreplace(heap, entry)

    for name, queue in queues.items():
        if name.endswith(DEAD_SUFFIX):
            continue  # its size is its queue's `dead`
        size = queue.size
        dead = dead_of.get(name, 0) if dead_of else 0
        if size <= 0 and not dead:
            continue
        if heap and len(heap) == top and size + dead <= heap[0][0] and not folding:
            count += 1  # not among the largest: only the totals (the common case, kept short)
            leased = len(queue.leased)
            totals[0] += size - leased - queue.blocked
            totals[1] += leased
            totals[2] += queue.blocked
            totals[3] += dead
            continue
        row(name, size + dead, _states(queue, dead))
    for name, dead in dead_of.items():
        if name not in queues or name.endswith(DEAD_SUFFIX):  # only its dead letters speak for it
            row(name, dead, [0, 0, 0, dead])
    shown: list[tuple[str, list[int]]] = []
    for _, _, name in sorted(heap, reverse=True):
        states = _states(None if name.endswith(DEAD_SUFFIX) else queues.get(name), dead_of.get(name, 0))
        shown.append((name, states))
        _add(totals, [-n for n in states])  # what is left of the totals is the rest
    _add(rest, totals)
    rest[3] += hidden_dead
    return shown, rest, count


def _states(queue: QueueState | None, dead: int) -> list[int]:
    """A row's tasks per state (available, leased, blocked, dead): a queue's, and its dead letters."""
    if queue is None:
        return [0, 0, 0, dead]
    leased = len(queue.leased)
    return [queue.size - leased - queue.blocked, leased, queue.blocked, dead]


def _add(totals: list[int], counts: list[int]) -> None:
    for index, count in enumerate(counts):
        totals[index] += count


# ------------------------------------------------------------------ workers


def worker_states(registry: QueueState | None, now: float) -> dict[str, int]:
    """Worker processes by state, from their records in the registry queue (`kittiwake.worker.registry`):
    a record held under a lease is a live worker, its note says what it does; a record whose lease
    ran out (swept back to available, or not swept yet) is a worker that stopped renewing."""
    states = dict.fromkeys(WORKER_STATES, 0)
    if registry is None:
        return states
    states["lost"] = max(registry.size - len(registry.leased) - registry.blocked, 0)
    for index, record in enumerate(registry.leased.values()):
        if index >= MAX_WORKER_RECORDS:
            break
        if record.lease_expires_at is not None and record.lease_expires_at <= now:
            states["lost"] += 1
            continue
        try:
            status = json.loads(record.note) if record.note else {}
        except ValueError:
            status = {}
        if not isinstance(status, dict):
            status = {}
        if status.get("stopping"):
            states["stopping"] += 1
        elif status.get("running") or status.get("held"):
            states["busy"] += 1
        else:
            states["idle"] += 1
    return states


# ------------------------------------------------------------------ the collector


def _histogram(family: HistogramMetricFamily, labels: list[str], histogram: Histogram) -> None:
    family.add_metric(labels, histogram.cumulative(), histogram.sum)


class BrokerMetrics:
    """The broker's families as a prometheus_client collector, on a registry of its own."""

    def __init__(self, observer: Registrar, observations: Observations) -> None:
        self.observer = observer
        self.host = observer.host
        self.observations = observations
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self)
        self._visible: Visible = None  # the scrape under way's viewer: set and cleared around it
        self.wall_clock: Callable[[], float] = time.time

    async def handle(self, request: HttpRequest) -> HttpResponse:
        """`GET /metrics`."""
        if request.method != "GET":
            return HttpResponse(405, b"/metrics takes GET\n", headers=[("allow", "GET")])
        try:
            principal = await self.observer.auth.principal(request)
        except errors.Unauthorized as error:
            return HttpResponse(401, (error.message + "\n").encode(),
                                headers=[("www-authenticate", 'Basic realm="kittiwake", charset="UTF-8"')])
        body, content_type = self.render(principal, request.headers.get("accept", ""))
        return HttpResponse(200, body, content_type, [("cache-control", "no-store")])

    def render(self, principal: Principal | None, accept: str = "") -> tuple[bytes, str]:
        """The exposition for this viewer, in the format `accept` asks for (text, or OpenMetrics)."""
        encoder, content_type = choose_encoder(accept)
        if principal is None or principal.unrestricted:
            self._visible = None
        else:
            self._visible = lambda queue: principal.may(Permission.ADMIN, queue)
        try:
            return encoder(self.registry), content_type
        finally:
            self._visible = None

    def collect(self) -> Iterator[Metric]:
        """Every family, each series with the broker's constant labels first (a cluster node's `node`)."""
        constant = dict(self.host.labels)
        for metric in self._families():
            if constant:
                metric.samples = [sample._replace(labels={**constant, **sample.labels}) for sample in metric.samples]
            yield metric

    def _families(self) -> Iterator[Metric]:
        visible = self._visible
        engine = self.host.reads()
        top = self.observations.max_queue_series
        if engine is not None:
            queues = engine.state.queues
            yield from self._sizes(queues, top, visible)
            if visible is None or visible(WORKERS_QUEUE):
                yield self._workers(queues.get(WORKERS_QUEUE))
        yield from self._moves(visible)
        commit = HistogramMetricFamily(
            "kittiwake_store_commit_seconds", "Time each group commit that wrote something took to make it durable."
        )
        _histogram(commit, [], self.observations.commit)
        yield commit
        yield self._connections()
        info = GaugeMetricFamily("kittiwake_build_info", "The broker's version, Python and store.",
                                 labels=["version", "python", "store"])
        info.add_metric([kittiwake.__version__, platform.python_version(), self.host.store_kind], 1)
        yield info

    def _sizes(self, queues: dict[str, QueueState], top: int, visible: Visible) -> Iterator[Metric]:
        rows, rest, count = queue_sizes(queues, top, visible)
        tasks = GaugeMetricFamily(
            "kittiwake_queue_tasks",
            "Tasks in a queue by state (dead: in its dead-letter queue); the largest queues, the rest in queue=other.",
            labels=["queue", "state"],
        )
        for name, sizes in rows:
            for state, size in zip(STATES, sizes):
                tasks.add_metric([name, state], size)
        for state, size in zip(STATES, rest):
            tasks.add_metric([OTHER, state], size)
        yield tasks
        yield GaugeMetricFamily("kittiwake_queues", "Queues holding at least one task.", value=count)

    def _workers(self, registry: QueueState | None) -> Metric:
        family = GaugeMetricFamily(
            "kittiwake_workers", "Worker processes in the registry by state (lost: stopped renewing its record).",
            labels=["state"],
        )
        for state, count in worker_states(registry, self.wall_clock()).items():
            family.add_metric([state], count)
        return family

    def _moves(self, visible: Visible) -> Iterator[Metric]:
        observations = self.observations
        shown: dict[str, Series]
        if visible is None:
            shown, other = observations.series, observations.other
        else:
            shown, other = observations.fold(visible)
        labelled = [*sorted(shown.items()), (OTHER, other)]
        for index, move in enumerate(MOVES):
            family = CounterMetricFamily(f"kittiwake_tasks_{move}", _MOVE_HELP[move], labels=["queue"])
            for name, series in labelled:
                family.add_metric([name], series.counts[index])
            yield family
        wait = HistogramMetricFamily("kittiwake_task_wait_seconds", "Time from enqueue to a task's first lease.",
                                     labels=["queue"])
        run = HistogramMetricFamily("kittiwake_task_run_seconds", "Time from lease to dequeue.", labels=["queue"])
        for name, series in labelled:  # a queue's appear with its first observation (other's always)
            if series.wait.count or name == OTHER:
                _histogram(wait, [name], series.wait)
            if series.run.count or name == OTHER:
                _histogram(run, [name], series.run)
        yield wait
        yield run

    def _connections(self) -> Metric:
        counts = self.host.connection_counts()
        family = GaugeMetricFamily("kittiwake_connections", "Open connections by transport.", labels=["transport"])
        family.add_metric(["tcp"], counts.get("tcp", 0))
        family.add_metric(["http"], sum(counts.get(name, 0) for name in HTTP_FACES))
        return family


HTTP_FACES = ("http", "sqs")  # the faces whose connections are HTTP ones

_MOVE_HELP: dict[str, str] = {
    "enqueued": "New tasks (a dead letter requeued is one; an enqueue that collapsed is not).",
    "leased": "Leases granted.",
    "dequeued": "Tasks finished (dequeued).",
    "released": "Tasks handed back by their worker.",
    "dead_lettered": "Tasks moved to the dead letters, counted on their own queue.",
    "expired": "Leases that ran out.",
}


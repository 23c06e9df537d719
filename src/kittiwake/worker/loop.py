"""One worker process: lease tasks in batches, run them on slots, finish them — CloudKon's pull loop.

Threads of a worker process and what each owns:

* leasers (one per lease class: the queues sharing a lease length and rate
  limit): long-poll `lease` for up to the free capacity (`concurrency` running
  + the prefetch waiting: sized from observed run times unless `--prefetch`
  fixes it, see `prefetch`), once half the prefetch is free so that leases
  come in bundles, and, every `delayed_poll_secs`, lease the due tasks
  of the ``.delayed`` queues with ``max_pid = pid_at(now)`` (a delayed task is
  leased and run straight from there once due). A rate-limited queue is
  leased with ``rate_per_sec``: the broker's token bucket spans every worker.
* slots (`concurrency` threads): run one task at a time (`TaskRunner`),
  free its unit of capacity and pass the outcome to the settler — except a gang task that did not assemble,
  which is parked: it keeps its lease and takes a slot again after a pause. While a gang is parked
  here, the leasers take no new gang tasks (`gang_leader_queues`; other queues as usual): the
  process lends its free slot to other gangs' joins instead of leading yet another gang, so that
  more gang tasks than slots do not end with every slot a leader waiting for members.
* settler: takes every outcome waiting and applies them together
  (`Settler`: one update per consistency group for finished tasks, results
  included); outcomes that end while an update is on its way ride the next.
* heartbeat (`LeaseKeeper`): renews held leases, carries progress.
* registry (`WorkerRegistry`): this process's record in ``_workers``.

Stopping. `stop()` (SIGTERM) stops leasing; tasks leased but not started are
handed back at once (RETURN); running tasks get `shutdown_secs` to finish,
and those still running then are released for another worker (an
at-most-once one will be dead-lettered as WORKER_LOST there, since it did
start). `recycle()` (`max_tasks_per_child`, `max_memory_mb`) stops leasing
too but runs every task already leased before exiting: recycling loses
nothing and hands nothing back. `run()` returns once nothing is held.

A stop does not wait for a broker that has gone away: from `stop()` on, a
`BrokerWatch` (`stopping`) asks whether the broker is there; the first time
it is not, the loop gives up on it (`_give_up_on_broker`): it closes the
client — every call waiting to reconnect ends at once — and finishes the stop
without waiting for running tasks, whose outcomes could not be posted. What
the process held comes back to its queues when the leases run out.

On a cluster (`--url kw://a,b,c`) the client's leases ask `--near` NODE first (`config.near`;
default: the client's, a node on this host), then a node known to hold tasks; where each
lease's tasks came from is tallied (`lease_origins`) into the registry record and the exit log.

Each task held is also told to the supervisor (`ledger`, when the process was
started with one): the tasks it leases and settles, and which one each slot
runs, so that a process that dies has its tasks handed back at once (`lost`).
"""

from __future__ import annotations

import json
import logging
import os
import queue
import random
import socket
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any, Callable

from kittiwake import errors
from kittiwake.app.definitions import TaskDefinition
from kittiwake.app.envelope import (
    delayed_queue_of,
    gang_queue_of,
    marker_pid_of_tick_pid,
    tick_epoch_secs,
    ticks_done_queue_of,
    undelayed_queue_of,
)
from kittiwake.app.locality import base_queue_of, local_queue_of, remote_queue_pattern
from kittiwake.client import Client, LeasedTask
from kittiwake.client.interfaces import QueueClient
from kittiwake.constants import DEFAULT_LEASE_SECS, DELAYED_SUFFIX, GANG_SUFFIX, NODE_SEPARATOR, REPLIES_PREFIX
from kittiwake.model import pid_at
from kittiwake.worker.capacity import Capacity
from kittiwake.worker.config import WorkerConfig
from kittiwake.worker.heartbeat import Held, LeaseKeeper
from kittiwake.worker.lease_origins import LeaseOrigins
from kittiwake.worker.ledger import LedgerWriter
from kittiwake.worker.outcomes import Kind, Outcome, Settler
from kittiwake.worker.prefetch import SLOW_SECS, Prefetch
from kittiwake.worker.registry import WorkerRegistry
from kittiwake.worker.runner import TaskRunner
from kittiwake.worker.stopping import BrokerWatch

log = logging.getLogger("kittiwake.worker")

MARKER_RETENTION_SECS = 3600.0  # a tick's marker outlives any scheduler's lateness (beat.TICK_GRACE_SECS)
MARKER_MAX_ATTEMPTS = 1_000_000
MARKERS_PRUNED_PER_RUN = 100
# a periodic run may start this long before its tick by this worker's clock (the scheduler's clock
# runs ahead) and still leave its marker; a run of a later tick leaves none (`WorkerLoop._mark_tick`)
TICK_SKEW_SECS = 60.0
JOIN_SLICE_SECS = 0.1  # stopping: how often a wait for a running task looks whether the broker is gone


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


@dataclass(slots=True)
class LeaseClass:
    """Queues leased together: one lease length, one rate limit."""

    lease_secs: float
    rate_per_sec: float | None
    queues: list[str]

    @property
    def delayed_queues(self) -> list[str]:
        return [delayed_queue_of(name) for name in self.queues]


def gang_leader_queues(queues: list[str]) -> frozenset[str]:
    """The served queues whose gang tasks this process would lead: those served with their join
    queue ``<queue>.gang`` (a process serving only joins leads nothing)."""
    served = set(queues)
    return frozenset(name for name in queues if gang_queue_of(name) in served)


def lease_classes(app: Any, queues: list[str]) -> list[LeaseClass]:
    """Group served queues by (lease length, rate): the longest lease and the lowest rate of the
    task definitions on each queue (a queue without definitions: the defaults; a gang's join
    queue ``<queue>.gang`` and a local queue ``<queue>@<node>``: its queue's; a queue of join
    jobs: its handler's lease)."""
    per_queue: dict[str, tuple[float, float | None]] = {}
    handlers = getattr(app, "join_handlers", {})
    for name in queues:
        base = base_queue_of(name)
        if base in handlers:
            per_queue[name] = (handlers[base].lease_secs, None)
            continue
        definitions: list[TaskDefinition] = [
            d for d in app.tasks.values() if d.queue == base or (d.options.needs > 1 and gang_queue_of(d.queue) == base)
        ]
        lease_secs = max((d.options.lease_secs for d in definitions), default=DEFAULT_LEASE_SECS)
        rates = [d.options.rate_per_sec for d in definitions if d.options.rate_per_sec is not None]
        per_queue[name] = (lease_secs, min(rates) if rates else None)
    classes: dict[tuple[float, float | None], LeaseClass] = {}
    for name, key in per_queue.items():
        classes.setdefault(key, LeaseClass(key[0], key[1], [])).queues.append(name)
    return list(classes.values())


def default_worker_id(name: str | None = None) -> str:
    return f"{name or socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


class WorkerLoop:
    """The pull loop of one worker process; see the module docstring.

    Its clocks are passed in, like the settler's and the heartbeat's: `clock`
    (seconds, monotonic) times runs, renewals, polls and pauses, and is shared
    with the heartbeat, the settler and the runner; `wall_clock` (epoch
    seconds) says which delayed tasks are due and which tick markers are old,
    so it must agree with the submitters' clocks.
    """

    def __init__(
        self,
        app: Any,
        config: WorkerConfig,
        *,
        client: QueueClient | None = None,
        worker_id: str | None = None,
        app_reference: str | None = None,
        rng: random.Random | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        ledger: LedgerWriter | None = None,
    ) -> None:
        self.app = app
        self.clock = clock
        self.wall_clock = wall_clock
        self.config = config
        self.id = worker_id or default_worker_id(config.name)
        self.client: QueueClient = client or Client(config.url or app.url, worker=self.id, near=config.near)
        if app.url is None and config.url is not None:
            app.url = config.url  # tasks that submit tasks reach the same broker
        if config.near is not None and getattr(app, "near", "") is None:
            app.near = config.near  # and their leases (a handle's result) ask the same node first
        self.origins = LeaseOrigins()
        self.queues = list(config.queues or app.queues())
        if config.node is not None:  # data locality: this node's local queues too, served with the shared ones
            os.environ["KITTIWAKE_NODE"] = config.node
            self.queues += [local_queue_of(name, config.node) for name in self.queues if NODE_SEPARATOR not in name]
        self.classes = lease_classes(app, self.queues)
        self.leader_queues = gang_leader_queues(self.queues)
        self._parked = 0  # gangs parked in this process (see `_park`)
        self._parked_lock = threading.Lock()
        self.prefetch = Prefetch(config.concurrency, config.prefetch)
        self.capacity = Capacity(self.prefetch.total(), clock)
        self.ledger = ledger
        self.keeper = LeaseKeeper(self.client, clock, ledger=ledger)
        self.settler = Settler(self.client, clock, getattr(app, "reply_prefix", REPLIES_PREFIX))
        self.runner = TaskRunner(
            app, self.client, self.keeper, app_reference=app_reference or config.app,
            sys_path=config.sys_path, rng=rng, worker_id=self.id, clock=clock,
        )
        self.registry = WorkerRegistry(self.client, self.id, config.registry_every_secs, config.registry_queue)
        self._ready: queue.SimpleQueue[Held | None] = queue.SimpleQueue()
        self._outcomes: queue.SimpleQueue[Outcome | None] = queue.SimpleQueue()
        self._stop_leasing = threading.Event()
        self._returning = threading.Event()  # hand back unstarted tasks instead of running them
        self._broker_gone = threading.Event()  # stopping without the broker (`_give_up_on_broker`)
        self._watch = BrokerWatch(self.client.address, self._returning, self._give_up_on_broker)
        self._threads: list[threading.Thread] = []
        self.started = 0
        self.leased = 0
        self._budget_lock = threading.Lock()
        self.finished = 0
        self.given_back = 0  # tasks handed back unstarted while slots were stuck on slow runs
        self._running: list[float | None] = [None] * config.concurrency  # per slot: when its run started
        self._busy_secs = 0.0
        self._busy_lock = threading.Lock()
        self._status_at = self.clock()
        self._status_busy = 0.0
        self.exit_reason = "stopped"

    # ---------------------------------------------------------------- control

    def stop(self) -> None:
        """Graceful stop (SIGTERM): stop leasing, hand back what did not start; without waiting for a
        broker that has gone away (see the module docstring). Safe in a signal handler."""
        self.exit_reason = "stopped"
        self._returning.set()  # also starts the broker watch
        self._stop_leasing.set()

    def _give_up_on_broker(self) -> None:
        """The broker is gone while stopping (the watch's call, once): close the client, so that no
        call waits to reconnect, and stop waiting for the running tasks."""
        held = self.keeper.held()
        running = sum(1 for h in held if h.started_at is not None and not h.ended)
        log.warning(
            "worker %s: the broker at %s is unreachable while stopping; stopping without it%s (tasks held: %d; "
            "they come back to their queues when their leases run out)", self.id, self.client.url,
            f", not waiting for {plural(running, 'running task')}" if running else "", len(held),
        )
        self._broker_gone.set()
        self.settler.abandon()
        self.keeper.stop(wait=False)
        self.registry.stop(wait=False)
        self.client.close()

    def recycle(self, why: str) -> None:
        """Stop leasing and exit once every held task ran (max tasks per child, max memory)."""
        if not self._stop_leasing.is_set():
            log.info("worker %s recycles: %s", self.id, why)
            self.exit_reason = f"recycled: {why}"
            self._stop_leasing.set()

    @property
    def stopping(self) -> bool:
        return self._stop_leasing.is_set()

    def _busy_total_secs(self, held: list[Held]) -> float:
        now = self.clock()
        with self._busy_lock:
            return self._busy_secs + sum(
                now - h.started_at for h in held if h.started_at is not None and not h.ended
            )

    def status(self) -> dict[str, Any]:
        """What the registry shows: tasks held and running, and how busy the slots were since the last call."""
        held = self.keeper.held()
        now = self.clock()
        busy = self._busy_total_secs(held)
        elapsed = max(1e-6, now - self._status_at)
        utilisation = min(1.0, max(0.0, (busy - self._status_busy) / (elapsed * self.config.concurrency)))
        self._status_at, self._status_busy = now, busy
        running = [f"{h.task.queue}/{h.task.pid}" for h in held if h.started_at is not None and not h.ended]
        return {
            "running": running[:20],
            "held": len(held),
            "finished": self.finished,
            "utilisation": round(utilisation, 3),
            "stopping": self.stopping,
            **self._routing(),
        }

    def _routing(self) -> dict[str, Any]:
        """On a cluster, ``{"routing": ...}``: where this process's tasks were leased from
        (`LeaseOrigins.report`); nothing on one broker."""
        report = self.origins.report(getattr(self.client, "near", None), self.client)
        return {} if report is None else {"routing": report}

    # -------------------------------------------------------------------- run

    def run(self) -> str:
        """Serve until stopped and drained; returns why it stopped."""
        self._watch.start()
        self.keeper.start()
        self.registry.start(
            {"host": socket.gethostname(), "pid": os.getpid(), "queues": self.queues,
             "concurrency": self.config.concurrency, "started_at": self.wall_clock()},
            self.status,
        )
        self._settler_thread = self._spawn(self._settle_loop, "kittiwake-settler")
        slots = [self._spawn(self._slot_loop, f"kittiwake-slot-{n}", n) for n in range(self.config.concurrency)]
        leasers = [self._spawn(self._lease_loop, f"kittiwake-lease-{n}", lease_class)
                   for n, lease_class in enumerate(self.classes)]
        log.info("worker %s serving %s (concurrency %d, prefetch %s)", self.id, ", ".join(self.queues),
                 self.config.concurrency, "adaptive" if self.prefetch.adaptive else self.prefetch.fixed)
        try:
            while not self._stop_leasing.wait(0.5):
                pass
        except KeyboardInterrupt:
            self.stop()
        for thread in leasers:
            thread.join()
        self._drain(slots)
        self._watch.finish()
        self.keeper.stop()
        self.registry.stop()
        self.runner.close()
        self.client.close()
        routing = self._routing()
        if routing:
            log.info("worker %s routing %s", self.id, json.dumps(routing["routing"], sort_keys=True))
        log.info("worker %s %s after %d tasks", self.id, self.exit_reason, self.finished)
        return self.exit_reason

    def _spawn(self, target: Any, name: str, *args: Any) -> threading.Thread:
        thread = threading.Thread(target=target, args=args, name=name, daemon=True)
        thread.start()
        self._threads.append(thread)
        return thread

    def _drain(self, slots: list[threading.Thread]) -> None:
        """After leasing stopped: run (recycle) or hand back (stop) what waits, give running
        tasks `shutdown_secs`, release what still runs, and wait for the settler."""
        for _ in slots:
            self._ready.put(None)
        deadline = self.clock() + self.config.shutdown_secs if self._returning.is_set() else None
        for thread in slots:
            self._join_unless_broker_gone(thread, deadline)
        self._outcomes.put(None)  # the settler finishes what the slots decided, then stops
        self._settler_thread.join(60.0)
        stuck = [held for held in self.keeper.held() if not held.finishing]
        if stuck and self._broker_gone.is_set():
            for held in stuck:  # nothing can be handed back: their leases run out
                self.keeper.drop(held)
        elif stuck:
            log.warning("handing back %d tasks still held after %.0f s", len(stuck), self.config.shutdown_secs)
            returned = [Outcome(held, Kind.RETURN) for held in stuck if held.started_at is None]
            self.settler.settle(returned)
            for held in stuck:
                if held.started_at is not None:
                    held.finishing = True
                    try:
                        self.client.release(held.task, "SHUTDOWN")
                    except errors.KittiwakeError as error:
                        log.warning("releasing %s/%s: %s", held.task.queue, held.task.pid, error)
                self.keeper.drop(held)

    def _join_unless_broker_gone(self, thread: threading.Thread, deadline: float | None) -> None:
        """Wait for a slot's thread until `deadline` (None: for as long as it runs), or until the
        broker is found gone: a run whose outcome cannot be posted is not waited for."""
        while thread.is_alive() and not self._broker_gone.is_set():
            remaining = None if deadline is None else deadline - self.clock()
            if remaining is not None and remaining <= 0:
                return
            thread.join(JOIN_SLICE_SECS if remaining is None else min(JOIN_SLICE_SECS, remaining))

    # ---------------------------------------------------------------- leasing

    def _lease_loop(self, lease_class: LeaseClass) -> None:
        delayed_due_at = 0.0
        busy = len(self.classes) == 1
        worked_at = self.clock()
        while not self._stop_leasing.is_set():
            stuck = self._stuck_slots()
            self.capacity.resize(self.prefetch.total(stuck))
            if stuck >= self.config.concurrency:
                self._give_back_excess()
            total = self.capacity.total
            # a class whose last lease came back empty asks for its share only, so that
            # idle queues do not hold the capacity a busy one could use during their long-poll
            most = total if busy else max(1, total // len(self.classes))
            # with tasks ahead of the slots, wait until half of them ran: one lease, many tasks
            least = max(1, (total - self.config.concurrency) // 2) if busy else 1
            # waits a short while only: a slot becoming stuck changes what may be held
            want = self.capacity.take(most, timeout=min(self.config.wait_secs, SLOW_SECS), least=least)
            want = self._within_task_budget(want)
            if want <= 0:
                continue
            if self._stop_leasing.is_set():
                self.capacity.give(want)
                break
            tasks: list[LeasedTask] = []
            try:
                if self.clock() >= delayed_due_at:
                    delayed_due_at = self.clock() + self.config.delayed_poll_secs
                    tasks = self._lease(lease_class, lease_class.delayed_queues, want, wait_secs=0,
                                        max_pid=pid_at(self.wall_clock()))
                if not tasks:
                    wait = min(self.config.wait_secs, max(0.0, delayed_due_at - self.clock()) + 0.05)
                    tasks = self._lease(lease_class, lease_class.queues, want, wait_secs=wait)
                if tasks:
                    worked_at = self.clock()
                elif self.config.node is not None and self.clock() - worked_at >= self.config.steal_after_secs:
                    tasks = self._steal(lease_class)
                    worked_at = self.clock()  # the next steal waits for another idle spell
            except errors.Transient as error:
                if not self._stop_leasing.is_set():  # stopping: the client may have been closed
                    log.warning("leasing: %s; retrying", error)
                self._stop_leasing.wait(0.5)
            except errors.KittiwakeError as error:
                log.error("leasing refused: %s", error)
                self._stop_leasing.wait(1.0)
            finally:
                self.capacity.give(want - len(tasks))
            self.prefetch.leased(want, len(tasks))
            busy = bool(tasks) or len(self.classes) == 1
            if not busy:
                # let another class's leaser, woken by the capacity just given back, take it:
                # with one free slot this leaser would otherwise win it back every time
                self._stop_leasing.wait(0.01)
            now = self.clock()
            with self._budget_lock:
                self.leased += len(tasks)
            helds = [Held(task, lease_class.lease_secs, now) for task in tasks]
            self.keeper.hold_all(helds)
            for held in helds:
                self._ready.put(held)

    def _give_back_excess(self) -> None:
        """Every slot is stuck on a slow run (see `prefetch`): tasks waiting for one go back to the
        broker unstarted (no attempt used), so that a free slot elsewhere runs them now rather
        than after this process's slow tasks. A task that ran before (a parked gang) stays."""
        excess = -self.capacity.free
        kept: list[Held] = []
        while excess > 0:
            try:
                held = self._ready.get_nowait()
            except queue.Empty:
                break
            if held is None or held.definition is not None:
                kept.append(held)  # type: ignore[arg-type]
                continue
            excess -= 1
            self.given_back += 1
            with self._budget_lock:
                self.leased -= 1  # --max-tasks-per-child counts the tasks it runs
            self.capacity.give(1)
            self._outcomes.put(Outcome(held, Kind.RETURN))
        for held in kept:
            self._ready.put(held)

    def _steal(self, lease_class: LeaseClass) -> list[LeasedTask]:
        """Idle for --steal-after: lease one task from another node's local queue (Albatross's
        work stealing, one task per idle spell so that most tasks still run where their data is)."""
        mine = set(lease_class.queues)
        remote: list[str] = []
        for name in lease_class.queues:
            if NODE_SEPARATOR in name or name.endswith(GANG_SUFFIX):
                continue
            remote += [info.queue for info in self.client.list_queues(remote_queue_pattern(name))
                       if info.queue not in mine and info.size > info.leased]
        if not remote:
            return []
        tasks = self._lease(lease_class, remote, 1, wait_secs=0)
        if tasks:
            log.info("node %s steals %s/%s", self.config.node, tasks[0].queue, tasks[0].pid)
        return tasks

    def _within_task_budget(self, want: int) -> int:
        """With --max-tasks-per-child, lease no more than the process may still run: it runs
        every task it leased before recycling, so it runs exactly that many."""
        limit = self.config.max_tasks_per_child
        if limit is None:
            return want
        with self._budget_lock:
            allowed = max(0, min(want, limit - self.leased))
        if allowed < want:
            self.capacity.give(want - allowed)
            if allowed == 0:
                self._stop_leasing.wait(0.05)
        return allowed

    def _lease(
        self, lease_class: LeaseClass, queues: list[str], want: int, *, wait_secs: float, max_pid: str | None = None
    ) -> list[LeasedTask]:
        if self._parked and self.leader_queues:
            queues = [name for name in queues if undelayed_queue_of(name) not in self.leader_queues]
            if not queues:  # nothing but gang tasks here: wait as a long-poll would
                self._stop_leasing.wait(wait_secs)
                return []
        tasks = self.client.lease(
            queues, max_tasks=want, lease_secs=lease_class.lease_secs, max_pid=max_pid, wait_secs=wait_secs,
            worker=self.id, rate_per_sec=lease_class.rate_per_sec,
            rate_burst=None if lease_class.rate_per_sec is None else max(1.0, lease_class.rate_per_sec / 10),
        )
        if tasks:
            self.origins.count(getattr(self.client, "cluster_map", None), tasks)
        return tasks

    # ------------------------------------------------------------------ slots

    def _stuck_slots(self) -> int:
        """Slots whose run has lasted `SLOW_SECS` or more."""
        now = self.clock()
        return sum(1 for started in self._running if started is not None and now - started >= SLOW_SECS)

    def _slot_loop(self, index: int) -> None:
        while True:
            held = self._ready.get()
            if held is None:
                return
            if self._returning.is_set() or held.lost:
                self.capacity.give(1)
                self._outcomes.put(Outcome(held, Kind.DROP if held.lost else Kind.RETURN))
                continue
            self.started += 1
            if self.ledger is not None:  # before the run: a run that kills the process is known as running
                self.ledger.running(index, held.task.lease_id)
            started = self._running[index] = self.clock()
            try:
                outcome = self.runner.run(held)
            except BaseException as error:  # a bug here must not lose the task: let it come back
                log.exception("running %s/%s", held.task.queue, held.task.pid)
                outcome = Outcome(held, Kind.DROP, reason=str(error))
            self._running[index] = None
            if self.ledger is not None:
                self.ledger.idle(index)
            ran_secs = self.clock() - started
            with self._busy_lock:
                self._busy_secs += ran_secs
                held.ended = True  # counted: the status must not count it again while it settles
            if outcome.kind is Kind.PARK:
                self._park(held, outcome.backoff_secs)
                continue
            self.prefetch.observe(ran_secs)
            if outcome.kind is Kind.DONE and held.definition is not None and held.definition.name in self.app.periodics:
                self._mark_tick(outcome)
            self._check_recycle()  # before this task's capacity is freed for another lease
            self.capacity.give(1)
            self._outcomes.put(outcome)

    def _park(self, held: Held, pause_secs: float) -> None:
        """Keep the task's lease (the heartbeat renews it), free its slot and its capacity, and put
        it back in line for a slot after `pause_secs`, once it got a unit of capacity back (a gang
        that did not assemble: see `gang`). Taking capacity first keeps ``--prefetch 0`` true: the
        process never holds a join it cannot run while it leads. Stopping hands the task back like
        any task not started."""
        held.started_at = None
        held.ended = False
        with self._parked_lock:
            self._parked += 1
        self.capacity.give(1)
        timer = threading.Timer(pause_secs, self._unpark, args=(held,))
        timer.daemon = True
        timer.start()

    def _unpark(self, held: Held) -> None:
        try:
            while not self._stop_leasing.is_set():
                if held.lost:  # cancelled while parked: nothing to run, nothing to settle
                    self.keeper.drop(held)
                    return
                if self.capacity.claim(timeout=self.config.wait_secs):
                    self._ready.put(held)  # its settling gives the unit back
                    return
        finally:
            with self._parked_lock:
                self._parked -= 1

    def _check_recycle(self) -> None:
        limit = self.config.max_tasks_per_child
        if limit is not None and self.leased >= limit:
            self.recycle(f"ran {limit} tasks (--max-tasks-per-child {limit})")
        memory_mb = self.config.max_memory_mb
        if memory_mb is not None:
            rss_mb = resident_memory_bytes() / (1 << 20)
            if rss_mb > memory_mb:
                self.recycle(f"resident memory {rss_mb:.0f} MB over --max-memory {memory_mb:.0f} MB")

    def _mark_tick(self, outcome: Outcome) -> None:
        """A periodic run finished: its marker goes in the same update, with old markers pruned.

        Only for a run whose pid is its own tick's (`envelope.tick_pid`) and whose tick is due
        by this worker's clock (give or take `TICK_SKEW_SECS`): a pid is its submitter's word, and
        a marker for a tick still to come — written with the worker's rights — would make every
        scheduler skip that tick (`beat`)."""
        task = outcome.task
        if task.queue.endswith(DELAYED_SUFFIX) or "@" not in task.pid:
            return  # submitted by hand, not fired by a scheduler
        definition = outcome.held.definition
        name, _, iso = task.pid.rpartition("@")
        tick_secs = tick_epoch_secs(iso)
        if definition is None or definition.name != name or tick_secs is None:
            return  # not a tick's pid: submitted by hand
        if tick_secs > self.wall_clock() + TICK_SKEW_SECS:
            log.warning("no marker for %s/%s: its tick has not come yet (a hand-made pid, or this "
                        "worker's clock is behind the scheduler's)", task.queue, task.pid)
            return
        markers = ticks_done_queue_of(task.queue)
        outcome.enqueue.append({"queue": markers, "pid": marker_pid_of_tick_pid(task.pid), "data": b"",
                                "max_attempts": MARKER_MAX_ATTEMPTS})
        cutoff = time.gmtime(self.wall_clock() - MARKER_RETENTION_SECS)
        try:
            outcome.dequeue.extend(self.client.lease(
                markers, max_tasks=MARKERS_PRUNED_PER_RUN, lease_secs=60.0,
                max_pid=time.strftime("%Y-%m-%dT%H:%M:%SZ", cutoff), worker=self.id,
            ))
        except errors.KittiwakeError as error:
            log.warning("pruning tick markers: %s", error)

    # --------------------------------------------------------------- settling

    def _settle_loop(self) -> None:
        closing = False
        while not closing:
            first = self._outcomes.get()
            if first is None:
                return
            batch = [first]
            while len(batch) < 1000:
                try:
                    item = self._outcomes.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    closing = True
                    break
                batch.append(item)
            try:
                self.settler.settle(batch)
            except Exception:
                log.exception("settling %d outcomes", len(batch))
            self.keeper.drop_all([outcome.held for outcome in batch])
            self.finished += sum(1 for outcome in batch if outcome.kind is not Kind.RETURN)


def resident_memory_bytes() -> int:
    """This process's resident set size (Linux /proc; elsewhere the peak from getrusage)."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

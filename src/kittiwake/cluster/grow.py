"""Growing a cluster offline: move every stored entry to the node the new map names (`kittiwake cluster grow`).

The nodes are stopped while this runs; each store is opened as `kittiwake copy` opens one (an SQLite
directory locked in the name of "kittiwake cluster grow", a PostgreSQL schema with a lone broker's
presence), so a store a broker serves is refused, and no broker starts on one until the move ends.

What moves is decided by `growth` (pure): every task of every store whose `growth.destination` under
the new map is another node, whatever its queue — tasks of named groups (join tokens and all, with
their group), keyed tasks of spread queues, dead letters (`q.dead`) and delayed entries (`q.delayed`)
beside their task, join declarations with their job queue's group — with every attribute (data,
headers, sender, receiver, attempts, deliveries, max_attempts, enqueued_at, DAG counts and the edges
to its children, progress, note). A leased task keeps its lease where the new map still routes the
lease to it, else it is moved available (`growth.drop_lease`). Stores are read only through the
`TaskStore` protocol (`recover`, `scan`, `load_task`, `children_of`, `write`, `commit`), so SQLite
and PostgreSQL shards move alike.

**Crash-safe, per batch.** A batch of up to `batch` tasks of one store going to one node is written
to the new node's store and committed, then deleted from the old store and committed. A task
already on the new node (same queue and pid, and the same task: `growth.same_task`) is not written
again, so a run interrupted anywhere and run again finishes the job: nothing lost (a task leaves its
old store only after its new store committed it) and nothing doubled (a task on both stores is
deleted from the old one only). A task of that queue and pid on the new node that is another task (other data,
enqueue time, ... — enqueued there by a node started on the new map before the move) stops the move
with GrowError naming it, before that batch deletes anything. The store given for a node of the old
map must exist (`store_exists`): grow never creates one. The counts of tasks in all stores
together, before and after, must agree.

**The epoch.** A store that records a cluster node's identity (`engine.identity`: a counter
``cluster_node:<node>:<epoch>`` whose value orders the records) gets the new map's epoch recorded
once every move is done; so does a new node's store, if the old stores record identities, since a
node refuses to start on a store that holds tasks but no identity. The lease-id and FIFO high-water
marks (`SetCounter`) of each old store are raised on every store it sends tasks to.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Protocol, cast

from kittiwake import errors
from kittiwake.cluster import growth
from kittiwake.cluster.cluster_map import ClusterMap
from kittiwake.cluster.routing import Owned, route
from kittiwake.constants import JOINS_QUEUE
from kittiwake.engine import identity
from kittiwake.engine.mutations import DeleteEdges, DeleteTask, Mutation, PutEdge, PutTask, SetCounter
from kittiwake.engine.state import FIFO_COUNTER, LEASE_ID_COUNTER
from kittiwake.engine.storage import Recovery
from kittiwake.model import Task
from kittiwake.store.location import StoreLocation

HOLDER = "kittiwake cluster grow"
"""How the move names itself in the SQLite directories it locks."""

DEFAULT_BATCH = 500
"""Tasks per pair of transactions (copy, then delete)."""

CRASH_ENV = "KITTIWAKE_TEST_GROW_KILL_AFTER_COPIES"
"""For tests of crash safety only: after this many batches committed on their new node and not
yet deleted from their old one, the process SIGKILLs itself."""

IDENTITY_PREFIX = identity.PREFIX
"""Counter names of node identities (as `engine.identity.PREFIX` on branch cnode)."""

_CARRIED_COUNTERS = (LEASE_ID_COUNTER, FIFO_COUNTER)


class GrowError(ValueError):
    """The move cannot start, or its counts disagree; the message says why."""


class MovingStore(Protocol):
    """What the move uses of a store: `engine.storage.TaskStore`'s reads and writes."""

    def write(self, mutations: Sequence[Mutation]) -> None: ...
    def commit(self) -> None: ...
    def load_task(self, queue: str, pid: str) -> Task | None: ...
    def scan(self, queue: str, from_pid: str | None, limit: int) -> list[Task]: ...
    def children_of(self, queue: str, pid: str) -> list[tuple[str, str]]: ...
    def recover(self, now: float) -> Recovery: ...
    def close(self) -> None: ...


class Progress(Protocol):
    """Told what the move does, node by node (a bar per node)."""

    def started(self, node: str, tasks: int) -> None:
        """`node`'s store holds `tasks` tasks to look at."""

    def advanced(self, node: str, looked_at: int, moved: int) -> None:
        """So far `looked_at` tasks of `node`'s store were looked at and `moved` of them moved."""


@dataclass
class GrowReport:
    """What moved: tasks by (from node, to node), by the slot range that moved them, and the rest."""

    moved: dict[tuple[str, str], int] = field(default_factory=dict)
    by_range: dict[str, int] = field(default_factory=dict)
    """Tasks per reason: a moved slot range ("slots 683-1023: a → c"), a FIFO pid's residue
    ("FIFO residue → c") or a task that was not on its owner under the old map either."""
    already_there: int = 0
    """Tasks found on their new node already (a run interrupted before): deleted from the old only."""
    leases_kept: int = 0
    leases_dropped: int = 0
    edges_moved: int = 0
    edges_split: int = 0
    """DAG edges whose parent and child now live on different nodes (not tagged alike)."""
    tasks_before: int = 0
    tasks_after: int = 0
    epochs_recorded: list[str] = field(default_factory=list)
    """Nodes whose store now records the new epoch."""

    @property
    def total_moved(self) -> int:
        return sum(self.moved.values())


# ------------------------------------------------------------ identity hooks (branch cnode)


def recorded_identity(counters: Mapping[str, int]) -> tuple[str, str, int] | None:
    """The node and epoch a store's counters record last (`engine.identity`), with the order of
    that record; None when the store was never a node's."""
    current = identity.recorded(counters)
    if current.current is None:
        return None
    return current.current.node, current.current.epoch, current.order


def identity_record(node: str, epoch: str, order: int) -> SetCounter:
    """The mutation recording that the store is node `node`'s under the map of `epoch`, as its
    `order`-th record (`engine.identity`)."""
    return SetCounter(identity.counter_name(identity.NodeIdentity(node, epoch)), order)


# ------------------------------------------------------------ the move


def open_for_move(location: StoreLocation, existing: bool = False) -> MovingStore:
    """The store at `location`, held as `kittiwake copy` holds one; GrowError when a broker serves it,
    or when `existing` (an old node's store, which holds what is to move) and there is no store there:
    a mistyped path would otherwise be created empty, and the real store left unmoved."""
    from kittiwake.store.directory_lock import BROKER, DirectoryInUse
    from kittiwake.store.location import open_store
    from kittiwake.store.postgres_presence import BrokerConflict

    if existing and not store_exists(location):
        raise GrowError(f"there is no store at {location.describe()}, given for a node of the old map: give the "
                        "directory or schema the node served (its --data or --store): grow never creates an old node's store")
    try:
        if location.kind == "postgresql":
            return cast(MovingStore, open_store(replace(location, brokers="one"), broker=True))
        return cast(MovingStore, open_store(location, holder=HOLDER))
    except BrokerConflict as exc:
        raise GrowError(f"a broker serves {location.describe()}: stop every node first ({exc})") from None
    except DirectoryInUse as exc:
        if exc.holder == BROKER:
            raise GrowError(f"a broker serves {exc.directory} ({exc.pid_text}): stop every node first "
                            "(grow runs on stopped nodes)") from None
        raise GrowError(exc.message) from None


def store_exists(location: StoreLocation) -> bool:
    """Whether a store was ever opened at `location`: an SQLite directory holding its database, a
    PostgreSQL schema that exists (looked at without creating anything)."""
    if location.kind == "sqlite":
        from kittiwake.store.sqlite import DATABASE_FILE

        return (Path(location.target) / DATABASE_FILE).is_file()
    import psycopg

    try:
        with psycopg.connect(location.target, autocommit=True, connect_timeout=10) as db:
            return db.execute("SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = %s",
                              (location.schema,)).fetchone() is not None
    except psycopg.Error as exc:
        raise GrowError(f"cannot look for the store at {location.describe()}: {exc}") from None


def grow(
    old: ClusterMap,
    new: ClusterMap,
    locations: Mapping[str, StoreLocation],
    *,
    batch: int = DEFAULT_BATCH,
    progress: Progress | None = None,
    clock: Callable[[], float] = time.time,
    opener: Callable[[StoreLocation, bool], MovingStore] = open_for_move,
) -> GrowReport:
    """Move every task of the stores (`locations`: node name → its store, one per node of `new`)
    to the node `new` routes it to; GrowError or BadRequest saying why when it cannot. The store of
    a node of `old` must exist (`opener` is told so); a new node's is created if need be."""
    growth.check_growth(old, new)
    if set(locations) != set(new.node_names):
        missing = sorted(set(new.node_names) - set(locations))
        unknown = sorted(set(locations) - set(new.node_names))
        what = [f"no store for {', '.join(missing)}"] if missing else []
        what += [f"{', '.join(unknown)} not in the new map"] if unknown else []
        raise GrowError(f"give one --store NAME=STORE per node of the new map: {'; '.join(what)}")
    if batch < 1:
        raise GrowError("the batch size must be at least 1")
    stores: dict[str, MovingStore] = {}
    try:
        for name in new.node_names:
            stores[name] = opener(locations[name], name in old.node_names)
        return _Mover(old, new, stores, batch, progress, clock).run()
    finally:
        for store in stores.values():
            store.close()


class _Mover:
    def __init__(
        self, old: ClusterMap, new: ClusterMap, stores: dict[str, MovingStore], batch: int,
        progress: Progress | None, clock: Callable[[], float],
    ) -> None:
        self.old, self.new, self.stores, self.batch = old, new, stores, batch
        self.progress = progress
        self.clock = clock
        self.report = GrowReport()
        self.ranges = growth.moved_slots(old, new)
        self.crash_after = int(os.environ.get(CRASH_ENV, "0") or 0)
        self.copies = 0

    def run(self) -> GrowReport:
        now = self.clock()
        recoveries = {name: store.recover(now) for name, store in self.stores.items()}
        identities = {name: recorded_identity(recovery.counters) for name, recovery in recoveries.items()}
        for name, identity in identities.items():
            if identity is None:
                continue
            node, epoch, _ = identity
            if node != name:
                raise GrowError(f"the store given for node {name!r} belongs to node {node!r}: "
                                "give each node its own store (--store NAME=STORE)")
            if epoch not in (self.old.epoch, self.new.epoch):
                raise GrowError(f"the store of node {name!r} records the map of epoch {epoch}, neither the old "
                                f"map's ({self.old.epoch}) nor the new one's ({self.new.epoch})")
        for name, store in self.stores.items():
            self._check_joins(name, store)
        self.report.tasks_before = sum(_tasks(recovery) for recovery in recoveries.values())
        for name in self.new.node_names:
            self._move_from(name, recoveries[name])
        now = self.clock()
        if any(identity is not None for identity in identities.values()):
            self._record_epoch(identities)
        report = self.report
        report.tasks_after = sum(_tasks(store.recover(now)) for store in self.stores.values())
        # a task found on both its old and its new store (a run interrupted before) was counted twice
        if report.tasks_after != report.tasks_before - report.already_there:
            raise GrowError(f"the stores held {report.tasks_before} tasks before the move ({report.already_there} "
                            f"of them twice) and {report.tasks_after} after: look into it before starting the nodes")
        return self.report

    def _check_joins(self, source: str, store: MovingStore) -> None:
        """GrowError, before anything moves, for a join declaration the new map would part from its
        name (`growth.parted_join`)."""
        after: str | None = None
        while True:
            page = [task for task in store.scan(JOINS_QUEUE, after, self.batch + 1) if after is None or task.pid > after]
            if not page:
                return
            after = page[-1].pid
            for task in page:
                problem = growth.parted_join(self.new, task)
                if problem is not None:
                    raise GrowError(f"on node {source!r}: {problem}")

    def _move_from(self, source: str, recovery: Recovery) -> None:
        store = self.stores[source]
        carried = [SetCounter(name, value) for name, value in recovery.counters.items()
                   if name in _CARRIED_COUNTERS]
        if self.progress is not None:
            self.progress.started(source, _tasks(recovery))
        looked_at = moved = 0
        for summary in recovery.queues:
            pending: dict[str, list[tuple[Task, Owned]]] = {}
            after: str | None = None  # the last pid looked at: the next page starts there (scan's from is >=)
            while True:
                if after is None:
                    page = store.scan(summary.queue, None, self.batch)
                else:  # one more, for `after` itself when it stayed
                    page = [task for task in store.scan(summary.queue, after, self.batch + 1) if task.pid > after]
                if not page:
                    break
                after = page[-1].pid
                for task in page:
                    looked_at += 1
                    owner = growth.destination(self.new, task)
                    if owner is None or owner.node == source:
                        continue
                    waiting = pending.setdefault(owner.node, [])
                    waiting.append((task, owner))
                    if len(waiting) >= self.batch:
                        moved += self._move(source, owner.node, waiting, carried)
                        waiting.clear()
                if self.progress is not None:
                    self.progress.advanced(source, looked_at, moved)
            for target, waiting in pending.items():
                if waiting:
                    moved += self._move(source, target, waiting, carried)
            if self.progress is not None:
                self.progress.advanced(source, looked_at, moved)

    def _move(self, source: str, target: str, tasks: list[tuple[Task, Owned]], carried: list[SetCounter]) -> int:
        """One batch: written to `target` and committed, then deleted from `source` and committed."""
        old_store, new_store = self.stores[source], self.stores[target]
        copies: list[Mutation] = []
        deletes: list[Mutation] = []
        kept_lease_ids = [0]
        for task, owner in tasks:
            children = old_store.children_of(task.queue, task.pid) if task.children else []
            found = new_store.load_task(task.queue, task.pid)
            if found is None:
                written = growth.moved_task(self.new, task, target)
                if task.lease_expires_at is not None:
                    if written.lease_expires_at is None:
                        self.report.leases_dropped += 1
                    else:
                        self.report.leases_kept += 1
                        kept_lease_ids.append(written.lease_id)
                copies.append(PutTask(written))
            elif growth.same_task(found, task):
                self.report.already_there += 1
            else:
                raise GrowError(
                    f"task {task.pid[:64]!r} of queue {task.queue[:255]!r} is on node {source!r} and another task of "
                    f"that queue and pid is on node {target!r} already ({growth.how_they_differ(found, task)}): "
                    "was a node started on the new map before grow ran? Nothing of this batch was deleted; "
                    "decide which copy to keep, delete the other, then run grow again")
            for child_queue, child_pid in children:
                copies.append(PutEdge(task.queue, task.pid, child_queue, child_pid))
                self.report.edges_moved += 1
                child_owner = route(self.new, child_queue, child_pid)
                if isinstance(child_owner, Owned) and child_owner.node != target:
                    self.report.edges_split += 1
            if children:
                deletes.append(DeleteEdges(task.queue, task.pid))
            deletes.append(DeleteTask(task.queue, task.pid))
            self._count(source, target, owner)
        copies += carried
        copies.append(SetCounter(LEASE_ID_COUNTER, max(kept_lease_ids)))
        new_store.write(copies)
        new_store.commit()
        self.copies += 1
        if self.crash_after and self.copies >= self.crash_after:
            os.kill(os.getpid(), signal.SIGKILL)  # tests of crash safety only (CRASH_ENV)
        old_store.write(deletes)
        old_store.commit()
        return len(tasks)

    def _count(self, source: str, target: str, owner: Owned) -> None:
        report = self.report
        report.moved[(source, target)] = report.moved.get((source, target), 0) + 1
        if owner.slot is None:
            label = f"FIFO pids of residue {self.new.index_of(target)} → {target}"
        else:
            moved_range = growth.range_of(self.ranges, owner.slot)
            label = str(moved_range) if moved_range is not None else f"misplaced before: {source} → {target}"
        report.by_range[label] = report.by_range.get(label, 0) + 1

    def _record_epoch(self, identities: Mapping[str, tuple[str, str, int] | None]) -> None:
        for name in self.new.node_names:
            found = identities[name]
            if found is not None and found[1] == self.new.epoch:
                continue  # recorded by a run before
            order = found[2] + 1 if found is not None else 1
            store = self.stores[name]
            store.write([identity_record(name, self.new.epoch, order),
                         SetCounter(identity.placement_counter(self.new.epoch, self.new.placement), 1)])
            store.commit()
            self.report.epochs_recorded.append(name)


def _tasks(recovery: Recovery) -> int:
    return sum(summary.size for summary in recovery.queues)

"""One queue's in-memory state: the cached head, the leased set, the counts.

Theory of operation (TaskMaster §5.4). The store holds every task; memory
holds, per queue:

* `available`: the *head* — every available task whose pid is <= `horizon`,
  or every available task at all when `complete` is true. Tasks above the
  horizon live only in the store and are loaded by an on-demand refill when
  the head runs low. Evicting the highest pids from the head and lowering the
  horizon keeps the invariant, so memory is bounded by the cache setting and
  not by the number of tasks.
* `open` / `directed`: the same head split by receiver, so a lease without a
  receiver never scans past tasks directed to somebody else (Paštas).
* `leased`: every task under a lease, whatever its pid. Leases are few
  compared with tasks and must be checked on every renew/dequeue.
* `size`: every task of the queue, available, leased or blocked, in memory or not.
* `blocked`: tasks waiting for parents (dependencies). They stay in the store
  until their last parent finishes, so a look-up that misses memory must ask
  the store whenever `blocked` is non-zero.
* `max_pid`: no task of the queue has a larger pid (an upper bound: it never
  goes down).
* `max_fifo_pid`: the same bound over FIFO-shaped pids (17 digits) only. A new
  FIFO pid can collide only with a pid of that shape, so one above this bound
  needs no dedupe look-up in the store, even in a queue whose explicit pids
  (random hex, say) sort above every FIFO pid.

A task enters `available` only if `covers(pid)`; otherwise it is in the store
alone and `stored_available` counts it.

Memory. A broker holds O(100K) queues, most with a task or two, and a
SortedDict costs ~1.6 KB even when empty. So an empty head is the shared,
read-only `EMPTY_HEAD`, and while no task of the head is directed `open` *is*
`available` (one SortedDict, one insert per task); `open` becomes a SortedDict
of its own only while the head holds directed tasks.
"""

from __future__ import annotations

from sortedcontainers import SortedDict

from kittiwake.engine.rate_limit import TokenBucket
from kittiwake.engine.rates import RateWindow
from kittiwake.model import FIFO_PID_DIGITS, Task


class _EmptyHead(SortedDict[str, Task]):
    """The head of every queue with no task in memory; shared, so never written."""

    def __setitem__(self, key: object, value: object) -> None:
        raise TypeError("EMPTY_HEAD is shared and read-only; give the queue a SortedDict of its own")


EMPTY_HEAD: SortedDict[str, Task] = _EmptyHead()


class QueueState:
    __slots__ = (
        "name",
        "size",
        "available",
        "open",
        "directed",
        "leased",
        "complete",
        "horizon",
        "memory_bytes",
        "rates",
        "max_pid",
        "max_fifo_pid",
        "blocked",
        "rate",
    )

    def __init__(self, name: str, size: int = 0, complete: bool = True) -> None:
        self.name = name
        self.size = size
        self.available: SortedDict[str, Task] = EMPTY_HEAD
        self.open: SortedDict[str, Task] = EMPTY_HEAD  # `available` itself while `directed` is empty
        self.directed: dict[str, SortedDict[str, Task]] = {}
        self.leased: dict[str, Task] = {}
        self.complete = complete
        self.horizon = ""  # meaningful only when not complete
        self.memory_bytes = 0
        self.rates: RateWindow | None = None  # made on first activity
        self.max_pid = ""
        self.max_fifo_pid = ""
        self.blocked = 0  # tasks waiting for parents: in the store only, never in the head
        self.rate: TokenBucket | None = None  # when a lease set a rate

    def note_pid(self, pid: str) -> None:
        """A task with this pid joins the queue: raise the pid bounds."""
        if pid > self.max_pid:
            self.max_pid = pid
        if pid > self.max_fifo_pid and len(pid) == FIFO_PID_DIGITS and pid.isascii() and pid.isdigit():
            self.max_fifo_pid = pid

    def covers(self, pid: str) -> bool:
        """True when a task with this pid, if available, must be in memory."""
        return self.complete or pid <= self.horizon

    @property
    def stored_available(self) -> int:
        """Available tasks that are in the store but not in memory."""
        return self.size - len(self.leased) - len(self.available) - self.blocked

    def bucket_for(self, receiver: str | None) -> SortedDict[str, Task] | None:
        return self.open if receiver is None else self.directed.get(receiver)

    def add_available(self, task: Task) -> int:
        """Put a task in the head; returns the bytes added."""
        pid = task.pid
        available = self.available
        if available is EMPTY_HEAD:
            available = self.available = SortedDict()
            self.open = available  # an empty head has no directed tasks
        if task.receiver is None:
            available[pid] = task
            if self.open is not available:
                if self.open is EMPTY_HEAD:
                    self.open = SortedDict()
                self.open[pid] = task
        else:
            if self.open is available:
                # the first directed task: `open` keeps what is open so far
                self.open = SortedDict(available) if available else EMPTY_HEAD
            available[pid] = task
            bucket = self.directed.get(task.receiver)
            if bucket is None:
                bucket = self.directed[task.receiver] = SortedDict()
            bucket[pid] = task
        size = task.size_bytes()
        self.memory_bytes += size
        return size

    def remove_available(self, pid: str) -> Task | None:
        available = self.available
        task = available.pop(pid, None)
        if task is None:
            return None
        if task.receiver is None:
            if self.open is not available:
                del self.open[pid]
                if not self.open:
                    self.open = EMPTY_HEAD
        else:
            bucket = self.directed[task.receiver]
            del bucket[pid]
            if not bucket:
                del self.directed[task.receiver]
                if not self.directed:
                    self.open = available  # every task left is open again
        if not available:
            self.available = self.open = EMPTY_HEAD
        self.memory_bytes -= task.size_bytes()
        return task

    def absorb(self, rows: list[Task], limit: int) -> int:
        """Take a refill of rows with pid > horizon; returns bytes added."""
        added = 0
        for task in rows:
            if task.pid not in self.leased and task.pid not in self.available:
                # a lease that ran out while the task was cold: keep its id
                # (late dequeue) but show it as available
                task.lease_owner = task.lease_peer = None
                task.leased_at = task.lease_expires_at = None
                added += self.add_available(task)
        if len(rows) < limit:
            self.complete = True
        elif rows:
            self.horizon = rows[-1].pid
        return added

    def evict_to(self, keep: int) -> int:
        """Drop the highest pids until `keep` remain; returns bytes freed."""
        freed = 0
        while len(self.available) > keep:
            pid = self.available.keys()[-1]
            task = self.remove_available(pid)
            assert task is not None
            freed += task.size_bytes()
        if freed:
            self.complete = False
            self.horizon = self.available.keys()[-1] if self.available else ""
        return freed

    def oldest_enqueued_at(self) -> float | None:
        """Oldest enqueue time among tasks in memory: exact when `complete`,
        the oldest of the head and the leased set otherwise."""
        oldest: float | None = None
        for task in self.available.values():
            if oldest is None or task.enqueued_at < oldest:
                oldest = task.enqueued_at
        for task in self.leased.values():
            if oldest is None or task.enqueued_at < oldest:
                oldest = task.enqueued_at
        return oldest

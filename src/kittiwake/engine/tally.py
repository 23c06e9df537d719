"""What the engine did since the tally was last taken: counts of task moves per queue, and their times.

The engine records here, beside the rates it keeps for stats (`rates`), each
move a task makes, on the queue it happens in:

* `ENQUEUED` — a new task (enqueue, the enqueue half of update, a job a join
  started, a dead letter requeued; a task born dead too, since it was
  enqueued): not an enqueue that collapsed onto a task that exists;
* `LEASED` — a lease granted; the first one of a task (`deliveries == 1`)
  also observes its *wait*, enqueued_at → leased_at;
* `DEQUEUED` — finished; a dequeue under a lease that was still held also
  observes its *run*, leased_at → dequeue;
* `RELEASED` — handed back by its worker (release, reject, the release half
  of update);
* `EXPIRED` — its lease ran out and the sweep took it back;
* `DEAD_LETTERED` — moved to the dead letters, counted on the task's own
  queue (not `<queue>.dead`): its last attempt failed, it was cancelled, a
  parent failed, or a join's job was too large.

Beside the moves, `dropped` names the queues deleted whole (`delete_queue`:
no task moves, the queue is gone), for whoever follows what queues hold (a
cluster node's announcements).

The broker reads a tally only once its pass committed (`broker.passes`): a
pass that fails rebuilds the engine, and the tally with it, so a move is
counted once and only when it is durable. Cheap, since the hot path counts
tens of thousands of moves a second: a dict look-up and a list increment per
move, the seconds appended to a list; bucketing waits for the reader.
"""

from __future__ import annotations

ENQUEUED, LEASED, DEQUEUED, RELEASED, DEAD_LETTERED, EXPIRED = range(6)
MOVES = ("enqueued", "leased", "dequeued", "released", "dead_lettered", "expired")
"""The names of the moves, by index: the metrics' names (`kittiwake_tasks_<move>_total`)."""


class Tally:
    """Moves and seconds per queue since this tally was made (see the module docstring)."""

    __slots__ = ("counts", "wait_secs", "run_secs", "dropped")

    def __init__(self) -> None:
        self.counts: dict[str, list[int]] = {}  # queue → one count per move, indexed as MOVES
        self.wait_secs: dict[str, list[float]] = {}  # queue → waits of tasks leased for the first time
        self.run_secs: dict[str, list[float]] = {}  # queue → lease-to-dequeue times of finished tasks
        self.dropped: list[str] = []  # queues deleted whole

    def __bool__(self) -> bool:
        return bool(self.counts) or bool(self.dropped)

    def count(self, queue: str, move: int, n: int = 1) -> None:
        row = self.counts.get(queue)
        if row is None:
            row = self.counts[queue] = [0, 0, 0, 0, 0, 0]
        row[move] += n

    def waited(self, queue: str, secs: float) -> None:
        """A task of `queue` was leased for the first time, `secs` after its enqueue."""
        values = self.wait_secs.get(queue)
        if values is None:
            values = self.wait_secs[queue] = []
        values.append(secs if secs > 0.0 else 0.0)  # a wall clock that stepped back

    def ran(self, queue: str, secs: float) -> None:
        """A task of `queue` was dequeued `secs` after its lease."""
        values = self.run_secs.get(queue)
        if values is None:
            values = self.run_secs[queue] = []
        values.append(secs if secs > 0.0 else 0.0)

    def total(self, move: int) -> int:
        """The count of one move over every queue."""
        return sum(row[move] for row in self.counts.values())

"""How long job records (`job_records`) stay in the job registry, and their removal after that.

A record is written once per submitted job and nothing else ever takes it out
of the registry, so without an end the registry would grow with every job
ever submitted. The apps that write records remove the old ones:

* `App(job_retention_secs=...)`, default `DEFAULT_RETENTION_SECS` (7 days);
  None: this app removes none;
* at most once per `PRUNE_EVERY_SECS` per app, right after a submit wrote a
  record, `prune` removes the records created before `now - retention`. A
  record's pid begins with its creation time in milliseconds, so they are the
  pids up to `cutoff_pid`: a `peek` at the registry's oldest task says whether
  there is anything to do (one round trip when there is not), then
  `lease(max_pid=cutoff)` hands over the old ones, oldest first, and `dequeue`
  deletes them — the rights a submitter has on its own registry (consume)
  suffice, and the broker does the choosing;
* at most `PRUNE_PAGES` × `PRUNE_PAGE` records per round, so a submit never
  pays for a long backlog at once (the next round takes the next part).

Retention is the registry's: every app writing records into one registry
prunes it by its own retention, so the shortest wins, and None on one app
does not keep what another removes — an app wanting its own retention names a
registry of its own. Records go by age only, whatever their job's state: a
job still running past the retention loses its line on the dashboard, never
its tasks. Only tasks whose pid is a job id (`job_records.is_job_id`) are removed: if the
registry's oldest task is anything else, the registry is not a registry of
records only and nothing of it is touched; a task of another shape enqueued
among old records is handed back unchanged (no attempt counted). Several
apps prune side by side (a record is leased by one of them). A failed round
(the broker away, no consume right) is logged — a warning the first time,
then at debug level — and tried again a round later; it never fails the
submit that ran it.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from kittiwake.app.job_records import is_job_id

if TYPE_CHECKING:
    from kittiwake.client import Client

DEFAULT_RETENTION_SECS = 7 * 86_400.0
PRUNE_EVERY_SECS = 60.0
PRUNE_PAGE = 100
PRUNE_PAGES = 10
PRUNE_LEASE_SECS = 30.0  # a pruner that dies holding records gives them back after this

log = logging.getLogger("kittiwake.app.job_retention")


def validate_retention(retention_secs: object) -> float | None:
    if retention_secs is None:
        return None
    if isinstance(retention_secs, bool) or not isinstance(retention_secs, (int, float)) or not retention_secs > 0 \
            or retention_secs == float("inf"):
        raise ValueError(f"job_retention_secs must be a positive number of seconds or None, got {retention_secs!r}")
    return float(retention_secs)


def cutoff_pid(before_secs: float) -> str:
    """The largest pid of a record to remove: every record created before `before_secs` (epoch
    seconds) sorts at or below it (`job_records.new_job_id`), none created at or after it."""
    return f"{max(0, int(before_secs * 1000)):013d}"


def prune(client: Client, registry: str, before_secs: float) -> int:
    """Remove the records of `registry` created before `before_secs`, up to a round's worth;
    returns how many were removed. Raises `ForeignTasks` when the registry's oldest task is not
    a record (then nothing is leased)."""
    cutoff = cutoff_pid(before_secs)
    removed = 0
    for _ in range(PRUNE_PAGES):
        head = client.peek(registry, 1)
        if not head or head[0].pid > cutoff:
            break  # nothing old enough
        if not is_job_id(head[0].pid):
            raise ForeignTasks(f"the job registry {registry!r} holds tasks that are not job records "
                               f"(the oldest: {head[0].pid!r}): its records are not removed")
        leased = client.lease(registry, max_tasks=PRUNE_PAGE, max_pid=cutoff, lease_secs=PRUNE_LEASE_SECS)
        records = [task for task in leased if is_job_id(task.pid)]
        others = [task for task in leased if not is_job_id(task.pid)]
        if others:  # enqueued among the records since the peek: handed back, no attempt counted
            client.release(others, reject=True)
        if not records:
            break
        removed += sum(1 for outcome in client.dequeue(records) if outcome.ok)
    return removed


class ForeignTasks(Exception):
    """The registry holds tasks other than records, which pruning must not touch."""


class Pruner:
    """One app's pruning of its registry: `due(now)` is true at most once per `PRUNE_EVERY_SECS`
    (the first time at once; a clock set back starts the wait again), and `run` prunes, logging a
    failure once as a warning and then at debug level, never raising."""

    def __init__(self) -> None:
        self._next = float("-inf")
        self._warned = False

    def due(self, now: float) -> bool:
        if self._next - PRUNE_EVERY_SECS <= now < self._next:
            return False
        self._next = now + PRUNE_EVERY_SECS
        return True

    def run(self, client: Client, registry: str, before_secs: float) -> int:
        from kittiwake import errors

        try:
            return prune(client, registry, before_secs)
        except (ForeignTasks, errors.KittiwakeError, OSError) as error:
            level = logging.DEBUG if self._warned else logging.WARNING
            self._warned = True
            log.log(level, "could not remove old job records from %r (tried again every %.0f s): %s",
                    registry, PRUNE_EVERY_SECS, error)
            return 0

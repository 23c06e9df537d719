"""How long job records (`job_records`) stay in the job registry, and their removal after that.

A record is written once per submitted job and nothing else ever takes it out
of the registry, so without an end the registry would grow with every job an
app ever submitted. The app that writes records removes the old ones:

* `App(job_retention_secs=...)`, default `DEFAULT_RETENTION_SECS` (7 days);
  None keeps records for good;
* at most once per `PRUNE_EVERY_SECS` per app, right after a submit wrote a
  record, `prune` removes the records created before `now - retention`: a
  record's pid begins with its creation time in milliseconds, so they are the
  pids up to `cutoff_pid`, and `lease(max_pid=cutoff)` hands over exactly
  those, oldest first, which `dequeue` then deletes — the rights a submitter
  has on its own registry (consume) suffice, and the broker does the choosing:
  one round trip when nothing is old enough;
* at most `PRUNE_PAGES` × `PRUNE_PAGE` records per round, so a submit never
  pays for a long backlog at once (the next round takes the next part).

Records go by age only, whatever their job's state: a job still running after
the retention loses its line on the dashboard, not its tasks. Several apps on
one registry prune it side by side; a record two of them reach at once is
leased by one only. A failed round (the broker away, no consume right) is
logged and tried again a round later; it never fails the submit that made it.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

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
    returns how many were removed."""
    cutoff = cutoff_pid(before_secs)
    removed = 0
    for _ in range(PRUNE_PAGES):
        old = client.lease(registry, max_tasks=PRUNE_PAGE, max_pid=cutoff, lease_secs=PRUNE_LEASE_SECS)
        if not old:
            break
        outcomes = client.dequeue(old)
        removed += sum(1 for outcome in outcomes if outcome.ok)
        if len(old) < PRUNE_PAGE:
            break
    return removed


class Pruner:
    """When an app prunes its registry next: `due(now)` is true at most once per `PRUNE_EVERY_SECS`
    (the first time at once), so the round runs on the submit that asked."""

    def __init__(self) -> None:
        self._next = float("-inf")

    def due(self, now: float) -> bool:
        if now < self._next:
            return False
        self._next = now + PRUNE_EVERY_SECS
        return True


def prune_quietly(client: Client, registry: str, before_secs: float) -> int:
    """`prune`, with a failure logged rather than raised (the submit that ran it succeeded)."""
    from kittiwake import errors

    try:
        return prune(client, registry, before_secs)
    except (errors.KittiwakeError, OSError) as error:
        log.warning("could not remove old job records from %r (tried again in %.0f s): %s",
                    registry, PRUNE_EVERY_SECS, error)
        return 0

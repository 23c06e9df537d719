"""A worker process lost: naming how it ended, and handing back at once the tasks it held.

Whoever owns a process that ran tasks and died says so: the supervisor for a
worker process (`supervisor`, with what the process held from its `ledger`),
the runner for a timed task's sandbox (`runner.Sandbox`). The words are the
same: `exit_description` names the signal (``died of SIGABRT``) or the exit
status (``exited with status 3``), and a task lost with the process fails
with reason `WORKER_LOST`; the supervisor's reason also names the process,
``WORKER_LOST: process 427 died of SIGABRT`` (`lost_reason`), and that is
what the dead letter's ``kittiwake-dead-reason`` and the submitter's
`TaskFailed.reason` say.

`hand_back` gives a dead process's tasks back without waiting out their
leases:

* a task that was running is released with the reason: an attempt is
  counted, as a failed run's is, so a task that kills every process that
  runs it is dead-lettered after its `max_attempts` instead of killing
  workers forever (an at-most-once one is dead-lettered as WORKER_LOST by the
  next worker to lease it: it did start);
* a task held but not running is rejected: back without an attempt counted.
  Unlike a graceful stop's RETURN (`outcomes`) it gets no ``[redeliver N]``
  note: it may have run already (its outcome not yet settled when the process
  died), so an at-most-once task is dead-lettered as WORKER_LOST by the next
  worker, as after any crash (serve those with ``--prefetch 0``).

A refusal because the task is no longer under that lease (it was settled
just before the death, or its lease had run out) is expected and harmless:
the lease id is the fencing token.
"""

from __future__ import annotations

import signal
from collections.abc import Sequence
from dataclasses import dataclass

from kittiwake.client import Client, LeaseRef
from kittiwake.worker.ledger import Entry

WORKER_LOST = "WORKER_LOST"
MAX_ITEMS_PER_REQUEST = 1000


def exit_description(returncode: int) -> str:
    """How a process ended, from its return code (negative: the signal that killed it)."""
    if returncode >= 0:
        return f"exited with status {returncode}"
    try:
        return f"died of {signal.Signals(-returncode).name}"
    except ValueError:
        return f"died of signal {-returncode}"


def lost_reason(pid: int, returncode: int) -> str:
    """The failure reason of a task lost with process `pid`."""
    return f"{WORKER_LOST}: process {pid} {exit_description(returncode)}"


@dataclass(slots=True)
class HandedBack:
    """What `hand_back` did: tasks released (an attempt counted), returned (none), and already gone."""

    released: int = 0
    returned: int = 0
    gone: int = 0


def hand_back(client: Client, entries: Sequence[Entry], reason: str) -> HandedBack:
    """Give a dead process's tasks back (see the module docstring); raises the client's error when
    the broker cannot be reached (the tasks then come back when their leases run out)."""
    done = HandedBack()
    running = [entry for entry in entries if entry.running]
    for start in range(0, len(running), MAX_ITEMS_PER_REQUEST):
        refs = [lease_ref(entry) for entry in running[start : start + MAX_ITEMS_PER_REQUEST]]
        outcomes = client.release(refs, reason)
        done.released += sum(1 for outcome in outcomes if outcome.ok)
        done.gone += sum(1 for outcome in outcomes if not outcome.ok)
    waiting = [entry for entry in entries if not entry.running]
    for start in range(0, len(waiting), MAX_ITEMS_PER_REQUEST):
        refs = [lease_ref(entry) for entry in waiting[start : start + MAX_ITEMS_PER_REQUEST]]
        outcomes = client.release(refs, "RETURNED", reject=True)
        done.returned += sum(1 for outcome in outcomes if outcome.ok)
        done.gone += sum(1 for outcome in outcomes if not outcome.ok)
    return done


def lease_ref(entry: Entry) -> LeaseRef:
    return LeaseRef(entry.task.queue, entry.task.pid, entry.task.lease_id)

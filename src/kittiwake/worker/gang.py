"""Gang tasks (``@app.task(needs=N, gang_timeout=secs)``): one run on N worker slots at once.

A gang assembles with queue operations only (CloudKon-HPC §3.2.1b):

* The slot that leases the gang task is rank 0, the leader. It enqueues N-1
  *join* tasks into ``<queue>.gang`` (same consistency group), each naming
  the gang, the leader's address and the gang's mailbox queue
  ``<queue>.gang.<gang id>``.
* Any worker slot serving ``<queue>.gang`` leases a join, posts its own
  address into the mailbox directed (``receiver``) to the leader — in the
  same update that dequeues the join — and waits for a message directed to
  itself in the mailbox.
* The leader leases N-1 addresses from its mailbox (directed to it) within
  ``gang_timeout``. Then it sends each member its rank and the roster in one
  update, and every slot runs the function with ``KITTIWAKE_RANK``,
  ``KITTIWAKE_SIZE`` and ``KITTIWAKE_PEERS`` (the slots' addresses, rank
  order, comma-separated) in its environment and in `gang_info()`.
* Otherwise it cancels the joins nobody claimed (they go to
  ``<queue>.gang.dead`` with reason GANG_TIMEOUT), tells the members that
  joined to stand down, and puts the task back where it was (same queue, same
  pid: dequeued and re-enqueued in one update), so a gang that does not
  assemble is not a failed attempt and its handle keeps following it; it is
  tried again, ``gang_timeout`` at a time, until it assembles or is cancelled.

Only the leader's return value is the task's result. A slot's address is
``<worker id>/<slot thread>``. The environment variables are process-wide:
with ``--concurrency`` above 1 read `gang_info()` instead. Serve gang queues
with ``--prefetch 0``, so a slot busy leading does not hold joins it cannot run.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import time
from typing import TYPE_CHECKING, Any

from kittiwake import errors
from kittiwake.app.envelope import DELAYED_SUFFIX, TASK_ID_HEADER

if TYPE_CHECKING:
    from kittiwake.worker.heartbeat import Held
    from kittiwake.worker.runner import TaskRunner

log = logging.getLogger("kittiwake.worker.gang")

GANG_JOIN = "kittiwake.gang_join"
GANG_SUFFIX = ".gang"
MAILBOX_LEASE_SECS = 60.0

_local = threading.local()


def gang_queue_of(queue: str) -> str:
    return queue + GANG_SUFFIX


def mailbox_of(queue: str, gang_id: str) -> str:
    return f"{queue}{GANG_SUFFIX}.{gang_id}"


def gang_info() -> dict[str, Any] | None:
    """The running gang task's ``{"rank", "size", "peers"}`` on this slot; None outside a gang."""
    return getattr(_local, "info", None)


def join_task(*args: Any) -> None:
    """The built-in join task; a worker runs it through `run_member`, never as a function."""
    raise RuntimeError("gang join tasks are run by workers, not called")


def slot_address(worker_id: str) -> str:
    return f"{worker_id}/{threading.current_thread().name}"


class _Gang:
    """Sets the gang's environment for one run on this slot."""

    def __init__(self, rank: int, size: int, peers: list[str]) -> None:
        self.info = {"rank": rank, "size": size, "peers": list(peers)}

    def __enter__(self) -> None:
        _local.info = self.info
        os.environ["KITTIWAKE_RANK"] = str(self.info["rank"])
        os.environ["KITTIWAKE_SIZE"] = str(self.info["size"])
        os.environ["KITTIWAKE_PEERS"] = ",".join(self.info["peers"])

    def __exit__(self, *exc_info: object) -> None:
        _local.info = None
        for name in ("KITTIWAKE_RANK", "KITTIWAKE_SIZE", "KITTIWAKE_PEERS"):
            os.environ.pop(name, None)


def lead(runner: TaskRunner, held: Held, needs: int, gang_timeout: float) -> _Gang | list[dict[str, Any]]:
    """Assemble a gang for `held` as rank 0: the environment to run in, or, when it did not
    assemble, the tasks for the update that puts the task back (see the module docstring)."""
    client, serializer, task = runner.client, runner.serializer, held.task
    me = slot_address(runner.worker_id)
    headers = task.headers or {}
    task_id = headers.get(TASK_ID_HEADER, task.pid)
    # a queue-name-safe id, new for every assembly (a task id may be any printable idempotency key)
    gang_id = f"{hashlib.sha1(task_id.encode()).hexdigest()[:16]}-{time.time_ns() % 10**12}"
    base_queue = task.queue[: -len(DELAYED_SUFFIX)] if task.queue.endswith(DELAYED_SUFFIX) else task.queue
    mailbox = mailbox_of(base_queue, gang_id)
    joins = [
        {"queue": gang_queue_of(base_queue), "pid": f"{gang_id}-{n}", "max_attempts": 1,
         "data": serializer.dump_call(GANG_JOIN, (gang_id, me, mailbox, gang_timeout, bytes(task.data)), {})}
        for n in range(1, needs)
    ]
    client.enqueue_many(joins)
    posts: list[Any] = []
    deadline = time.monotonic() + gang_timeout
    while len(posts) < needs - 1 and time.monotonic() < deadline:
        wait = max(0.0, min(1.0, deadline - time.monotonic()))
        posts += client.lease(mailbox, max_tasks=needs - 1 - len(posts), lease_secs=MAILBOX_LEASE_SECS,
                              receiver=me, wait_secs=wait)
    members = [bytes(post.data).decode() for post in posts]
    if len(posts) == needs - 1:
        roster = [me, *members]
        orders = [{"queue": mailbox, "pid": f"rank-{rank}", "receiver": member,
                   "data": serializer.dumps({"rank": rank, "size": needs, "peers": roster})}
                  for rank, member in enumerate(members, start=1)]
        client.update(dequeue=posts, enqueue=orders)
        log.info("gang %s assembled: %s", gang_id, ", ".join(roster))
        return _Gang(0, needs, roster)
    log.info("gang %s did not assemble within %.1f s (%d of %d); retrying later",
             gang_id, gang_timeout, len(posts) + 1, needs)
    try:
        client.cancel([(join["queue"], join["pid"]) for join in joins], "GANG_TIMEOUT")
    except errors.KittiwakeError:
        pass  # claimed joins are gone already
    stand_down = [{"queue": mailbox, "pid": f"abort-{n}", "receiver": member, "data": serializer.dumps({"abort": True})}
                  for n, member in enumerate(members)]
    if posts or stand_down:
        client.update(dequeue=posts, enqueue=stand_down)
    return [{"queue": task.queue, "pid": task.pid, "data": task.data, "headers": dict(headers),
             "max_attempts": task.max_attempts}]


def run_member(runner: TaskRunner, held: Held, args: list[Any]) -> _Gang | None:
    """Join the gang a join task names: post this slot's address to the leader (dequeuing the
    join in the same update) and wait for a rank; None when the gang gave up."""
    gang_id, leader, mailbox, gang_timeout = args[:4]
    client, task = runner.client, held.task
    me = slot_address(runner.worker_id)
    client.update(dequeue=[task], enqueue=[{"queue": mailbox, "pid": f"join-{task.pid}", "receiver": leader,
                                            "data": me.encode()}])
    deadline = time.monotonic() + float(gang_timeout) + 5.0
    while time.monotonic() < deadline:
        wait = max(0.0, min(1.0, deadline - time.monotonic()))
        got = client.lease(mailbox, max_tasks=1, lease_secs=MAILBOX_LEASE_SECS, receiver=me, wait_secs=wait)
        if got:
            client.update(dequeue=got)
            message = runner.serializer.loads(bytes(got[0].data))
            if message.get("abort"):
                return None
            return _Gang(int(message["rank"]), int(message["size"]), list(message["peers"]))
    return None

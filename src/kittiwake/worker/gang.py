"""Gang tasks (``@app.task(needs=N, gang_timeout=secs)``): one run on N worker slots at once.

A gang assembles with queue operations only (CloudKon-HPC §3.2.1b):

* The slot that leases the gang task is rank 0, the leader. It enqueues N-1
  *join* tasks into ``<queue>.gang`` (same consistency group), each naming
  the gang, the leader's address, the gang's mailbox queue
  ``<queue>.gang.<gang id>`` and the time by which the gang must assemble.
* Any worker slot serving ``<queue>.gang`` leases a join and keeps it leased
  (its heartbeat renews it) for as long as it belongs to the gang: the join's
  lease is how the leader knows the member is alive. It posts its address into
  the mailbox, directed (``receiver``) to the leader, in an update that also
  renews the join (a join cancelled meanwhile posts nothing), and waits for
  a message directed to itself. Likewise the gang task's lease tells members
  that the leader lives: a join leased after its gang's assembly time, or
  whose leader no longer holds the gang task, is finished at once, and a
  member waiting for its rank stands down when the leader's lease is gone.
* The leader leases N-1 addresses from its mailbox (directed to it) within
  ``gang_timeout``. Then it sends each member its rank and the roster in one
  update, and every slot runs the function with ``KITTIWAKE_RANK``,
  ``KITTIWAKE_SIZE`` and ``KITTIWAKE_PEERS`` (the slots' addresses, rank
  order, comma-separated) in its environment and in `gang_info()`.
* A member that finished its rank dequeues its join and posts *done* to the
  leader in one update. After its own rank the leader waits for every
  member's done. A member whose join left the queue without a done (its
  lease ran out: the member died, or stalled past its lease) was lost: the
  attempt fails as WORKER_LOST and is retried like any lost worker's task —
  the whole gang runs again. So a gang task succeeds only once every rank of
  one assembly ran to its end; the leader's return value is the result.
* A gang that does not assemble in time: the leader cancels the joins nobody
  claimed (they go to ``<queue>.gang.dead`` with reason GANG_TIMEOUT), tells
  the members that joined to stand down, and *parks* the task: it keeps the
  lease (so it is not a failed attempt, and tasks waiting on it keep waiting
  — a dequeue and re-enqueue would count as finishing it), frees its slot
  for other work, and leads again after a short pause, ``gang_timeout`` at a
  time, until the gang assembles or the task is cancelled.

A join names the queue the member writes into (the mailbox, where it posts
its address and from which it withdraws messages directed to the leader it
names), and the worker does that with its own rights. So a join runs only
when leased from a gang queue ``<queue>.gang`` — which only leaders fill —
and only when its mailbox is one of that queue's, ``<queue>.gang.<gang id>``
(`join_refusal`): a join a producer of ``<queue>`` wrote into ``<queue>``
itself, naming another user's queue as its mailbox, is dead-lettered unrun
(UNKNOWN_TASK) instead of posting there and dequeuing that queue's messages.

On a cluster (`kittiwake.cluster.routing`) a gang lives on one node: every join's pid carries
the gang id as its routing tag (``{<gang id>}-<n>``), and so does every message of its mailbox
(``join-{<gang id>}-<n>``, ``done-…`` embed the join's pid; ``{<gang id>}rank-<n>``,
``{<gang id>}abort-<n>``). So a member's post renews its join in one update on one node, the
leader's orders dequeue the posts in one update on one node, and a lookup of a join (`get`)
goes straight there; the mailbox and ``<queue>.gang`` queues are spread, and leases of them find
that node by the cluster's holders. The gang task itself stays where it was routed (a job's
node, say).

A slot's address is ``<worker id>/<slot thread>``. The environment variables
are process-wide: with ``--concurrency`` above 1 read `gang_info()` instead.
Serve gang queues with ``--prefetch 0``, so a slot busy leading does not hold
joins it cannot run.

Theory of operation, by the messages in a gang's mailbox (all directed):

    join-<join pid>   member → leader   "my address"      dequeued by the leader with the orders
    rank-<n>          leader → member   rank and roster   dequeued by the member on receipt
    abort-<n>         leader → member   "stand down"      dequeued by the member on receipt
    done-<join pid>   member → leader   "my rank ended"   dequeued by the leader on receipt

A clean gang leaves its mailbox empty. What a kill can leave: a leader killed
after it took the members' addresses leaves them (leased to it; a member that
gives up withdraws its own only if the leader never took it), and a leader
killed just before its members finish may get a done nobody reads.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import time
from typing import TYPE_CHECKING, Any, Protocol

from kittiwake import errors
from kittiwake.app import tracing
from kittiwake.app.envelope import gang_queue_of, undelayed_queue_of
from kittiwake.cluster.routing import tagged
from kittiwake.constants import GANG_SUFFIX, GROUP_SEPARATOR, TASK_ID_HEADER

if TYPE_CHECKING:
    from kittiwake.app.serialization import Serializer
    from kittiwake.client import LeasedTask
    from kittiwake.client.interfaces import QueueClient
    from kittiwake.worker.heartbeat import Held

log = logging.getLogger("kittiwake.worker.gang")

GANG_JOIN = "kittiwake.gang_join"
MAILBOX_LEASE_SECS = 60.0
MEMBER_GRACE_SECS = 5.0  # a member waits for its rank this long beyond the gang's assembly time
STALE_JOIN_SLACK_SECS = 1.0  # clocks of different hosts may differ a little
MEMBER_CHECK_SECS = 1.0  # how often a leader waiting for done messages looks at its members' joins
PARK_SECS = (0.2, 1.0)  # a parked gang leads again after a pause in this range

_local = threading.local()


class RankRunner(Protocol):
    """What a gang needs of the task runner of the slot it runs on: the worker's client, the app's
    serializer and the worker's id (its slots' addresses start with it)."""

    @property
    def client(self) -> QueueClient: ...

    @property
    def serializer(self) -> Serializer: ...

    @property
    def worker_id(self) -> str: ...


def mailbox_of(queue: str, gang_id: str) -> str:
    return f"{queue}{GANG_SUFFIX}.{gang_id}"


def join_refusal(queue: str, args: Any) -> str | None:
    """Why a join leased from `queue` with call arguments `args` must not run; None when it may
    (see the module docstring: a join runs only from a gang queue, posting into its mailboxes)."""
    if not queue.endswith(GANG_SUFFIX):
        return f"a gang join runs only from a gang queue (<queue>{GANG_SUFFIX}), not from {queue[:255]!r}"
    if not (isinstance(args, list) and len(args) >= 4 and isinstance(args[0], str) and isinstance(args[2], str)):
        return "a gang join's arguments are (gang id, leader, mailbox, gang timeout, ...)"
    gang_id, mailbox = args[0], args[2]
    if not gang_id or GROUP_SEPARATOR in gang_id or mailbox != f"{queue}.{gang_id}":
        return (f"a gang join from {queue[:255]!r} posts only into its mailbox {queue[:255]}.<gang id>, "
                f"not {mailbox[:255]!r}")
    return None


def gang_info() -> dict[str, Any] | None:
    """The running gang task's ``{"rank", "size", "peers", "gang"}`` on this slot (``gang``: the
    assembly's id, the same on every rank, new at every assembly); None outside a gang."""
    return getattr(_local, "info", None)


def join_task(*args: Any) -> None:
    """The built-in join task; a worker runs it through `run_member`, never as a function."""
    raise RuntimeError("gang join tasks are run by workers, not called")


def slot_address(worker_id: str) -> str:
    return f"{worker_id}/{threading.current_thread().name}"


class Gang:
    """One assembled gang as one slot sees it; a context manager that sets the gang's environment."""

    def __init__(self, rank: int, size: int, peers: list[str], gang_id: str, mailbox: str,
                 members: dict[str, str] | None = None, join_queue: str = "") -> None:
        self.info: dict[str, Any] = {"rank": rank, "size": size, "peers": list(peers), "gang": gang_id}
        self.mailbox = mailbox
        self.members = members or {}  # leader only: join pid -> member address
        self.join_queue = join_queue  # leader only: where the members' joins are

    def __enter__(self) -> None:
        _local.info = self.info
        os.environ["KITTIWAKE_RANK"] = str(self.info["rank"])
        os.environ["KITTIWAKE_SIZE"] = str(self.info["size"])
        os.environ["KITTIWAKE_PEERS"] = ",".join(self.info["peers"])

    def __exit__(self, *exc_info: object) -> None:
        _local.info = None
        for name in ("KITTIWAKE_RANK", "KITTIWAKE_SIZE", "KITTIWAKE_PEERS"):
            os.environ.pop(name, None)


def lead(runner: RankRunner, held: Held, needs: int, gang_timeout: float) -> Gang | None:
    """Assemble a gang for `held` as rank 0: the gang to run in, or None when it did not
    assemble in time (the caller parks the task; see the module docstring)."""
    client, serializer, task = runner.client, runner.serializer, held.task
    me = slot_address(runner.worker_id)
    headers = task.headers or {}
    task_id = headers.get(TASK_ID_HEADER, task.pid)
    # a queue-name-safe id, new for every assembly (a task id may be any printable idempotency key)
    gang_id = f"{hashlib.sha1(task_id.encode()).hexdigest()[:16]}-{time.time_ns() % 10**12}"
    base_queue = undelayed_queue_of(task.queue)
    mailbox = mailbox_of(base_queue, gang_id)
    assemble_by = time.time() + gang_timeout
    joins: list[dict[str, Any]] = [  # tasks to enqueue: their fields by name
        {"queue": gang_queue_of(base_queue), "pid": tagged(gang_id, f"-{n}"), "max_attempts": 1,
         "data": serializer.dump_call(GANG_JOIN, (gang_id, me, mailbox, gang_timeout, bytes(task.data), assemble_by,
                                                  task.queue, task.pid, runner.worker_id), {})}
        for n in range(1, needs)
    ]
    trace_headers = tracing.context_headers()  # the members' runs go on in the leader's trace
    if trace_headers:
        for join in joins:
            join["headers"] = dict(trace_headers)
    client.enqueue_many(joins)
    posts: list[LeasedTask] = []
    deadline = time.monotonic() + gang_timeout
    while len(posts) < needs - 1 and time.monotonic() < deadline:
        wait = max(0.0, min(1.0, deadline - time.monotonic()))
        posts += client.lease(mailbox, max_tasks=needs - 1 - len(posts), lease_secs=MAILBOX_LEASE_SECS,
                              receiver=me, wait_secs=wait)
    members = {post.pid.removeprefix("join-"): bytes(post.data).decode() for post in posts}
    if len(posts) == needs - 1:
        roster = [me, *members.values()]
        orders = [{"queue": mailbox, "pid": tagged(gang_id, f"rank-{rank}"), "receiver": member,
                   "data": serializer.dumps({"rank": rank, "size": needs, "peers": roster})}
                  for rank, member in enumerate(members.values(), start=1)]
        client.update(dequeue=posts, enqueue=orders)
        log.info("gang %s assembled: %s", gang_id, ", ".join(roster))
        return Gang(0, needs, roster, gang_id, mailbox, members, gang_queue_of(base_queue))
    log.info("gang %s did not assemble within %.1f s (%d of %d); trying again later",
             gang_id, gang_timeout, len(posts) + 1, needs)
    unclaimed = [(join["queue"], join["pid"]) for join in joins if join["pid"] not in members]
    try:
        client.cancel(unclaimed, "GANG_TIMEOUT")  # a join leased but not yet posted: its post is refused
    except errors.KittiwakeError:
        pass  # claimed joins are gone already
    # members whose join is no longer leased died while waiting: nobody would read their abort
    stand_down = [{"queue": mailbox, "pid": tagged(gang_id, f"abort-{n}"), "receiver": member, "data": serializer.dumps({"abort": True})}
                  for n, (join_pid, member) in enumerate(members.items())
                  if _holds_join(client, gang_queue_of(base_queue), join_pid)]
    if posts:
        client.update(dequeue=posts, enqueue=stand_down)
    return None


def await_members(runner: RankRunner, gang: Gang) -> list[str]:
    """After rank 0 ran: wait until every member posted done or was lost; returns the lost members'
    addresses (their orders, if never read, are withdrawn)."""
    client, me = runner.client, slot_address(runner.worker_id)
    waiting = dict(gang.members)  # join pid -> address
    lost: list[str] = []
    check_at = time.monotonic() + MEMBER_CHECK_SECS

    def collect(wait_secs: float) -> None:
        done = client.lease(gang.mailbox, max_tasks=max(1, len(waiting)), lease_secs=MAILBOX_LEASE_SECS,
                            receiver=me, wait_secs=wait_secs)
        for message in done:
            report = runner.serializer.loads(bytes(message.data))
            waiting.pop(message.pid.removeprefix("done-"), None)
            if not report.get("ok", True):
                log.warning("gang %s: rank %s failed: %s", gang.info["gang"], report.get("rank"), report.get("error"))
        if done:
            client.dequeue(done)

    while waiting:
        collect(wait_secs=max(0.0, min(1.0, check_at - time.monotonic())))
        if not waiting or time.monotonic() < check_at:
            continue
        check_at = time.monotonic() + MEMBER_CHECK_SECS
        gone = [pid for pid in waiting if not _holds_join(client, gang.join_queue, pid)]
        if gone:
            collect(wait_secs=0.0)  # a member that finished dequeued its join and posted done atomically
            for pid in gone:
                if pid in waiting:
                    lost.append(waiting.pop(pid))
    for member in lost:
        _withdraw(runner, gang.mailbox, member)
    return lost


def _holds_join(client: QueueClient, join_queue: str, join_pid: str) -> bool:
    try:
        return client.get(join_queue, join_pid).state == "leased"
    except errors.TaskNotFound:
        return False


def _withdraw(runner: RankRunner, mailbox: str, receiver: str) -> None:
    """Dequeue the messages in `mailbox` directed to `receiver`, who will not read them."""
    try:
        stale = runner.client.lease(mailbox, max_tasks=100, lease_secs=MAILBOX_LEASE_SECS, receiver=receiver)
        if stale:
            runner.client.dequeue(stale)
    except errors.KittiwakeError as error:
        log.warning("withdrawing messages for %s from %s: %s", receiver, mailbox, error)


def run_member(runner: RankRunner, held: Held, args: list[Any]) -> Gang | None:
    """Join the gang a join task names: post this slot's address to the leader (renewing the
    join in the same update) and wait for a rank; None when the gang gave up, went stale or
    lost its leader. The join stays leased: the caller finishes it (with a done message after a run)."""
    gang_id, leader, mailbox, gang_timeout = args[:4]
    assemble_by = float(args[5]) if len(args) > 5 else time.time() + float(gang_timeout)
    leader_task = (args[6], args[7], args[8]) if len(args) > 8 else None  # queue, pid, worker id
    client, task = runner.client, held.task
    if time.time() > assemble_by + STALE_JOIN_SLACK_SECS or not _leader_alive(client, leader_task):
        log.info("gang %s: join %s came after its leader gave up; finishing it", gang_id, task.pid)
        return None
    me = slot_address(runner.worker_id)
    post = {"queue": mailbox, "pid": f"join-{task.pid}", "receiver": leader, "data": me.encode()}
    client.update(renew=[task], enqueue=[post], lease_secs=held.lease_secs)
    deadline = time.monotonic() + max(0.0, assemble_by - time.time()) + MEMBER_GRACE_SECS
    check_at = time.monotonic() + MEMBER_CHECK_SECS
    while time.monotonic() < deadline:
        wait = max(0.0, min(1.0, deadline - time.monotonic(), check_at - time.monotonic()))
        got = client.lease(mailbox, max_tasks=1, lease_secs=MAILBOX_LEASE_SECS, receiver=me, wait_secs=wait)
        if got:
            client.dequeue(got)
            message = runner.serializer.loads(bytes(got[0].data))
            if message.get("abort"):
                return None
            return Gang(int(message["rank"]), int(message["size"]), list(message["peers"]), gang_id, mailbox)
        if held.lost:  # the leader gave up and cancelled our join before it saw our address
            log.info("gang %s: join %s was withdrawn; standing down", gang_id, task.pid)
            break
        if time.monotonic() >= check_at:
            check_at = time.monotonic() + MEMBER_CHECK_SECS
            if not _leader_alive(client, leader_task):
                log.info("gang %s: leader %s lost its lease; standing down", gang_id, leader)
                break
    else:
        log.info("gang %s: no rank from leader %s in time; standing down", gang_id, leader)
    _withdraw(runner, mailbox, leader)  # our address, if the leader never took it
    return None


def _leader_alive(client: QueueClient, leader_task: tuple[str, str, str] | None) -> bool:
    """Whether the leader's worker still holds the gang task (unknown for old joins: assume so)."""
    if leader_task is None:
        return True
    queue, pid, worker = leader_task
    try:
        view = client.get(queue, pid)
    except errors.TaskNotFound:
        return False
    return view.state == "leased" and view.lease_owner == worker


def done_message(runner: RankRunner, held: Held, gang: Gang, args: list[Any], error: BaseException | None) -> dict[str, Any] | None:
    """The member's done, enqueued in the update that dequeues its join; None when the leader no
    longer holds the gang task (it died: nobody would read it, and the task runs again anyway)."""
    leader = args[1]
    leader_task = (args[6], args[7], args[8]) if len(args) > 8 else None
    try:
        if not _leader_alive(runner.client, leader_task):
            log.info("gang %s: leader %s is gone; no done to send", gang.info["gang"], leader)
            return None
    except errors.KittiwakeError:
        pass  # send it: a done nobody reads costs less than a gang run again
    report: dict[str, Any] = {"rank": gang.info["rank"], "ok": error is None}
    if error is not None:
        report["error"] = f"{type(error).__name__}: {error}"[:1000]
    return {"queue": gang.mailbox, "pid": f"done-{held.task.pid}", "receiver": leader,
            "data": runner.serializer.dumps(report)}

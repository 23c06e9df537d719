"""Routing: which node of a cluster a call goes to, decided from the map and the call alone.

**Slots.** `slot_of(key, slots)` is the first 8 bytes of blake2b (digest size 8) of the key's UTF-8,
read big-endian, modulo `slots`: the same in every process, language and run (Python's `hash` is
salted per process), and uniform even for keys that differ in a counter's last digit.

**Named groups live whole on one node.** A queue `G#name` goes to the owner of `slot_of(G)`, as in
TaskMaster's sharding by group: every queue of a group is on one node, so updates, joins, flows,
dead letters, delayed tasks, reply queues and ticks in the group, and their atomicity, are as on one
broker.

**The default group is spread.** A queue without `#` lives on every node. A call naming a task
(queue `q`, pid `p`) is routed by the first rule that applies, after folding a derived queue onto
the task it belongs to (a tick marker `q.ticks-done` onto `q`; a dead letter `q.dead`, pid
`p~<death>`, onto `p`; a delayed entry `q.delayed`, pid `<due>-<id>`, onto `id`), so each lives on
the node of its task. This is the one table of what stays together:

==================================  =============================  ====================================
the pid                             goes to                        why
==================================  =============================  ====================================
holds a routing tag ``{t}`` (the    the owner of `slot_of("\\0"     things that must stay together share
first ``{…}`` with something in     + t)` (`tag_key`), whatever    a tag, as Redis Cluster's hash tags:
it, as in ``{job-7}.step-2``)       the queue                      a job's DAG (children wait for their
                                                                   parents on one broker), a gang and
                                                                   its joins, a flow run's tokens
17 digits (a broker-issued FIFO     the node whose index in the    a FIFO task stays where it was
pid, or `pid_at(…)`) whose          map is the number modulo       pushed, and its pid says where:
residue names a node                `ID_STRIDE`                    get, cancel and its dead letters
                                                                   need no table
anything else                       the owner of                   dedupe by pid stays exact across the
                                    `slot_of(q + "\\0" + p)`        cluster
no pid: a FIFO push, a lease, a     `Spread`: any live node        FIFO pushes spread evenly
reply queue ``_replies.<app>``                                     (`FifoSpreader`); a lease asks the
                                                                   local node first, then a holder; a
                                                                   result is posted where its task was
                                                                   leased (one update)
==================================  =============================  ====================================

A lease id names its node the same way (`ClusterMap.node_of_id`): renew, dequeue, release and the
dequeues of an update go to the node that leased. The kinds of slot key cannot collide: `"\\0"`
never occurs in a queue name, so a group's key has none, a (queue, pid) key has one after a
non-empty queue, and a tag key starts with it.

A node asked for a key it does not own answers `errors.WrongShard` with its map's epoch; the
client fetches the map and routes again.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from kittiwake import errors
from kittiwake.cluster.cluster_map import ClusterMap
from kittiwake.constants import DEAD_SUFFIX, DELAYED_SUFFIX, FIFO_PID_DIGITS, GROUP_SEPARATOR, TICKS_DONE_SUFFIX

_KEY_SEPARATOR = "\0"  # never in a queue name, so (queue, pid) keys cannot collide across queues
_DEAD_PID_SEPARATOR = "~"  # `<pid>~<death time>`: the death time has no "~", the pid may
_DELAYED_PID_SEPARATOR = "-"  # `pid_at(due)-<task id>`: the due time is digits only


def slot_of(key: str, slots: int) -> int:
    """The slot of `key` among `slots`: blake2b-64 of its UTF-8, big-endian, modulo `slots`."""
    if slots < 1:
        raise errors.BadRequest(f"slots must be at least 1, not {slots}")
    digest = hashlib.blake2b(key.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") % slots


def tag_key(tag: str) -> str:
    """The routing key of a routing tag (a job id, a gang's task id)."""
    return _KEY_SEPARATOR + tag


def fold(queue: str, pid: str) -> tuple[str, str]:
    """The task a derived queue's entry belongs to: a tick marker, a dead letter or a delayed
    entry folds onto (queue, pid) of its task; anything else is itself."""
    if queue.endswith(TICKS_DONE_SUFFIX):
        return queue.removesuffix(TICKS_DONE_SUFFIX), pid
    if queue.endswith(DEAD_SUFFIX) and _DEAD_PID_SEPARATOR in pid:
        return queue.removesuffix(DEAD_SUFFIX), pid.rpartition(_DEAD_PID_SEPARATOR)[0]
    if queue.endswith(DELAYED_SUFFIX) and _DELAYED_PID_SEPARATOR in pid:
        return queue.removesuffix(DELAYED_SUFFIX), pid.partition(_DELAYED_PID_SEPARATOR)[2]
    return queue, pid


def task_key(queue: str, pid: str) -> str:
    """The slot key of a task `pid` of a default-group queue (after `fold`), when neither a tag
    nor a FIFO pid routes it."""
    queue, pid = fold(queue, pid)
    return queue + _KEY_SEPARATOR + pid


def tag_of(pid: str) -> str | None:
    """The routing tag a pid carries: what is inside its first `{…}` with something in it."""
    start = pid.find("{")
    while start >= 0:
        end = pid.find("}", start + 1)
        if end < 0:
            return None
        if end > start + 1:
            return pid[start + 1:end]
        start = pid.find("{", end + 1)
    return None


def tagged(tag: str, name: str) -> str:
    """A pid that carries routing tag `tag`: every pid made this way with one tag lands on one node."""
    return "{" + tag + "}" + name


def is_fifo_pid(pid: str) -> bool:
    """Whether `pid` is shaped like a broker-issued FIFO pid (FIFO_PID_DIGITS ASCII digits)."""
    return len(pid) == FIFO_PID_DIGITS and pid.isascii() and pid.isdigit()


@dataclass(frozen=True)
class Owned:
    """The call goes to `node`: the owner of `slot` (the slot of `key`), or, for a FIFO pid or a
    lease id (`slot` None), the node the id names."""

    node: str
    slot: int | None
    key: str


@dataclass(frozen=True)
class Spread:
    """The call may go to any live node; the client chooses (`FifoSpreader` for an enqueue,
    the local node first for a lease)."""

    queue: str


Route = Owned | Spread


def route(cluster: ClusterMap, queue: str, pid: str | None = None) -> Route:
    """Where a call on `queue` goes: for a task, its `pid` (None for a FIFO push); for a
    queue-wide call (a lease, a count), no pid. The module docstring gives the rules."""
    group, sep, _ = queue.rpartition(GROUP_SEPARATOR)
    if sep:
        return _owner(cluster, group)
    if pid is None:
        return Spread(queue)
    queue, pid = fold(queue, pid)
    tag = tag_of(pid)
    if tag is not None:
        return _owner(cluster, tag_key(tag))
    if is_fifo_pid(pid):
        node = cluster.node_of_id(int(pid))
        if node is not None:
            return Owned(node, None, queue + _KEY_SEPARATOR + pid)
    return _owner(cluster, queue + _KEY_SEPARATOR + pid)


def dead_letter_route(cluster: ClusterMap, queue: str, pid: str) -> Route:
    """Where a dead letter named as `requeue_dead` and `purge_dead` take it lives: `queue` is `q` or
    `q.dead`, `pid` the dead letter's own (`<pid>~<death>`, the death a FIFO pid) or its task's
    original pid, meaning all its dead letters; with its task either way."""
    base = queue.removesuffix(DEAD_SUFFIX)
    head, sep, tail = pid.rpartition(_DEAD_PID_SEPARATOR)
    return route(cluster, base, head if sep and is_fifo_pid(tail) else pid)


def lease_route(cluster: ClusterMap, queue: str, pid: str, lease_id: int) -> Owned:
    """The node that leased: a named group's owner, else the node lease id `lease_id` names."""
    group, sep, _ = queue.rpartition(GROUP_SEPARATOR)
    if sep:
        return _owner(cluster, group)
    node = cluster.node_of_id(lease_id)
    if node is None:
        # no node issues this residue: the lease is not one of this cluster's; its task's node
        # refuses it as it refuses any stale lease
        decision = route(cluster, queue, pid)
        assert isinstance(decision, Owned)
        return decision
    return Owned(node, None, queue + _KEY_SEPARATOR + pid)


def _owner(cluster: ClusterMap, key: str) -> Owned:
    slot = slot_of(key, cluster.slots)
    return Owned(cluster.owner(slot), slot, key)


class FifoSpreader:
    """Chooses the node of each FIFO task: round-robin over the live nodes from a random start, so
    over any N pushes with the same live nodes each gets `floor` or `ceil` of N / nodes. A node
    marked down is skipped for `down_secs` of `clock` (then tried again); sans-IO, the caller
    reports failures and passes the clock and the randomness."""

    def __init__(
        self,
        nodes: Sequence[str],
        *,
        rng: random.Random,
        clock: Callable[[], float],
        down_secs: float = 1.0,
    ) -> None:
        if not nodes:
            raise errors.BadRequest("a FIFO spreader needs at least one node")
        self._nodes = tuple(nodes)
        self._clock = clock
        self._down_secs = down_secs
        self._down_until: dict[str, float] = {}
        # a random start, so producers started together do not all push to the first node first
        self._next = rng.randrange(len(self._nodes))

    def mark_down(self, node: str) -> None:
        """`node` refused or failed a push: skip it for `down_secs`."""
        self._down_until[node] = self._clock() + self._down_secs

    def mark_up(self, node: str) -> None:
        """`node` answered again: choose it in its turn."""
        self._down_until.pop(node, None)

    def is_down(self, node: str) -> bool:
        """Whether `node` is marked down (until `mark_up`, even when its time has passed)."""
        return node in self._down_until

    def down_now(self, node: str) -> bool:
        """Whether `node` is marked down and its `down_secs` have not passed."""
        return self._down_until.get(node, 0.0) > self._clock()

    def any_down(self) -> bool:
        """Whether some node is marked down (its time may have passed)."""
        return bool(self._down_until)

    def live(self) -> tuple[str, ...]:
        """The nodes not marked down now, in order."""
        now = self._clock()
        return tuple(node for node in self._nodes if self._down_until.get(node, now) <= now)

    def choose(self) -> str:
        """The node for the next FIFO push; BrokerUnreachable when every node is marked down."""
        now = self._clock()
        for offset in range(len(self._nodes)):
            index = (self._next + offset) % len(self._nodes)
            node = self._nodes[index]
            if self._down_until.get(node, now) <= now:
                self._next = index + 1
                return node
        raise errors.BrokerUnreachable(f"every node of the cluster is down ({', '.join(self._nodes)})")

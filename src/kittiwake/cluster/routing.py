"""Routing: which node of a cluster a call goes to, decided from the map and the call alone.

**Slots.** `slot_of(key, slots)` is the first 8 bytes of blake2b (digest size 8) of the key's UTF-8,
read big-endian, modulo `slots`: the same in every process, language and run (Python's `hash` is
salted per process), and uniform even for keys that differ in a counter's last digit.

**Named groups live whole on one node.** A queue `G#name` goes to the owner of `slot_of(G)`, as in
TaskMaster's sharding by group: every queue of a group is on one node, so updates, joins, flows,
dead letters, delayed tasks, reply queues and ticks in the group, and their atomicity, are as on one
broker.

**The default group is spread.** A queue without `#` lives on every node. A call is routed by its
*routing key*, the first of these rules that applies (the table of what must stay together; a
starting point that grows with the app layer):

===============================  =====================================  ===============================
what                             routing key                            why
===============================  =====================================  ===============================
a task with a routing tag `t`    ``"\\0" + t`` (`tag_key`)               things that must stay together
                                                                        share a tag: a job's DAG (tag =
                                                                        the job id; children wait for
                                                                        parents on one broker), a gang
                                                                        and its `.gang` joins (tag = the
                                                                        gang task's id)
a tick marker `q.ticks-done`,    ``q + "\\0" + pid``, the tick's own    the marker collapses a late
pid `p`                          key                                    scheduler's tick on its node
a dead letter `q.dead`,          ``q + "\\0" + p``, the original task   read and requeued by key where
pid `p~<death>`                  of a keyed task                        the task lived
a delayed task `q.delayed`,      ``q + "\\0" + id``                     it turns into task `id` of `q`
pid `<due>-<id>`                                                        in one update, on one node
a task of `q` with pid `p`       ``q + "\\0" + p``                      dedupe by pid stays exact
                                                                        across the cluster
a task of `q` without a pid      none: `Spread`                         FIFO, spread over live nodes
(FIFO), a lease, a reply queue                                          by `FifoSpreader`; a lease asks
`_replies.<app>`                                                        the local node first; a result
                                                                        is posted on the node that
                                                                        leased its task (one update)
===============================  =====================================  ===============================

The kinds of key cannot collide: `"\\0"` never occurs in a queue name, so a group's key has none,
a (queue, pid) key has one after a non-empty queue, and a tag key starts with it. A FIFO task's dead letters,
ticks and delayed entries live where it did: reading them is a `Spread` call.

A node asked for a key whose slot it does not own answers `errors.WrongShard` with its map's epoch;
the client fetches the map and routes again.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from kittiwake import errors
from kittiwake.cluster.cluster_map import ClusterMap
from kittiwake.constants import DEAD_SUFFIX, DELAYED_SUFFIX, GROUP_SEPARATOR, TICKS_DONE_SUFFIX

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


def task_key(queue: str, pid: str) -> str:
    """The routing key of a task `pid` of a default-group queue, after the table's folding of
    tick markers, dead letters and delayed entries onto the task they belong to."""
    if queue.endswith(TICKS_DONE_SUFFIX):
        queue = queue.removesuffix(TICKS_DONE_SUFFIX)
    elif queue.endswith(DEAD_SUFFIX) and _DEAD_PID_SEPARATOR in pid:
        queue, pid = queue.removesuffix(DEAD_SUFFIX), pid.rpartition(_DEAD_PID_SEPARATOR)[0]
    elif queue.endswith(DELAYED_SUFFIX) and _DELAYED_PID_SEPARATOR in pid:
        queue, pid = queue.removesuffix(DELAYED_SUFFIX), pid.partition(_DELAYED_PID_SEPARATOR)[2]
    return queue + _KEY_SEPARATOR + pid


@dataclass(frozen=True)
class Owned:
    """The call goes to `node`, the owner of `slot` (the slot of `key`)."""

    node: str
    slot: int
    key: str


@dataclass(frozen=True)
class Spread:
    """The call may go to any live node; the client chooses (`FifoSpreader` for an enqueue,
    the local node first for a lease)."""

    queue: str


Route = Owned | Spread


def route(cluster: ClusterMap, queue: str, pid: str | None = None, *, tag: str | None = None) -> Route:
    """Where a call on `queue` goes: for a task, its `pid` (None for FIFO) and routing `tag`;
    for a queue-wide call (a lease, a count), neither. The module docstring gives the rules."""
    group, sep, _ = queue.rpartition(GROUP_SEPARATOR)
    if sep:
        key = group
    elif tag is not None:
        key = tag_key(tag)
    elif pid is not None:
        key = task_key(queue, pid)
    else:
        return Spread(queue)
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

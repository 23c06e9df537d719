"""Which nodes hold available tasks of each spread queue: this node's view, sans-IO.

Fabriq's metadata list, per node: a consumer whose local node is empty asks
`holders` and steals from a node known to hold tasks, one hop instead of a scan.

`Holdings` keeps two things:

* this node's own holdings: the default-group queues with available tasks as of
  its last commit (`observe`, fed from the engine after each committed pass,
  only for the queues the pass touched, and `observe_all` at start and at each
  full refresh), and the *flips* not yet announced: queues that came to hold
  tasks and queues that ran out since the last announcement (`take_flips`; a
  queue that flipped and flipped back is not announced). `snapshot` is every
  queue held now, for a full announcement;
* every peer's holdings, as its announcements said (`apply`), kept per
  *instance* of the peer: each broker process serving a node announces with an
  instance id of its own, and a node may be served by several at once (brokers
  sharing one PostgreSQL schema). A full announcement replaces what was known
  of that instance only, a partial one adds to and removes from it; a peer holds
  a queue when any of its instances says so. So a broker that has just started
  and holds nothing in memory yet cannot erase what a sibling announced.
  An instance not heard for `stale_secs` (`STALE_REFRESHES` of the announcer's
  full refreshes, which reach every peer every `REFRESH_SECS`) is forgotten: a peer
  down, or a broker replaced by a new instance, stops being named within that
  time. At most `MAX_INSTANCES` are kept per peer (the least recently heard
  goes first). Times are the caller's (`now`, in seconds).

A stale hint costs a client one empty lease; a missing one costs a scan (the
router sweeps the other nodes when `holders` names none,
`client.cluster_router.BLIND_SWEEP_SECS`).

`holders(queues, now)` answers from this view: for each queue, this node first
when it holds some, then the peers holding it in map order. Named-group queues
are not tracked: they live whole on their group's owner, which a client
reaches by routing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from kittiwake.constants import GROUP_SEPARATOR

STALE_REFRESHES = 3  # an instance not heard for this many of the announcer's full refreshes is forgotten
STALE_SECS = 15.0  # that, at the announcer's default `REFRESH_SECS` (5 s)
MAX_INSTANCES = 8  # instances kept per peer: brokers serving one node at once, and recent restarts
MAX_INSTANCE_CHARS = 64


def is_spread(queue: str) -> bool:
    """Whether `queue` is of the default group, spread over every node."""
    return GROUP_SEPARATOR not in queue


@dataclass
class _Instance:
    """What one broker process of a peer announced, and when it was last heard."""

    heard_at: float
    queues: set[str] = field(default_factory=set)


class Holdings:
    """This node's holdings and its peers', as announced (see the module docstring)."""

    def __init__(self, node: str, nodes: Sequence[str], *, stale_secs: float = STALE_SECS) -> None:
        self.node = node
        self.nodes = tuple(nodes)
        self.stale_secs = stale_secs
        self.local: set[str] = set()
        self._announced: set[str] = set()  # what the peers last heard of this node
        self._flipped: set[str] = set()  # queues whose holding changed since the last announcement
        self._peers: dict[str, dict[str, _Instance]] = {name: {} for name in self.nodes if name != node}

    # ----------------------------------------------------------------- local

    def observe(self, counts: Mapping[str, int]) -> None:
        """Available tasks of the spread queues a committed pass touched (0: none)."""
        for queue, available in counts.items():
            if not is_spread(queue):
                continue
            if available > 0:
                if queue not in self.local:
                    self.local.add(queue)
                    self._flipped.add(queue)
            elif queue in self.local:
                self.local.discard(queue)
                self._flipped.add(queue)

    def observe_all(self, counts: Mapping[str, int]) -> None:
        """Every queue's available tasks: queues absent from `counts` hold none."""
        missing = {queue: 0 for queue in self.local if queue not in counts}
        self.observe({**missing, **counts})

    def take_flips(self) -> tuple[list[str], list[str]]:
        """(came to hold, ran out) since the last call: what a partial announcement says."""
        holding = sorted(queue for queue in self._flipped if queue in self.local and queue not in self._announced)
        empty = sorted(queue for queue in self._flipped if queue not in self.local and queue in self._announced)
        self._flipped.clear()
        self._announced.update(holding)
        self._announced.difference_update(empty)
        return holding, empty

    @property
    def has_flips(self) -> bool:
        return bool(self._flipped)

    def snapshot(self) -> list[str]:
        """Every spread queue held now, for a full announcement (it also settles the flips)."""
        self._flipped.clear()
        self._announced = set(self.local)
        return sorted(self.local)

    # ----------------------------------------------------------------- peers

    def is_peer(self, name: str) -> bool:
        """Whether `name` is another node of the map."""
        return name in self._peers

    def apply(self, peer: str, holding: Iterable[str], empty: Iterable[str], full: bool, *,
              instance: str = "", now: float) -> None:
        """An announcement of `instance` of `peer` (the caller checked the peer, its epoch and the
        instance's length)."""
        instances = self._peers[peer]
        known = instances.pop(instance, None)  # re-inserted last: the dict runs least recently heard first
        if known is None or full or now - known.heard_at > self.stale_secs:  # a stale one was forgotten
            known = _Instance(now)
        known.heard_at = now
        known.queues.update(queue for queue in holding if is_spread(queue))
        known.queues.difference_update(empty)
        instances[instance] = known
        while len(instances) > MAX_INSTANCES:
            del instances[next(iter(instances))]

    def peer_holdings(self, now: float) -> dict[str, set[str]]:
        """Each peer's spread queues with available tasks, as its instances heard within
        `stale_secs` said."""
        self._drop_stale(now)
        return {peer: set().union(*(known.queues for known in instances.values()))
                for peer, instances in self._peers.items()}

    def holders(self, queues: Iterable[str], now: float) -> dict[str, list[str]]:
        """For each queue, the nodes known to hold available tasks of it, this node first."""
        self._drop_stale(now)
        peers = [(name, list(self._peers[name].values())) for name in self.nodes if name != self.node]
        answer: dict[str, list[str]] = {}
        for queue in queues:
            found = [self.node] if queue in self.local else []
            found += [name for name, instances in peers if any(queue in known.queues for known in instances)]
            answer[queue] = found
        return answer

    def _drop_stale(self, now: float) -> None:
        for instances in self._peers.values():
            for instance in [name for name, known in instances.items() if now - known.heard_at > self.stale_secs]:
                del instances[instance]

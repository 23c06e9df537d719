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
* every peer's holdings, as its announcements said (`apply`): a full one
  replaces what was known of the peer, a partial one adds and removes. A peer
  that cannot be reached keeps its last announced holdings until it
  announces again (a stale hint costs a client one empty lease, a missing one
  costs a scan); `forget(peer)` drops them.

`holders(queues)` answers from this view: for each queue, this node first when
it holds some, then the peers holding it in map order. Named-group queues are
not tracked: they live whole on their group's owner, which a client reaches by
routing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from kittiwake.constants import GROUP_SEPARATOR


def is_spread(queue: str) -> bool:
    """Whether `queue` is of the default group, spread over every node."""
    return GROUP_SEPARATOR not in queue


class Holdings:
    """This node's holdings and its peers', as announced (see the module docstring)."""

    def __init__(self, node: str, nodes: Sequence[str]) -> None:
        self.node = node
        self.nodes = tuple(nodes)
        self.local: set[str] = set()
        self._announced: set[str] = set()  # what the peers last heard of this node
        self._flipped: set[str] = set()  # queues whose holding changed since the last announcement
        self.peers: dict[str, set[str]] = {name: set() for name in self.nodes if name != node}

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

    def apply(self, peer: str, holding: Iterable[str], empty: Iterable[str], full: bool) -> None:
        """A peer's announcement (the caller checked the peer and its epoch)."""
        known = self.peers.setdefault(peer, set())
        if full:
            known.clear()
        known.update(queue for queue in holding if is_spread(queue))
        known.difference_update(empty)

    def forget(self, peer: str) -> None:
        self.peers[peer] = set()

    def holders(self, queues: Iterable[str]) -> dict[str, list[str]]:
        """For each queue, the nodes known to hold available tasks of it, this node first."""
        answer: dict[str, list[str]] = {}
        for queue in queues:
            found = [self.node] if queue in self.local else []
            found += [name for name in self.nodes if name != self.node and queue in self.peers.get(name, ())]
            answer[queue] = found
        return answer

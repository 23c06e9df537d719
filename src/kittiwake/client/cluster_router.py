"""The cluster client's router: which nodes a call goes to, and how their answers become one result.

Sans-IO. `Router.conversation(call, timeout)` is a generator of **steps**: each step is a tuple of
`Send`s (a node and the call to send it) that the caller — `ClusterChannel` (blocking) or
`AsyncClusterChannel` (asyncio) — sends, at once or in turn, and answers with one outcome per
send: the decoded result, or the `kittiwake.errors` error it raised. The generator's return value
is the call's result. A call that goes to one node as it is and is decided at once (a single-task
enqueue, a producer's commonest call) skips the generator: `direct` gives its one send, the
channel sends it and `settle` reads the outcome — the result, or `AGAIN`, and the conversation
goes on from that send (`tried`), the same steps as without it. The router keeps the cluster map,
the FIFO spreader (which nodes are marked down) and the counts of `routing_stats`; it is given the
clock and the randomness.

What each call does (routing rules: `kittiwake.cluster.routing`; merges: `kittiwake.cluster.merge`):

* **one node**: get, peek/delete_queue/requeue_dead/purge_dead/declare_join of a named group's
  queue, a lease naming one node's queues, and every batch whose items all go to one node (the
  call is sent unchanged, so a single-item call costs what it costs on one broker);
* **split and merge**: a batch enqueue (keyed tasks to their owner, FIFO tasks spread by
  `FifoSpreader`), renew/dequeue/release (by `lease_route`) and cancel (by the task's route) —
  one request per node, in one step, outcomes back in item order. A part whose node refuses with
  WRONG_SHARD is routed again after the map is fetched; the parts that succeeded are not sent
  again. FIFO tasks whose node is unreachable (the request was not sent) go to another live node.
  Any other failure of a part: renew/dequeue/release/cancel report it as each of the part's items'
  outcome (`ok=False` with the error's code); an enqueue raises it (the other nodes' parts may have
  been committed: keyed tasks collapse when enqueued again);
* **dead letters named by pid** (requeue_dead/purge_dead of a spread queue with `pids`): each node
  is sent the pids whose dead letters it holds (`dead_letter_route`: beside their task), all in one
  step, from the caller's `after_pid`; a node whose page has a `next_pid` is sent its part again
  from that cursor, until no node has more. Each request reads at most `limit` dead letters (the
  broker's bound) and the call answers every outcome — one per dead letter, a pid may name many —
  in pid order, with `next_pid` None. A part refused with WRONG_SHARD is routed again from its
  cursor after the map is fetched; any other failure of a part raises its error when no dead letter
  was moved yet, else CONNECTION_LOST saying how many were;
* **fan out and merge**: list_queues (exact paging by name), stats (summed; per node with
  `per_node`), find_by_sender, queues_for_receiver, list_joins, drop_join, purge_join, and for
  spread queues peek, delete_queue, requeue_dead/purge_dead pages of the whole dead-letter queue
  and declare_join. Every node is asked; a node's error is raised, except WRONG_SHARD (that node
  owns none of it);
* **update**: its leases must all be on one node (BadRequest otherwise): that node applies the
  update. Its enqueues of tasks owned by another node (a keyed or tagged task, a named group's
  task) are enqueued on their owner first, in one step, and the rest is applied atomically on the
  leasing node; so only that rest is atomic with the dequeues. A retry after a failure enqueues
  keyed tasks again harmlessly (they collapse on their pid); FIFO tasks of another node's group
  would be enqueued twice;
* **lease**: a lease of queues that live on one node goes there as is (long-polls included).
  Otherwise local first: the near node (`near`, else a node whose host is this machine's — the
  process's `near_seed`, its pid, picks among several, so a host's worker processes spread over
  its nodes — else a random one) without waiting; if it had nothing, the node the last lease of these queues stole
  from, while it gives tasks (Fabriq's "last known server": a steal costs one hop, not a `holders`
  round trip more); then `holders` (asked of the near node) names the nodes holding available
  tasks of the spread queues and the lease goes to each in turn (and to the owners of named
  groups' queues) until one gives tasks, asking for `max_tasks`. Holders found empty in the last
  `FOUND_EMPTY_SECS` are asked last: the announcements that they emptied may not have arrived. When
  `holders` names no other node, the others are swept anyway, at most every `BLIND_SWEEP_SECS` per
  set of queues: a missing hint (a lost announcement, a peer not heard for a while and forgotten)
  costs a scan, never stranded tasks. A broker that
  does not know `holders` (UNKNOWN_OP) is not asked again: the other nodes are tried in turn,
  from a rotating start. With `wait_secs > 0`, the near node is then long-polled for at most
  `LONG_POLL_SLICE_SECS` and the others swept again, until `wait_secs` pass: each long-poll is
  one node's, and an abandoned one is withdrawn by that node's pool, so no task is leased to a
  reply nobody reads. A node that cannot be reached, or answers a lease or `holders` with
  nothing within `NODE_ANSWER_SECS` beyond its wait (hung), is marked down and skipped for
  `DOWN_SECS` (leases and FIFO pushes go to the others; a restarted node is asked again after
  at most that); when every node is down the lease raises `BrokerUnreachable`. A node whose
  connection broke before it answered (`ConnectionLost`) is passed over for this lease the same
  way: whatever it leased comes back to its queue when that lease runs out, as after any lost
  reply.

A node that cannot be reached costs a short connect (`Send.quick`) wherever another node can
serve instead (leases over several nodes, `holders`, FIFO pushes, the map), and the full connect
budget only where none can (keyed calls), so a dead node holds up no consumer of the others for
longer than that; and only once: while it is marked down (`Send.down`), a keyed call to it gets
the short connect too.

WRONG_SHARD: the map is fetched again (`cluster_map`, from the near node, then the others) and
the call routed again, at most `MAX_WRONG_SHARD_RETRIES` times. Keyed calls to a node that cannot
be reached raise `BrokerUnreachable`, as on one broker, so callers that retry keep retrying.
Hops and requests are counted per call (`kittiwake.cluster.routing_stats` defines them).
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Generator, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar, cast

import msgspec

from kittiwake import errors
from kittiwake.client import calls
from kittiwake.client.calls import Call
from kittiwake.cluster import merge
from kittiwake.cluster.cluster_map import Address, ClusterMap, Node
from kittiwake.cluster.routing import FifoSpreader, Owned, Spread, dead_letter_route, lease_route, route
from kittiwake.cluster.routing_stats import RoutingCounter, RoutingStats
from kittiwake.constants import GROUP_SEPARATOR
from kittiwake.model import ItemOutcome, LeaseRef, NewTask
from kittiwake.protocol import messages as m
from kittiwake.protocol.replies import ClusterMapResult, HoldersResult, UpdateResult, result_decoder

T = TypeVar("T")

MAX_WRONG_SHARD_RETRIES = 3
LONG_POLL_SLICE_SECS = 1.0
DOWN_SECS = 1.0  # a node marked down is skipped this long: short, since a restarted node's tasks wait meanwhile
MAX_SPLIT_ROUNDS = 8  # WRONG_SHARD refetches plus moves of FIFO tasks off unreachable nodes
MAX_PAGE_ROUNDS = 10_000  # list_queues: each round covers `limit` more names of some node
FOUND_EMPTY_SECS = 0.2  # a node a steal found empty is asked last this long (announcements: ≤ 50 ms)
BLIND_SWEEP_SECS = 1.0  # when `holders` names no other node, the others are swept at most this often
MAX_STEAL_MEMORY = 1024  # sets of queues whose last steal's node is remembered
NODE_ANSWER_SECS = 5.0  # a node that answers no lease (beyond its wait) or `holders` within this is taken for hung

_encode = msgspec.msgpack.Encoder().encode


@dataclass(frozen=True)
class Send:
    """One request of a step: `call` to the node `node` at `address` ("" while no map is known).

    `quick`: another node can serve it if this one cannot be reached (a lease asking one node of
    several, `holders`, FIFO tasks that may move, the map from a node with others after it), so
    the channel spends only a short connect on it (`cluster_channel.QUICK_CONNECT_SECS`), not the
    budget a keyed call gets to wait out a restart. `down`: the node could not be reached in the
    last `DOWN_SECS`; a keyed call to it gets the short connect as well, so a caller that retries
    (a producer with keyed tasks of a dead node in every batch, say) is not held up by the full
    budget at every try while the node stays down."""

    node: str
    address: Address
    call: Call[Any]
    timeout_secs: float | None
    quick: bool = False
    down: bool = False


AGAIN = object()  # `Router.settle`: the direct send did not settle the call; `conversation` goes on

Step = tuple[Send, ...]
Conversation = Generator[Step, list[Any], T]
"""Yields steps, is sent one outcome (a result or a `KittiwakeError`) per send, returns the result."""


def cluster_map_of(result: ClusterMapResult) -> ClusterMap | None:
    """The map a `cluster_map` answer describes; None from a broker that is no node."""
    if not result.nodes:
        return None
    nodes = tuple(Node(node.name, Address.parse(node.address)) for node in result.nodes)
    return ClusterMap(nodes, result.slots, result.tls)


class Router:
    """Routing state of one cluster client and the conversations of its calls."""

    def __init__(
        self,
        *,
        seeds: Sequence[Address],
        cluster_map: ClusterMap | None = None,
        near: str | None = None,
        is_local: Callable[[str], bool] = lambda host: False,
        rng: random.Random | None = None,
        clock: Callable[[], float],
        near_seed: int | None = None,
        tls: bool | None = None,
    ) -> None:
        if cluster_map is None and not seeds:
            raise errors.BadRequest("a cluster client needs the map or the address of a node")
        self._seeds = tuple(seeds)
        self._near_wanted = near
        self._near_seed = near_seed
        self._tls = tls  # whether the client connects with TLS (None: not checked against the map)
        self._is_local = is_local
        self._rng = rng or random.Random()
        self._clock = clock
        self._lock = threading.Lock()
        self.counter = RoutingCounter()
        self._map: ClusterMap | None = None
        self._spreader: FifoSpreader | None = None
        self._near: str = ""
        self._holders_known = True  # until a node answers UNKNOWN_OP to `holders`
        self._sweep_start = 0
        self._stole_from: dict[tuple[str, ...], str] = {}  # spread queues -> the node a lease last stole from
        self._found_empty: dict[str, float] = {}  # node -> when a steal from it came back empty
        self._blind_swept: dict[tuple[str, ...], float] = {}  # queues -> when holders named nobody and all were swept
        if cluster_map is not None:
            self.use_map(cluster_map)

    # ------------------------------------------------------------------ state

    @property
    def cluster_map(self) -> ClusterMap | None:
        """The map in use (None until one was fetched)."""
        return self._map

    @property
    def near(self) -> str:
        """The node leases ask first ("" until the map is known)."""
        return self._near

    def use_map(self, cluster_map: ClusterMap) -> None:
        """Route by `cluster_map` from now on."""
        if cluster_map.tls and self._tls is False:
            raise errors.BadRequest("the cluster's nodes listen for TLS (its map says tls = true): "
                                    "connect with kws://, not kw://")
        if self._near_wanted is not None and self._near_wanted not in cluster_map.node_names:
            raise errors.BadRequest(
                f"near={self._near_wanted!r} is no node of the cluster (nodes: {', '.join(cluster_map.node_names)})"
            )
        with self._lock:
            if self._map is not None and self._map.epoch == cluster_map.epoch:
                return
            self._map = cluster_map
            self._spreader = FifoSpreader(cluster_map.node_names, rng=self._rng, clock=self._clock, down_secs=DOWN_SECS)
            self._holders_known = True
            self._near = self._near_wanted if self._near_wanted is not None else self._choose_near(cluster_map)

    def _choose_near(self, cluster_map: ClusterMap) -> str:
        local = [node.name for node in cluster_map.nodes if self._is_local(node.address.host)]
        if local and self._near_seed is not None:
            return local[self._near_seed % len(local)]
        return self._rng.choice(local or list(cluster_map.node_names))

    def routing_stats(self) -> RoutingStats:
        return self.counter.snapshot()

    def mark_down(self, node: str) -> None:
        if self._spreader is not None:
            with self._lock:
                self._spreader.mark_down(node)

    def _mark_up(self, node: str) -> None:
        if self._spreader is not None and self._spreader.is_down(node):
            with self._lock:
                self._spreader.mark_up(node)

    def _live(self) -> tuple[str, ...]:
        assert self._spreader is not None
        with self._lock:
            return self._spreader.live()

    def _choose_fifo(self) -> str:
        assert self._spreader is not None
        with self._lock:
            return self._spreader.choose()

    def _known_map(self) -> ClusterMap:
        if self._map is None:
            raise errors.InternalError("no cluster map yet")
        return self._map

    def _send(self, node: str, call: Call[Any], timeout_secs: float | None, *, quick: bool = False) -> Send:
        return Send(node, self._known_map().address_of(node), call, timeout_secs, quick, self._is_down(node))

    def _is_down(self, node: str) -> bool:
        spreader = self._spreader
        if spreader is None or not spreader.any_down():
            return False
        with self._lock:
            return spreader.down_now(node)

    # ---------------------------------------------------------- conversations

    def direct(self, call: Call[Any], timeout_secs: float | None) -> Send | None:
        """The one send of a call that goes to one node as it is, decided without a conversation:
        a single-task enqueue once the map is known (a producer's commonest call; as `_split`
        would send it). None for any other call. The caller sends it and hands the outcome to
        `settle`; a channel runs it so to spare a generator's steps on the push path."""
        request = call.request
        cluster = self._map
        if cluster is None or type(request) is not m.Enqueue or len(request.tasks) != 1:
            return None
        task = request.tasks[0]
        if task.pid is None and GROUP_SEPARATOR not in task.queue and not task.after:  # `route`'s Spread
            node, movable = self._choose_fifo(), True
        else:
            node, movable = self._task_node(task)
        return Send(node, cluster.address_of(node), call, timeout_secs, quick=self._elsewhere(node, movable),
                    down=self._is_down(node))

    def settle(self, send: Send, outcome: Any) -> Any:
        """The result of a `direct` send (its error raised), or `AGAIN` when the call must go
        through `conversation(..., tried=(send, outcome))` after all: the node refused (WRONG_SHARD) or a FIFO
        task's node could not be reached while others live."""
        self._note(send.node, outcome)
        if isinstance(outcome, errors.WrongShard) or (
            isinstance(outcome, errors.BrokerUnreachable) and send.quick and self._live()
        ):
            return AGAIN
        self.counter.record(send.call.request.op, 1, (send.node,))
        return _value(outcome)

    def conversation(
        self, call: Call[T], timeout_secs: float | None, *, tried: tuple[Send, Any] | None = None
    ) -> Conversation[T]:
        """The steps of `call` and its result (module docstring); counted in `routing_stats`.
        `tried`: a `direct` send and its outcome that `settle` said to go on from (counted as the
        first step; after WRONG_SHARD the map is fetched first)."""
        steps = 0 if tried is None else 1
        nodes: list[str] = [] if tried is None else [tried[0].node]
        refetch = tried is not None and isinstance(tried[1], errors.WrongShard)
        inner = self._converse(call, timeout_secs, refetch=refetch)
        try:
            step = next(inner)
            while True:
                steps += 1
                nodes.extend(send.node for send in step)
                outcomes = yield step
                for send, outcome in zip(step, outcomes):
                    self._note(send.node, outcome)
                step = inner.send(outcomes)
        except StopIteration as stop:
            return cast(T, stop.value)
        finally:
            self.counter.record(call.op, steps, nodes)

    def per_node(self, call: Call[T], timeout_secs: float | None) -> Conversation[dict[str, T]]:
        """`call` sent unchanged to every node: each node's own result, by node name."""
        if self._map is None:
            yield from self._fetch_map()
        names = self._known_map().node_names
        outcomes = yield tuple(self._send(node, _copy(call), timeout_secs) for node in names)
        return {node: _value(outcome) for node, outcome in zip(names, outcomes)}

    def _note(self, node: str, outcome: object) -> None:
        if not node:
            return
        if isinstance(outcome, errors.BrokerUnreachable):
            self.mark_down(node)
        elif not isinstance(outcome, errors.Transient):
            self._mark_up(node)

    def _converse(self, call: Call[T], timeout_secs: float | None, *, refetch: bool = False) -> Conversation[T]:
        if self._map is None or refetch:
            yield from self._fetch_map()
        for attempt in range(MAX_WRONG_SHARD_RETRIES + 1):
            try:
                result: T = yield from self._route(call, timeout_secs)
                return result
            except errors.WrongShard:
                if attempt == MAX_WRONG_SHARD_RETRIES:
                    raise
                yield from self._fetch_map()
        raise errors.InternalError("unreachable")  # pragma: no cover

    def _fetch_map(self) -> Conversation[None]:
        """Ask the near node, then the others, then the URL's nodes for the map, one at a time."""
        candidates: list[tuple[str, Address]] = []
        if self._map is not None:
            names = [self._near] + [name for name in self._map.node_names if name != self._near]
            candidates += [(name, self._map.address_of(name)) for name in names]
        candidates += [("", seed) for seed in self._seeds if all(seed != known for _, known in candidates)]
        failure: errors.KittiwakeError | None = None
        for index, (node, address) in enumerate(candidates):
            call = Call(calls.request("cluster_map", {}), result_decoder("cluster_map"))
            [outcome] = yield (Send(node, address, call, None, quick=index < len(candidates) - 1),)
            if isinstance(outcome, errors.KittiwakeError):
                if isinstance(outcome, errors.UnknownOperation):
                    failure = _not_a_node(address)
                    continue
                failure = outcome
                continue
            fetched = cluster_map_of(outcome)
            if fetched is None:
                if self._map is not None:
                    return  # a plain broker under an explicit map: keep the map
                failure = _not_a_node(address)
                continue
            if self._tls and not fetched.tls:
                raise errors.BadRequest(
                    f"the node at {address} serves a map of plaintext ports (no tls = true in it): connect with "
                    "kw://, or run the cluster on a map with tls = true that lists the nodes' TLS ports")
            self.use_map(fetched)
            return
        if self._map is not None and isinstance(failure, errors.BadRequest):
            return  # plain brokers under an explicit map
        raise failure or errors.BrokerUnreachable("no node of the cluster answered")

    def _route(self, call: Call[Any], timeout: float | None) -> Conversation[Any]:
        cluster = self._known_map()
        request = call.request
        if isinstance(request, m.Enqueue):
            return (yield from self._split(call, "tasks", self._task_node, timeout, per_item_failures=False))
        if isinstance(request, (m.Renew, m.Dequeue, m.Release)):
            return (yield from self._split(call, "leases", self._lease_node, timeout, per_item_failures=True))
        if isinstance(request, m.Cancel):
            return (yield from self._split(call, "tasks", self._cancel_node, timeout, per_item_failures=True))
        if isinstance(request, m.Lease):
            return (yield from self._lease(call, request, timeout))
        if isinstance(request, m.Update):
            return (yield from self._update(call, request, timeout))
        if isinstance(request, m.Get):
            return (yield from self._one(_owner(route(cluster, request.queue, request.pid)), call, timeout))
        if isinstance(request, m.Peek):
            owner = self._group_owner(request.queue)
            if owner is not None:
                return (yield from self._one(owner, call, timeout))
            n = request.n
            return (yield from self._fan_out(call, timeout, "peek", lambda parts: merge.peeked(parts, n)))
        if isinstance(request, (m.DeleteQueue, m.RequeueDead, m.PurgeDead)):
            owner = self._group_owner(request.queue)
            if owner is not None:
                return (yield from self._one(owner, call, timeout))
            if isinstance(request, m.DeleteQueue):
                return (yield from self._fan_out(call, timeout, "delete_queue", sum))
            if request.pids is not None:
                return (yield from self._dead_by_pid(call, request, timeout))
            return (yield from self._fan_out(call, timeout, request.op, merge.dead_letter_pages))
        if isinstance(request, m.FindBySender):
            owner = self._group_owner(request.queue) if request.queue is not None else None
            if owner is not None:
                return (yield from self._one(owner, call, timeout))
            limit = request.limit
            return (yield from self._fan_out(call, timeout, "find_by_sender",
                                             lambda parts: merge.found_by_sender(parts, limit)))
        if isinstance(request, m.QueuesForReceiver):
            return (yield from self._fan_out(call, timeout, "queues_for_receiver", merge.queue_names))
        if isinstance(request, m.ListQueues):
            return (yield from self._list_queues(call, request, timeout))
        if isinstance(request, m.Stats):
            return (yield from self._stats(call, request, timeout))
        if isinstance(request, m.DeclareJoin):
            owner = self._group_owner(request.join.job_queue)
            if owner is not None:
                return (yield from self._one(owner, call, timeout))
            return (yield from self._fan_out(call, timeout, "declare_join", _first))
        if isinstance(request, m.DropJoin):
            return (yield from self._fan_out(call, timeout, "drop_join", any))
        if isinstance(request, m.PurgeJoin):
            return (yield from self._fan_out(call, timeout, "purge_join", sum))
        if isinstance(request, m.ListJoins):
            return (yield from self._fan_out(call, timeout, "list_joins", merge.joins))
        return (yield from self._one(self._some_live_node(), call, timeout))

    # ------------------------------------------------------------ the shapes

    def _one(self, node: str, call: Call[T], timeout: float | None) -> Conversation[T]:
        [outcome] = yield (self._send(node, call, timeout),)
        return cast(T, _value(outcome))

    def _fan_out(
        self, call: Call[T], timeout: float | None, op: str, combine: Callable[[list[Any]], Any],
        nodes: Iterable[tuple[str, m.Request]] | None = None,
    ) -> Conversation[T]:
        """Send to every node (or to `nodes`, each with its own request), combine the decoded
        results and read the combination as the call's own result."""
        decode = result_decoder(op)
        targets = list(nodes) if nodes is not None else [
            (node, msgspec.structs.replace(call.request)) for node in self._known_map().node_names
        ]
        outcomes = yield tuple(
            self._send(node, Call(request, decode, call.wait_secs), timeout) for node, request in targets
        )
        values: list[Any] = []
        refused: errors.WrongShard | None = None
        for outcome in outcomes:
            if isinstance(outcome, errors.WrongShard):
                refused = outcome  # that node owns none of it
            else:
                values.append(_value(outcome))
        if not values and refused is not None:
            raise refused
        return call.decode(_encode(combine(values)))

    def _split(
        self,
        call: Call[T],
        field: str,
        node_of: Callable[[Any], tuple[str, bool]],
        timeout: float | None,
        *,
        per_item_failures: bool,
    ) -> Conversation[T]:
        """Send each item of `call.request.<field>` to its node (`node_of`: the node, and whether
        the item may go to any node), one request per node, outcomes merged in item order.

        Without `per_item_failures` (an enqueue), a part that fails while another part of the call
        was applied leaves the call half done: that raises CONNECTION_LOST (outcome unknown: repeat
        only what is idempotent) saying how many items were applied, not the part's own error —
        BROKER_UNREACHABLE would say nothing was sent, and a caller retrying on it would enqueue
        the applied FIFO tasks twice. When no part applied, the error raised is one whose outcome
        is unknown (CONNECTION_LOST, TIMEOUT, UNAVAILABLE) if a part failed so, else the first."""
        request = call.request
        items: list[Any] = list(getattr(request, field))
        op = request.op
        decode_part = result_decoder(op)
        done: dict[int, Any] = {}
        pending = list(range(len(items)))
        last_error: errors.KittiwakeError | None = None
        for _ in range(MAX_SPLIT_ROUNDS):
            parts: dict[str, list[int]] = {}
            movable: dict[str, bool] = {}
            for index in pending:  # per item: a dequeue of 1,000 leases runs this 1,000 times
                node, anywhere = node_of(items[index])
                indexes = parts.get(node)
                if indexes is None:
                    parts[node] = indexes = []
                    movable[node] = anywhere
                elif not anywhere:
                    movable[node] = False
                indexes.append(index)
            if not done and len(parts) == 1:
                # the whole call to one node: sent as it is, read as it is
                node = next(iter(parts))
                [outcome] = yield (self._send(node, call, timeout, quick=self._elsewhere(node, movable[node])),)
                if isinstance(outcome, errors.WrongShard):
                    last_error = outcome
                    yield from self._fetch_map()
                    continue
                if isinstance(outcome, errors.BrokerUnreachable) and movable[node] and self._live():
                    last_error = outcome
                    continue
                return cast(T, _value(outcome))
            sends = []
            for node, indexes in parts.items():
                part = msgspec.structs.replace(request, **{field: [items[index] for index in indexes]})
                sends.append(self._send(node, Call(part, decode_part), timeout,
                                        quick=self._elsewhere(node, movable[node])))
            outcomes = yield tuple(sends)
            pending = []
            refetch = False
            failure: errors.KittiwakeError | None = None
            for (node, indexes), outcome in zip(parts.items(), outcomes):
                if isinstance(outcome, errors.WrongShard):
                    pending += indexes
                    refetch = True
                    last_error = outcome
                elif isinstance(outcome, errors.BrokerUnreachable) and movable[node] and self._live():
                    pending += indexes  # never sent: the FIFO tasks go to another node
                    last_error = outcome
                elif isinstance(outcome, errors.KittiwakeError):
                    if not per_item_failures:
                        # raised when no part applied: a part whose outcome is unknown wins over a
                        # refusal, which would say that nothing of the call was (a producer sends a
                        # batch refused for what it holds again, in parts)
                        if failure is None or (_outcome_unknown(outcome) and not _outcome_unknown(failure)):
                            failure = outcome
                        continue
                    done.update((index, _failed(items[index], outcome)) for index in indexes)
                else:
                    done.update(zip(indexes, outcome))  # one outcome per item
            if failure is not None:
                if not done:
                    raise failure  # no part applied: the part's own error says what it means
                raise errors.ConnectionLost(
                    f"{op} split over nodes was applied in part: {len(done)} of {len(items)} item(s) on "
                    f"the nodes that answered; another part failed ({failure.code}: {failure.message}); "
                    "the outcome of the call is unknown — repeat only what is idempotent")
            if not pending:
                return call.decode(_encode([done[index] for index in range(len(items))]))
            if refetch:
                yield from self._fetch_map()
        raise last_error or errors.InternalError("split found no node")

    def _dead_by_pid(
        self, call: Call[T], request: m.RequeueDead | m.PurgeDead, timeout: float | None
    ) -> Conversation[T]:
        """Requeue or purge the dead letters `request.pids` name on a spread queue: each node is
        sent the pids whose dead letters it holds (`dead_letter_route`), all nodes in one step,
        from the caller's `after_pid`; a node whose page has a `next_pid` is sent its part again
        from that cursor, until none has more. Every request reads at most `limit` dead letters
        (the node's bound); the call answers every outcome, in pid order, `next_pid` None.

        A node's page answers one outcome per dead letter (a pid may name many), so the pages are
        merged whole, never matched to the pids. A part refused with WRONG_SHARD is routed again
        from its cursor after the map is fetched. Any other failure of a part raises that error if
        no dead letter was moved yet, else CONNECTION_LOST saying how many were (as `_split` does
        for an enqueue): the pages answered are lost with the call, and repeating it goes on where
        it stopped (what was moved is a dead letter no more)."""
        op = request.op
        decode = result_decoder(op)
        node_of = self._dead_node(request.queue)

        def parts_of(pids: Iterable[str], cursor: str | None) -> list[tuple[str, list[str], str | None]]:
            by_node: dict[str, list[str]] = {}
            for pid in pids:
                by_node.setdefault(node_of(pid)[0], []).append(pid)
            return [(node, named, cursor) for node, named in by_node.items()]

        assert request.pids is not None
        pending = parts_of(dict.fromkeys(request.pids), request.after_pid)
        outcomes: list[ItemOutcome] = []
        refetches = 0
        while pending:
            answers = yield tuple(
                self._send(node, Call(msgspec.structs.replace(request, pids=pids, after_pid=cursor), decode), timeout)
                for node, pids, cursor in pending
            )
            going_on: list[tuple[str, list[str], str | None]] = []
            refused: list[tuple[list[str], str | None]] = []
            failure: errors.KittiwakeError | None = None
            for (node, pids, cursor), answer in zip(pending, answers):
                if isinstance(answer, errors.WrongShard) and refetches < MAX_SPLIT_ROUNDS:
                    refused.append((pids, cursor))  # it moved nothing: routed again from its cursor
                elif isinstance(answer, errors.KittiwakeError):
                    failure = failure or answer
                else:
                    outcomes += answer.outcomes
                    if answer.next_pid is not None:
                        if cursor is not None and answer.next_pid <= cursor:
                            raise errors.InternalError(f"{op}: node {node} did not page on from {cursor!r}")
                        going_on.append((node, pids, answer.next_pid))
            if failure is not None:
                moved = sum(outcome.ok for outcome in outcomes)
                if not moved:
                    raise failure  # nothing moved: the part's own error says what it means
                raise errors.ConnectionLost(
                    f"{op} of {request.queue} by pid over nodes was applied in part: {moved} dead letter(s) "
                    f"{'requeued' if isinstance(request, m.RequeueDead) else 'purged'} on the nodes that "
                    f"answered; another part failed ({failure.code}: {failure.message}); the outcome of the "
                    "rest is unknown — repeating the call goes on (what was moved is a dead letter no more)")
            if refused:
                refetches += 1
                yield from self._fetch_map()
                for pids, cursor in refused:
                    going_on += parts_of(pids, cursor)
            pending = going_on
        outcomes.sort(key=lambda outcome: outcome.pid)
        return call.decode(_encode({"outcomes": outcomes, "next_pid": None}))

    # ------------------------------------------------------------ item routes

    def _task_node(self, task: NewTask) -> tuple[str, bool]:
        decision = route(self._known_map(), task.queue, task.pid)
        if isinstance(decision, Owned):
            return decision.node, False
        if task.after:  # a FIFO task waits on its parents' node (the nodes keep a DAG on one node)
            queue, pid = task.after[0]
            return _owner(route(self._known_map(), queue, pid)), False
        return self._choose_fifo(), True

    def _lease_node(self, ref: LeaseRef) -> tuple[str, bool]:
        cluster = self._known_map()
        if GROUP_SEPARATOR not in ref.queue:
            # `lease_route`'s common case without its key: a spread queue's lease id names the node
            node = cluster.node_of_id(ref.lease_id)
            if node is not None:
                return node, False
        return lease_route(cluster, ref.queue, ref.pid, ref.lease_id).node, False

    def _cancel_node(self, key: tuple[str, str]) -> tuple[str, bool]:
        return _owner(route(self._known_map(), key[0], key[1])), False

    def _dead_node(self, queue: str) -> Callable[[str], tuple[str, bool]]:
        def node_of(pid: str) -> tuple[str, bool]:
            return _owner(dead_letter_route(self._known_map(), queue, pid)), False  # beside its task

        return node_of

    def _group_owner(self, queue: str) -> str | None:
        """The node of a named group's queue; None for a spread queue."""
        decision = route(self._known_map(), queue)
        return decision.node if isinstance(decision, Owned) else None

    def _elsewhere(self, node: str, movable: bool) -> bool:
        """Whether a part that may go to any node has another live node to go to."""
        if not movable:
            return False
        assert self._spreader is not None
        if not self._spreader.any_down():
            return len(self._known_map().nodes) > 1
        return any(other != node for other in self._live())

    def _some_live_node(self) -> str:
        live = self._live()
        return self._near if self._near in live or not live else live[0]

    # ---------------------------------------------------------------- reads

    def _list_queues(self, call: Call[T], request: m.ListQueues, timeout: float | None) -> Conversation[T]:
        rows: list[Any] = []
        cursor = request.start_after
        decode = result_decoder("list_queues")
        names = self._known_map().node_names
        for _ in range(MAX_PAGE_ROUNDS):
            ask = msgspec.structs.replace(request, start_after=cursor, min_tasks=0)
            outcomes = yield tuple(
                self._send(node, Call(msgspec.structs.replace(ask), decode), timeout) for node in names
            )
            pages = [_value(outcome) for outcome in outcomes]
            merged, bound = merge.queue_pages(pages, request.limit)
            rows += [row for row in merged if row.size >= request.min_tasks]
            if len(rows) >= request.limit or bound is None:
                break
            cursor = bound
        return call.decode(_encode(rows[: request.limit]))

    def _stats(self, call: Call[T], request: m.Stats, timeout: float | None) -> Conversation[T]:
        sample = request.sample
        order = request.queues
        if order is None:
            return (yield from self._fan_out(call, timeout, "stats", lambda parts: merge.sum_stats(parts, None, sample)))
        asked: dict[str, list[str]] = {}
        for queue in order:
            owner = self._group_owner(queue)
            for node in [owner] if owner is not None else self._known_map().node_names:
                asked.setdefault(node, []).append(queue)
        if len(asked) == 1:
            return (yield from self._one(next(iter(asked)), call, timeout))
        targets = [(node, msgspec.structs.replace(request, queues=queues)) for node, queues in asked.items()]
        return (yield from self._fan_out(
            call, timeout, "stats", lambda parts: merge.sum_stats(parts, order, sample), targets
        ))

    # --------------------------------------------------------------- update

    def _update(self, call: Call[T], request: m.Update, timeout: float | None) -> Conversation[T]:
        cluster = self._known_map()
        leases = [*request.dequeue, *request.renew, *request.release]
        lease_nodes = sorted({lease_route(cluster, ref.queue, ref.pid, ref.lease_id).node for ref in leases})
        if len(lease_nodes) > 1:
            raise errors.BadRequest(
                f"update: its leases are on nodes {', '.join(lease_nodes)}; an update's leases must be "
                "on one node (update each node's leases separately)"
            )
        routes = [route(cluster, task.queue, task.pid) for task in request.enqueue]
        owned = [decision.node for decision in routes if isinstance(decision, Owned)]
        target = lease_nodes[0] if lease_nodes else owned[0] if owned else self._choose_fifo()
        elsewhere: dict[str, list[int]] = {}
        for index, decision in enumerate(routes):
            if isinstance(decision, Owned) and decision.node != target:
                elsewhere.setdefault(decision.node, []).append(index)
        if not elsewhere:
            return (yield from self._one(target, call, timeout))
        decode_enqueued = result_decoder("enqueue")
        sends = [
            self._send(node, Call(calls.request("enqueue", {"tasks": [request.enqueue[i] for i in indexes]}),
                                  decode_enqueued), timeout)
            for node, indexes in elsewhere.items()
        ]
        outcomes = yield tuple(sends)
        enqueued: dict[int, Any] = {}
        for indexes, outcome in zip(elsewhere.values(), outcomes):
            enqueued.update(zip(indexes, _value(outcome)))
        rest = [i for i in range(len(routes)) if i not in enqueued]
        result = UpdateResult()
        if rest or leases:
            here = msgspec.structs.replace(request, enqueue=[request.enqueue[i] for i in rest])
            result = yield from self._one(target, Call(here, result_decoder("update")), timeout)
            enqueued.update(zip(rest, result.enqueued))
        result.enqueued = [enqueued[i] for i in range(len(routes))]
        return call.decode(_encode(result))

    # ---------------------------------------------------------------- lease

    def _serving(self, queues: Sequence[str]) -> tuple[dict[str, list[str]], list[str]]:
        """Which queues each node serves (map order), and the spread queues among them."""
        cluster = self._known_map()
        serving: dict[str, list[str]] = {}
        spread: list[str] = []
        for queue in queues:
            decision = route(cluster, queue)
            if isinstance(decision, Spread):
                spread.append(queue)
        for node in cluster.node_names:
            mine = [queue for queue in queues if queue in spread or self._group_owner(queue) == node]
            if mine:
                serving[node] = mine
        return serving, spread

    def _lease(self, call: Call[T], request: m.Lease, timeout: float | None) -> Conversation[T]:
        serving, spread = self._serving(request.queues)
        if len(serving) == 1:
            return (yield from self._one(next(iter(serving)), call, timeout))
        wait = request.wait_secs
        base = None if timeout is None else max(timeout - wait, 0.001) if wait > 0 else timeout
        deadline = self._clock() + wait
        tried: set[str] = set()
        unreachable: errors.KittiwakeError | None = None

        def lease_from(node: str, wait_secs: float) -> Conversation[Any]:
            nonlocal unreachable
            part = msgspec.structs.replace(request, queues=serving[node], wait_secs=wait_secs)
            # bounded even without a call timeout: a node that accepts connections and answers
            # nothing (stopped, hung) must not hold the lease while others hold tasks
            sub_timeout = wait_secs + (NODE_ANSWER_SECS if base is None else min(base, NODE_ANSWER_SECS))
            [outcome] = yield (self._send(node, Call(part, call.decode, wait_secs), sub_timeout, quick=True),)
            tried.add(node)
            if isinstance(outcome, errors.BrokerUnreachable):
                unreachable = outcome
                return []
            if isinstance(outcome, errors.RequestTimeout):
                self.mark_down(node)  # skipped for DOWN_SECS; what it leased, if anything, comes back later
                return []
            if isinstance(outcome, errors.ConnectionLost):
                return []  # cut mid-request: what it leased, if anything, comes back when that lease runs out
            return _value(outcome)

        def steal_from(node: str) -> Conversation[Any]:
            tasks = yield from lease_from(node, 0.0)
            self._stole(key, node, bool(tasks))
            return tasks

        key = tuple(spread)
        home = self._home(serving)
        tasks = yield from lease_from(home, 0.0)
        if tasks:
            return cast(T, tasks)
        asked = {home}
        last = self._stole_from.get(key) if key else None
        if last is not None and last != home and last in serving and last in self._live():
            tasks = yield from steal_from(last)
            if tasks:
                return cast(T, tasks)
            asked.add(last)
        for _ in range(int(wait / LONG_POLL_SLICE_SECS) + 2):
            for node in (yield from self._candidates(serving, spread, home)):
                if node in asked:
                    continue  # asked a moment ago in this call: it had nothing
                tasks = yield from steal_from(node)
                if tasks:
                    return cast(T, tasks)
            asked = set()
            live = self._live()
            if unreachable is not None and not any(node in live for node in serving):
                raise unreachable  # every node that serves these queues is down
            remaining = deadline - self._clock()
            if remaining <= 0:
                break
            home = self._home(serving)
            tasks = yield from lease_from(home, min(remaining, LONG_POLL_SLICE_SECS))
            if tasks:
                return cast(T, tasks)
            if deadline - self._clock() <= 0:
                break
        return call.decode(_encode([]))

    def _stole(self, queues: tuple[str, ...], node: str, got_tasks: bool) -> None:
        """Remember the node a steal of `queues` got tasks from, or when one came back empty."""
        with self._lock:
            if got_tasks:
                if len(self._stole_from) >= MAX_STEAL_MEMORY and queues not in self._stole_from:
                    self._stole_from.clear()
                if queues:
                    self._stole_from[queues] = node
                self._found_empty.pop(node, None)
            else:
                if self._stole_from.get(queues) == node:
                    del self._stole_from[queues]
                self._found_empty[node] = self._clock()

    def _blind_sweep_due(self, queues: tuple[str, ...]) -> bool:
        """Whether a lease of `queues` that `holders` found held nowhere else may sweep the other
        nodes now (then not again for `BLIND_SWEEP_SECS`)."""
        now = self._clock()
        with self._lock:
            last = self._blind_swept.get(queues)
            if last is not None and now - last < BLIND_SWEEP_SECS:
                return False
            if len(self._blind_swept) >= MAX_STEAL_MEMORY:
                self._blind_swept.clear()
            self._blind_swept[queues] = now
            return True

    def _recently_empty(self, node: str) -> bool:
        found = self._found_empty.get(node)
        return found is not None and self._clock() - found < FOUND_EMPTY_SECS

    def _home(self, serving: dict[str, list[str]]) -> str:
        """The node a lease asks first: the near one if it serves the queues and is up."""
        live = self._live()
        if self._near in serving and self._near in live:
            return self._near
        for node in serving:
            if node in live:
                return node
        return self._near if self._near in serving else next(iter(serving))

    def _candidates(self, serving: dict[str, list[str]], spread: list[str], home: str) -> Conversation[list[str]]:
        """The nodes to steal from after `home`, best first: the holders of the spread queues
        (asked of `home`), else every other live node from a rotating start; then the owners of
        the named groups' queues."""
        live = self._live()
        others = [node for node in serving if node != home and node in live]
        chosen: list[str] = []
        if spread and self._holders_known and home in live:
            holders_call = Call(calls.request("holders", {"queues": spread}), result_decoder("holders"))
            [outcome] = yield (self._send(home, holders_call, NODE_ANSWER_SECS, quick=True),)
            if isinstance(outcome, errors.RequestTimeout):
                self.mark_down(home)
            if isinstance(outcome, errors.UnknownOperation) or (
                isinstance(outcome, HoldersResult) and not outcome.epoch
            ):
                # a broker that is no node (an explicit map over plain brokers) hears no announcements
                self._holders_known = False
            elif isinstance(outcome, HoldersResult):
                for nodes in outcome.holders.values():
                    chosen += [node for node in nodes if node in others and node not in chosen]
                with self._lock:
                    chosen.sort(key=self._recently_empty)  # stable: the holders' order otherwise
                groups = [node for node in others if any(q not in spread for q in serving[node])]
                if chosen or not self._blind_sweep_due(tuple(spread)):
                    return chosen + [node for node in groups if node not in chosen]
                # holders named nobody: a missing hint (a node's brokers on one shared store, one just
                # restarted; an announcement lost) would strand tasks, so sweep, at most every BLIND_SWEEP_SECS
        if others:
            with self._lock:
                start = self._sweep_start % len(others)
                self._sweep_start += 1
            chosen = others[start:] + others[:start]
        return chosen


def _copy(call: Call[T]) -> Call[T]:
    return Call(msgspec.structs.replace(call.request), call.decode, call.wait_secs)


def _value(outcome: Any) -> Any:
    if isinstance(outcome, BaseException):
        raise outcome
    return outcome


def _owner(decision: Owned | Spread) -> str:
    if isinstance(decision, Spread):
        raise errors.InternalError(f"{decision.queue}: a task with a pid routed to no node")
    return decision.node


def _first(values: list[Any]) -> Any:
    return values[0]


def _failed(item: Any, error: errors.KittiwakeError) -> ItemOutcome:
    if isinstance(item, LeaseRef):
        queue, pid = item.queue, item.pid
    else:
        queue, pid = item[0], item[1]
    return ItemOutcome(queue, pid, False, error.code, error.message)


def _outcome_unknown(error: errors.KittiwakeError) -> bool:
    """Whether a part that failed with `error` may have been applied all the same."""
    return isinstance(error, (errors.ConnectionLost, errors.RequestTimeout, errors.Unavailable))


def _not_a_node(address: Address) -> errors.BadRequest:
    return errors.BadRequest(
        f"{address} is not a node of a cluster (it answers no cluster map): start the brokers with "
        "--cluster FILE --node NAME, or give the client the map (cluster_map=)"
    )

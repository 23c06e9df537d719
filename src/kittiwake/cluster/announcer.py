"""A node's announcements to its peers: which spread queues flipped between holding tasks and not.

The I/O around `holdings.Holdings`, on the broker's event loop, never in the
group-commit pass: a committed pass only updates the holdings and sets an event
(`flips_ready`); this announcer's task wakes on it, waits out the coalescing
interval (at most one partial announcement every `COALESCE_SECS`), and sends
`announce` to every peer over the binary protocol, each through its own
`kittiwake.client.AsyncClient` to the address the map gives it (`peer_address`:
`kw://`, or `kws://` when the map says `tls = true`, the peer's certificate
verified against the node's `--cluster-ca` or the system's CAs; with the node's
credentials when the cluster runs with auth files).

* **Full refreshes.** Every `REFRESH_SECS` (this node's holdings recomputed
  from the whole engine first, `before_full`: what no pass's tally showed is
  corrected by then), and to a peer that was not in sync (its last send
  failed, it never heard from us, or a broker process of it announced itself
  for the first time since we started, which is how a restarted peer, or a
  restarted sibling serving it, is noticed at once), the announcement carries every queue held (`full`), which replaces
  whatever the peer knew of us — of this broker process (`instance`): a
  sibling serving the same node keeps its own entry.
* **A peer down** never holds up the others or the pass: each send is its own
  task with a timeout, a peer with a send in flight is skipped (and gets a full
  refresh when it answers again), and a failed peer is retried after a backoff
  that doubles from `BACKOFF_SECS` to `MAX_BACKOFF_SECS`.
* **Another epoch.** A peer answering WRONG_SHARD runs another map: logged
  (once per epoch) and retried with backoff; routing is the client's business.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from kittiwake import errors
from kittiwake.client.async_client import AsyncClient
from kittiwake.client.calls import Call, request
from kittiwake.client.url import BrokerAddress
from kittiwake.cluster.cluster_map import ClusterMap
from kittiwake.cluster.holdings import Holdings
from kittiwake.protocol.replies import result_decoder

log = logging.getLogger("kittiwake.cluster")

COALESCE_SECS = 0.05
REFRESH_SECS = 5.0
BACKOFF_SECS = 0.2
MAX_BACKOFF_SECS = 5.0
SEND_TIMEOUT_SECS = 2.0
CONNECT_TIMEOUT_SECS = 1.0


def peer_address(
    cluster: ClusterMap, name: str, credentials: tuple[str, str] | None = None, ca_file: str | None = None
) -> BrokerAddress:
    """How a node reaches its peer `name`: at the map's address, over TLS when the map says so
    (verified against `ca_file`, else the system's CAs), as the node's cluster user if it has one."""
    address = cluster.address_of(name)
    user, token = credentials if credentials is not None else (None, None)
    return BrokerAddress(address.host, address.port, user=user, token=token, tls=cluster.tls,
                         ca_file=ca_file if cluster.tls else None)


@dataclass
class Peer:
    """One peer as the announcer sees it."""

    name: str
    client: AsyncClient
    synced: bool = False  # it heard our last full announcement and every partial one since
    sending: asyncio.Task[None] | None = None
    missed: bool = False  # a partial announcement went out to the others while its send was in flight
    retry_at: float = 0.0
    backoff: float = BACKOFF_SECS
    epochs_warned: set[str] = field(default_factory=set)
    told_at: float | None = None  # epoch seconds an announcement last reached it (the dashboard shows it)
    error: str | None = None  # why the last send failed; None once one succeeds


class Announcer:
    """Sends this node's holdings to every peer (see the module docstring)."""

    def __init__(
        self,
        cluster: ClusterMap,
        node: str,
        holdings: Holdings,
        *,
        credentials: tuple[str, str] | None = None,
        ca_file: str | None = None,
        clock: Callable[[], float] = time.monotonic,
        coalesce_secs: float = COALESCE_SECS,
        refresh_secs: float = REFRESH_SECS,
        before_full: Callable[[], None] | None = None,
        instance: str = "",
    ) -> None:
        self.cluster = cluster
        self.node = node
        self.instance = instance  # this broker process's id in every announcement (`holdings`)
        self.holdings = holdings
        self.clock = clock
        self.coalesce_secs = coalesce_secs
        self.refresh_secs = refresh_secs
        self.before_full = before_full  # brings `holdings.local` up to date before each full refresh
        self.peers: dict[str, Peer] = {}
        for peer in cluster.nodes:
            if peer.name == node:
                continue
            address = peer_address(cluster, peer.name, credentials, ca_file)
            client = AsyncClient(address, connect_timeout=CONNECT_TIMEOUT_SECS, timeout=SEND_TIMEOUT_SECS)
            self.peers[peer.name] = Peer(peer.name, client)
        self.flips_ready = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._sends: set[asyncio.Task[None]] = set()
        self._stopping = False
        self.sent = 0  # announcements that reached a peer (for tests and logs)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="kittiwake-cluster-announcer")

    async def stop(self) -> None:
        self._stopping = True  # the loop ends at its next turn even if a cancellation is lost
        self.flips_ready.set()
        tasks = [task for task in (self._task, *self._sends) if task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await asyncio.gather(*(peer.client.close() for peer in self.peers.values()), return_exceptions=True)

    def heard_from(self, peer: str, first: bool) -> None:
        """`peer` announced itself; the first time since this node started, it gets our full holdings
        at once (it may have just restarted and know nothing of us)."""
        known = self.peers.get(peer)
        if known is not None and first:
            known.synced = False
            known.retry_at = 0.0
            self.flips_ready.set()

    # ---------------------------------------------------------------- loop

    async def _run(self) -> None:
        next_full = self.clock()  # a full announcement to everyone at start
        while not self._stopping:
            now = self.clock()
            timeout = max(0.0, min(next_full, self._earliest_retry(now)) - now)
            try:
                # not `asyncio.wait_for`: on Python 3.11 it returns instead of raising when the event
                # is set in the turn it is cancelled, and the loop then outlived `stop()`
                async with asyncio.timeout(timeout):
                    await self.flips_ready.wait()
            except TimeoutError:
                pass
            if self._stopping:
                return
            self.flips_ready.clear()
            now = self.clock()
            if now >= next_full:
                if self.before_full is not None:
                    self.before_full()
                for peer in self.peers.values():
                    peer.synced = False
                next_full = now + self.refresh_secs
            self._announce(now)
            await asyncio.sleep(self.coalesce_secs)  # flips of the next passes ride together

    def _earliest_retry(self, now: float) -> float:
        """When the next peer out of sync and not being told may be told again (infinity: none is).
        A peer whose send is in flight is not waited for here: the send's end wakes the loop. This is
        a wake-up only: the next full refresh stays `REFRESH_SECS` away (bringing it forward while the
        first send was in flight had every node resend everything every `COALESCE_SECS`)."""
        due = [max(now + self.coalesce_secs, peer.retry_at) for peer in self.peers.values()
               if not peer.synced and peer.sending is None]
        return min(due, default=float("inf"))

    def _announce(self, now: float) -> None:
        holding, empty = self.holdings.take_flips()
        partial = bool(holding or empty)
        full: list[str] | None = None
        for peer in self.peers.values():
            if peer.sending is not None:
                if partial:  # it misses this one: a full refresh when it answers
                    peer.synced = False
                    peer.missed = True
                continue
            if peer.synced:
                if partial:
                    self._send(peer, holding, empty, False)
            elif now >= peer.retry_at:
                if full is None:
                    full = sorted(self.holdings.local)
                self._send(peer, full, [], True)

    def _send(self, peer: Peer, holding: list[str], empty: list[str], full: bool) -> None:
        call = Call(
            request("announce", {"node": self.node, "epoch": self.cluster.epoch, "holding": holding,
                                 "empty": empty, "full": full, "instance": self.instance}),
            result_decoder("announce"),
        )
        task = asyncio.get_running_loop().create_task(self._deliver(peer, call, full))
        peer.sending = task
        peer.missed = False
        self._sends.add(task)
        task.add_done_callback(self._sends.discard)

    async def _deliver(self, peer: Peer, call: Call[object], full: bool) -> None:
        try:
            await peer.client._run(call, SEND_TIMEOUT_SECS)
        except errors.WrongShard as refused:
            if refused.epoch not in peer.epochs_warned:
                peer.epochs_warned.add(refused.epoch)
                log.warning("cluster node %r runs the map of epoch %s, this node %s: it refuses our announcements",
                            peer.name, refused.epoch, self.cluster.epoch)
            self._failed(peer, f"it runs the map of epoch {refused.epoch}")
        except (errors.KittiwakeError, OSError) as exc:
            if peer.backoff == BACKOFF_SECS:
                log.info("cluster node %r cannot be told what this node holds (%s); retrying", peer.name, exc)
            self._failed(peer, str(exc) or type(exc).__name__)
        else:
            self.sent += 1
            peer.told_at = time.time()
            peer.error = None
            if full and not peer.missed:  # a flip after this one was taken is not in it
                peer.synced = True
            peer.backoff = BACKOFF_SECS
            peer.retry_at = 0.0
        finally:
            peer.sending = None
            if not peer.synced:
                self.flips_ready.set()  # its retry, or the full refresh it missed, is due at retry_at

    def _failed(self, peer: Peer, why: str) -> None:
        peer.synced = False
        peer.error = why
        peer.retry_at = self.clock() + peer.backoff
        peer.backoff = min(peer.backoff * 2, MAX_BACKOFF_SECS)

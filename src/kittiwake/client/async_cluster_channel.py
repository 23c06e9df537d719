"""`AsyncClusterChannel`: the asyncio `AsyncChannel` of a cluster (`kw://a:1,b:2,c:3`).

The routing is the router's (`cluster_router.Router`, shared with the blocking `ClusterChannel`);
this module sends each step's requests at once (`asyncio.gather`) over one `AsyncPool` per node
and hands the outcomes back. Cancelling the awaiting task cancels the step's requests: a node's
pool withdraws its abandoned long-poll (`cancel_wait`), so no task is leased to a reply nobody
reads.
"""

from __future__ import annotations

import asyncio
from typing import Any, TypeVar, cast

from kittiwake import errors
from kittiwake.client.async_pool import AsyncPool
from kittiwake.client.calls import Call
from kittiwake.client.cluster_channel import NODE_CONNECT_TIMEOUT_SECS, connect_budget, make_router
from kittiwake.client.cluster_router import AGAIN, Conversation, Router, Send, Step
from kittiwake.client.url import BrokerAddress
from kittiwake.client.wire import DEFAULT_MAX_REPLY_BYTES
from kittiwake.cluster.cluster_map import Address, ClusterMap
from kittiwake.cluster.routing_stats import RoutingStats

T = TypeVar("T")


class AsyncClusterChannel:
    """Asyncio requests to the nodes of a cluster, routed per call, any number in flight."""

    def __init__(
        self,
        address: BrokerAddress,
        *,
        connect_timeout_secs: float,
        max_reply_bytes: int = DEFAULT_MAX_REPLY_BYTES,
        cluster_map: ClusterMap | None = None,
        near: str | None = None,
    ) -> None:
        self._address = address
        self._connect_timeout_secs = min(connect_timeout_secs, NODE_CONNECT_TIMEOUT_SECS)
        self._max_reply_bytes = max_reply_bytes
        self._router = make_router(address, cluster_map, near)
        self._pools: dict[Address, AsyncPool] = {}
        self._closed = False

    @property
    def address(self) -> BrokerAddress:
        return self._address

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def router(self) -> Router:
        return self._router

    async def request(self, call: Call[T], timeout_secs: float | None) -> T:
        router = self._router
        send = router.direct(call, timeout_secs)  # one node, decided at once (`Router.direct`)
        if send is None:
            return await self._drive(router.conversation(call, timeout_secs))
        outcome = await self._send(send)
        result = router.settle(send, outcome)
        if result is not AGAIN:
            return cast(T, result)
        return await self._drive(router.conversation(call, timeout_secs, tried=(send, outcome)))

    async def per_node(self, call: Call[T], timeout_secs: float | None) -> dict[str, T]:
        """`call` sent to every node unchanged: each node's own result, by node name."""
        return await self._drive(self._router.per_node(call, timeout_secs))

    def routing_stats(self) -> RoutingStats:
        return self._router.routing_stats()

    async def close(self) -> None:
        self._closed = True
        pools, self._pools = list(self._pools.values()), {}
        for pool in pools:
            await pool.close()

    async def _drive(self, conversation: Conversation[T]) -> T:
        try:
            step = next(conversation)
            while True:
                step = conversation.send(await self._send_step(step))
        except StopIteration as stop:
            result: T = stop.value
            return result
        finally:
            conversation.close()

    async def _send_step(self, step: Step) -> list[Any]:
        if len(step) == 1:
            return [await self._send(step[0])]
        return list(await asyncio.gather(*(self._send(send) for send in step)))

    async def _send(self, send: Send) -> Any:
        try:
            return await self._pool(send.address).request(
                send.call, send.timeout_secs, connect_timeout_secs=connect_budget(send, self._connect_timeout_secs))
        except errors.KittiwakeError as exc:
            return exc

    def _pool(self, address: Address) -> AsyncPool:
        if self._closed:
            raise errors.BrokerUnreachable("the client is closed")
        pool = self._pools.get(address)
        if pool is None:
            pool = AsyncPool(
                self._address.at(address.host, address.port),
                connect_timeout_secs=self._connect_timeout_secs,
                max_reply_bytes=self._max_reply_bytes,
            )
            self._pools[address] = pool
        return pool

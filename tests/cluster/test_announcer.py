"""The announcer against a real node: what an idle cluster sends, and a flip that happens while a full
announcement is in flight (`kittiwake.cluster.announcer`). Node b is played in-process by an
`Announcer` of its own, so the test sees what it sends and when; node a is a real broker process."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kittiwake.client import Client
from kittiwake.client.calls import Call, request
from kittiwake.cluster.announcer import Announcer
from kittiwake.cluster.cluster_map import ClusterMap
from kittiwake.cluster.holdings import Holdings
from kittiwake.protocol.replies import result_decoder
from kittiwake.testing.cluster_nodes import ClusterNodes

COALESCE_SECS = 0.05
IDLE_SECS = 1.0
STOPPED_SECS = 0.3  # node a answers nothing for this long: b's first full announcement is in flight
POLL_SECS = 2.0  # far below the full refresh (5 s), which would tell a in any case


@pytest.fixture
def node_a(tmp_path: Path) -> Iterator[tuple[ClusterNodes, ClusterMap]]:
    with ClusterNodes(tmp_path, ["a", "b"], args=["--durability", "os"]) as nodes:
        nodes["b"].terminate()  # b is played in-process
        yield nodes, ClusterMap.from_toml(nodes.map_path.read_text())


def holders_on_a(nodes: ClusterNodes, queue: str) -> list[str]:
    call: Call[Any] = Call(request("holders", {"queues": [queue]}), result_decoder("holders"))
    with Client(nodes["a"].url) as client:
        holders: list[str] = client._run(call, None).holders[queue]
        return holders


async def announcements_while_idle(cluster: ClusterMap) -> int:
    announcer = Announcer(cluster, "b", Holdings("b", cluster.node_names), coalesce_secs=COALESCE_SECS)
    announcer.start()
    try:
        await asyncio.sleep(IDLE_SECS)
    finally:
        await announcer.stop()
    return announcer.sent


def test_an_idle_node_announces_once_per_refresh_not_once_per_coalescing_interval(
    node_a: tuple[ClusterNodes, ClusterMap],
) -> None:
    # The first full announcement's send was still in flight when the loop planned its next wake-up, so
    # the peer looked out of sync and the loop brought the next *full refresh* forward to one coalescing
    # interval: every node sent everything it holds to every peer 20 times a second, forever.
    _, cluster = node_a
    sent = asyncio.run(announcements_while_idle(cluster))
    assert sent == 1, f"{sent} announcements in {IDLE_SECS} s of idling (one full announcement at start expected)"


async def flip_during_a_full_announcement(nodes: ClusterNodes, cluster: ClusterMap) -> list[str]:
    holdings = Holdings("b", cluster.node_names)
    announcer = Announcer(cluster, "b", holdings, coalesce_secs=COALESCE_SECS)
    os.kill(nodes["a"].pid, signal.SIGSTOP)
    try:
        announcer.start()  # the full announcement (nothing held) waits on the stopped node
        await asyncio.sleep(STOPPED_SECS / 3)
        holdings.observe({"flipped": 1})  # as a commit does: b now holds tasks of "flipped"
        announcer.flips_ready.set()
        await asyncio.sleep(STOPPED_SECS)
    finally:
        os.kill(nodes["a"].pid, signal.SIGCONT)
    try:
        deadline = asyncio.get_running_loop().time() + POLL_SECS
        while True:
            seen = await asyncio.to_thread(holders_on_a, nodes, "flipped")
            if seen or asyncio.get_running_loop().time() > deadline:
                return seen
            await asyncio.sleep(0.05)
    finally:
        await announcer.stop()


def test_a_flip_while_a_full_announcement_is_in_flight_still_reaches_the_peer(
    node_a: tuple[ClusterNodes, ClusterMap],
) -> None:
    # The full announcement was taken before the flip; its success marked the peer in sync, so the
    # flip (skipped for that peer while its send was in flight) waited for the next full refresh.
    nodes, cluster = node_a
    seen = asyncio.run(flip_during_a_full_announcement(nodes, cluster))
    assert seen == ["b"], f"node a never heard, within {POLL_SECS} s, that b holds tasks of 'flipped' ({seen})"


def test_a_stop_that_meets_a_wake_up_still_stops() -> None:
    """`stop()` cancelling the loop in the very iteration its event is set (the end of a send sets it)
    must end the loop: on Python 3.11 `asyncio.wait_for` could swallow that cancellation, the loop
    went on and the broker's SIGTERM never finished (seen once in six runs of the grow test)."""
    cluster = ClusterMap.from_toml('[nodes]\na = "127.0.0.1:9"\nb = "127.0.0.1:19"\n')

    async def race() -> None:
        announcer = Announcer(cluster, "b", Holdings("b", cluster.node_names), coalesce_secs=0.001)
        announcer.start()
        await asyncio.sleep(0.1)  # its first announcement failed (nothing listens): it waits to retry

        async def set_and_stop() -> None:
            announcer.flips_ready.set()  # as a send ending sets it, in the turn the stop cancels the loop
            await announcer.stop()

        await asyncio.wait_for(set_and_stop(), 5.0)

    asyncio.run(race())

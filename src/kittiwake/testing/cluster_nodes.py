"""Several brokers as the nodes of one cluster on this machine, for tests and benchmarks.

    with ClusterNodes(tmp_path, ["a", "b", "c"]) as nodes:
        nodes["a"].url            # kw://127.0.0.1:PORT of node a
        nodes.url                 # kw://HOST:PORT,HOST:PORT,...: every node

A cluster map names each node's address, so the nodes cannot take port 0: `free_ports` picks ports
the kernel just handed out and released (another process may take one meanwhile: a node that does
not start says so in its log). Each node has its own data directory under `root`, and the map file is
`root/cluster.toml`; `args` are passed to every node. The nodes start together.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path
from typing import Self

from kittiwake.testing.broker_process import BrokerProcess

HOST = "127.0.0.1"


def free_ports(count: int, host: str = HOST) -> list[int]:
    """`count` distinct TCP ports free on `host` a moment ago."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind((host, 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def cluster_file_text(addresses: Sequence[tuple[str, str]], slots: int | None = None) -> str:
    """The TOML of a map with these (name, host:port) nodes, in order."""
    lines = [f"slots = {slots}", ""] if slots is not None else []
    lines += ["[nodes]"] + [f'{name} = "{address}"' for name, address in addresses]
    return "\n".join(lines) + "\n"


class ClusterNodes:
    """One `BrokerProcess` per node of a fresh cluster map (see the module docstring)."""

    def __init__(
        self, root: str | os.PathLike[str], names: Sequence[str], *, args: Sequence[str] = (), host: str = HOST
    ) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        ports = free_ports(len(names), host)
        self.addresses = {name: f"{host}:{port}" for name, port in zip(names, ports, strict=True)}
        self.map_path = self.root / "cluster.toml"
        self.map_path.write_text(cluster_file_text(list(self.addresses.items())))
        self.brokers = {
            name: BrokerProcess(
                self.root / f"node-{name}", host=host, port=port,
                args=["--cluster", str(self.map_path), "--node", name, *args],
            )
            for name, port in zip(names, ports, strict=True)
        }
        self._stack = ExitStack()

    def __getitem__(self, name: str) -> BrokerProcess:
        return self.brokers[name]

    def __iter__(self) -> Iterator[BrokerProcess]:
        return iter(self.brokers.values())

    @property
    def url(self) -> str:
        """`kw://` with every node's address, in map order."""
        return "kw://" + ",".join(self.addresses.values())

    def start(self) -> Self:
        """Start every node at once (each waits for its own listening line); the first failure is raised
        once all have tried, and leaving the `with` kills every node that started."""
        brokers = list(self.brokers.values())
        with ThreadPoolExecutor(max_workers=len(brokers)) as starting:
            outcomes = [starting.submit(broker.start) for broker in brokers]
        for broker in brokers:
            if broker.alive():
                self._stack.enter_context(broker)
        for outcome in outcomes:
            outcome.result()
        return self

    def __enter__(self) -> Self:
        try:
            return self.start()
        except BaseException:
            self._stack.close()
            raise

    def __exit__(self, *exc_info: object) -> None:
        self._stack.close()

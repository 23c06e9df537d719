"""Several brokers as the nodes of one cluster on this machine, for tests and benchmarks.

    with ClusterNodes(tmp_path, ["a", "b", "c"]) as nodes:
        nodes["a"].url            # kw://127.0.0.1:PORT of node a
        nodes.url                 # kw://HOST:PORT,HOST:PORT,...: every node

A cluster map names each node's address, so the nodes cannot take port 0: `free_ports` picks ports
the kernel just handed out and released (another process may take one meanwhile: a node that does
not start says so in its log). Each node has its own data directory under `root`, and the map file is
`root/cluster.toml`; `args` are passed to every node. The nodes start together.

With `tls_cert` and `tls_key` the map says `tls = true` and names each node's TLS port (`--tls-port`;
the plaintext port stays open on another port unless `args` close it), the nodes verify each other
against `ca_file` (`--cluster-ca`), and `url` is `kws://…?ca=CA_FILE`.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path
from typing import Self
from urllib.parse import quote

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


def cluster_file_text(addresses: Sequence[tuple[str, str]], slots: int | None = None, *, tls: bool = False) -> str:
    """The TOML of a map with these (name, host:port) nodes, in order (`tls`: TLS ports)."""
    lines = [f"slots = {slots}"] if slots is not None else []
    lines += ["tls = true"] if tls else []
    lines += [""] if lines else []
    lines += ["[nodes]"] + [f'{name} = "{address}"' for name, address in addresses]
    return "\n".join(lines) + "\n"


class ClusterNodes:
    """One `BrokerProcess` per node of a fresh cluster map (see the module docstring)."""

    def __init__(
        self, root: str | os.PathLike[str], names: Sequence[str], *, args: Sequence[str] = (), host: str = HOST,
        tls_cert: str | os.PathLike[str] | None = None, tls_key: str | os.PathLike[str] | None = None,
        ca_file: str | os.PathLike[str] | None = None,
    ) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        tls = tls_cert is not None
        ports = free_ports(len(names) * (2 if tls else 1), host)
        plain_ports = ports[: len(names)]
        map_ports = ports[len(names):] if tls else plain_ports
        self.addresses = {name: f"{host}:{port}" for name, port in zip(names, map_ports, strict=True)}
        self.map_path = self.root / "cluster.toml"
        self.map_path.write_text(cluster_file_text(list(self.addresses.items()), tls=tls))
        self.scheme = "kws" if tls else "kw"
        self.query = f"?ca={quote(os.fspath(ca_file))}" if tls and ca_file is not None else ""
        node_args: list[str] = []
        if tls_cert is not None:
            if tls_key is None:
                raise ValueError("tls_cert needs tls_key")
            node_args += ["--tls-cert", os.fspath(tls_cert), "--tls-key", os.fspath(tls_key)]
            node_args += ["--cluster-ca", os.fspath(ca_file)] if ca_file is not None else []
        self.brokers = {
            name: BrokerProcess(
                self.root / f"node-{name}", host=host, port=port,
                args=["--cluster", str(self.map_path), "--node", name, *node_args,
                      *(["--tls-port", str(map_port)] if tls else []), *args],
            )
            for name, port, map_port in zip(names, plain_ports, map_ports, strict=True)
        }
        self._stack = ExitStack()

    def __getitem__(self, name: str) -> BrokerProcess:
        return self.brokers[name]

    def __iter__(self) -> Iterator[BrokerProcess]:
        return iter(self.brokers.values())

    @property
    def url(self) -> str:
        """`kw://` (`kws://…?ca=…` on a TLS map) with every node's address, in map order."""
        return f"{self.scheme}://" + ",".join(self.addresses.values()) + self.query

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

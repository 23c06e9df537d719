"""Hosts of their own for cluster tests: network namespaces on one machine, or loopback ports.

`test_hosts(count)` yields `count` `TestHost`s. As root with iproute2, each is a network namespace
(`ip netns add`) with a veth pair whose far end sits on a bridge in the root namespace: every host
has an address of its own in a private /24, reaches the others and is reached from the root
namespace (where the test and its clients run). A process runs on a host through
`host.command(...)` (`ip netns exec NS ...`, which execs, so its pid is the process's own and
SIGKILL reaches it). Everything made is removed on exit, processes first.

`host_nodes(root, hosts)` starts one cluster node per host (`kittiwake broker --cluster FILE
--node NAME`, run with `host.command`), the map file `root/cluster.toml` naming them.

Where namespaces cannot be made (not root, no `ip`, a sandbox without CAP_NET_ADMIN), the hosts
are the loopback address with a free port each, and `namespaced` is False: the tests run the same,
on ports instead of hosts.
"""

from __future__ import annotations

import itertools
import os
import shutil
import socket
import subprocess
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

from kittiwake.testing import BrokerProcess
from kittiwake.testing.broker_process import broker_command

PORT = 7370
_SUBNETS = range(200, 250)  # 10.<n>.0.0/24, one per test run alive at once
_CALLS = itertools.count()  # names are new per call: a deleted namespace's veth goes away asynchronously


@dataclass(frozen=True)
class TestHost:
    name: str  # the node name it carries in a map
    ip: str
    port: int
    namespace: str | None  # None: the loopback

    __test__ = False  # not a pytest test class

    @property
    def address(self) -> str:
        return f"{self.ip}:{self.port}"

    def command(self, argv: Sequence[str]) -> list[str]:
        """`argv` run on this host."""
        if self.namespace is None:
            return list(argv)
        return ["ip", "netns", "exec", self.namespace, *argv]


def _run(*argv: str) -> None:
    subprocess.run(list(argv), check=True, capture_output=True, timeout=10)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def namespaces_allowed() -> bool:
    """Whether this process may make network namespaces (root with iproute2)."""
    return os.geteuid() == 0 and shutil.which("ip") is not None


@contextmanager
def test_hosts(count: int, names: Sequence[str] | None = None) -> Iterator[list[TestHost]]:
    """`count` hosts (namespaces where allowed, else loopback ports), removed on exit."""
    names = list(names) if names is not None else [chr(ord("a") + index) for index in range(count)]
    if not namespaces_allowed():
        yield [TestHost(name, "127.0.0.1", _free_port(), None) for name in names]
        return
    tag = f"kw{os.getpid() % 100000}{next(_CALLS) % 1000:03}"
    bridge = f"{tag}br"
    subnet = _SUBNETS[os.getpid() % len(_SUBNETS)]
    made: list[str] = []
    veths: list[str] = []
    try:
        try:
            _run("ip", "link", "add", bridge, "type", "bridge")
        except subprocess.CalledProcessError:
            yield [TestHost(name, "127.0.0.1", _free_port(), None) for name in names]
            return
        _run("ip", "addr", "add", f"10.{subnet}.0.1/24", "dev", bridge)
        _run("ip", "link", "set", bridge, "up")
        hosts = []
        for index, name in enumerate(names):
            namespace, veth = f"{tag}h{index}", f"{tag}v{index}"
            _run("ip", "netns", "add", namespace)
            made.append(namespace)
            _run("ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", namespace)
            veths.append(veth)
            _run("ip", "link", "set", veth, "master", bridge, "up")
            ip = f"10.{subnet}.0.{index + 2}"
            _run("ip", "-n", namespace, "addr", "add", f"{ip}/24", "dev", "eth0")
            _run("ip", "-n", namespace, "link", "set", "eth0", "up")
            _run("ip", "-n", namespace, "link", "set", "lo", "up")
            hosts.append(TestHost(name, ip, PORT, namespace))
        yield hosts
    finally:
        for namespace in made:
            # the processes of a namespace die with the test's fixtures; whatever is left goes now
            pids = subprocess.run(["ip", "netns", "pids", namespace], capture_output=True, text=True, timeout=10)
            for pid in pids.stdout.split():
                try:
                    os.kill(int(pid), 9)
                except (ProcessLookupError, ValueError):
                    pass
        for veth in veths:  # deleting one end deletes the pair now, not when the kernel gets to it
            subprocess.run(["ip", "link", "del", veth], capture_output=True, timeout=10)
        for namespace in made:
            subprocess.run(["ip", "netns", "del", namespace], capture_output=True, timeout=10)
        subprocess.run(["ip", "link", "del", bridge], capture_output=True, timeout=10)


def map_text(hosts: Sequence[TestHost]) -> str:
    """The cluster file naming these hosts, in order."""
    return "[nodes]\n" + "".join(f'{host.name} = "{host.address}"\n' for host in hosts)


def cluster_url(hosts: Sequence[TestHost]) -> str:
    """`kw://` naming every host's node."""
    return "kw://" + ",".join(host.address for host in hosts)


def node_process(root: Path, host: TestHost, map_path: Path, args: Sequence[str] = ()) -> BrokerProcess:
    """The node `host.name` of the map at `map_path`, on `host`, data in `root/node-NAME` (not started)."""
    return BrokerProcess(
        root / f"node-{host.name}", host=host.ip, port=host.port, command=host.command(broker_command()),
        args=["--cluster", str(map_path), "--node", host.name, *args],
    )


@contextmanager
def host_nodes(root: Path, hosts: Sequence[TestHost], args: Sequence[str] = ()) -> Iterator[dict[str, BrokerProcess]]:
    """One node per host, by name, under the map `root/cluster.toml`, started at once; killed on exit."""
    map_path = root / "cluster.toml"
    map_path.write_text(map_text(hosts))
    nodes = {host.name: node_process(root, host, map_path, args) for host in hosts}
    with ExitStack() as stack:
        with ThreadPoolExecutor(max_workers=len(nodes)) as starting:  # together: each waits for its own line
            outcomes = [starting.submit(node.start) for node in nodes.values()]
        for node in nodes.values():
            if node.alive():
                stack.enter_context(node)
        for outcome in outcomes:
            outcome.result()
        yield nodes

"""The static cluster map: the nodes of a cluster, which node owns each slot, and the epoch.

A cluster file is TOML::

    slots = 1024            # optional, DEFAULT_SLOTS
    tls = true              # optional, false: the addresses are the nodes' TLS ports

    [nodes]
    a = "10.0.0.1:7000"
    b = "10.0.0.2:7000"
    c = "[fd00::3]:7000"

Node names are 1 to 64 of `[a-z0-9_-]`; an address is `host:port` (an IPv6 host in brackets), no
two nodes at the same address; at least one node and no more nodes than slots. Anything else is
refused with `errors.BadRequest` naming what is wrong.

**TLS.** With `tls = true` every address is a node's TLS port (`broker --tls-port`): clients reach
the nodes with `kws://` and the nodes announce to each other over TLS, verifying each other's
certificates (`broker --cluster-ca`). Without it every address is a plaintext port (`--port`). A
cluster is one or the other: the flag is the map's, not a node's.

Who owns each slot is derived from the file alone, so every process reading it agrees:

**The assignment rule.** Nodes are taken in the order the file lists them. The first node owns
every slot. Each next node joins by taking, from every node before it, that node's highest-numbered
slots beyond its new quota, where with `m` nodes the quota of the node at index `i` is
`slots // m`, plus one when `i < slots % m`. So every node owns `floor` or `ceil` of
`slots / nodes` slots (the earlier ones the ceil), and appending a node to the file moves exactly
`slots // (nodes + 1)` slots, all to the new node: the fewest any balanced map can move (the new
node must own at least that many). A joining node only takes, never gives: at each step every old
quota is at most the node's holding (shown in `_assign`). Reordering or removing nodes is a new
map that may move many slots; grow by appending.

**The epoch** is a stable hash (blake2b) of the slot count, the nodes in order with their
addresses and, when set, `tls`, as 16 hex digits: a text, so it travels through JSON in any language
unharmed. The same file gives the same epoch everywhere; any change a client must learn of gives
another.
"""

from __future__ import annotations

import hashlib
import re
import tomllib
from dataclasses import dataclass, field

from kittiwake import errors

DEFAULT_SLOTS = 1024
"""Slots of a map whose file names none."""

MAX_SLOTS = 65536
"""The most slots a map may have (the table of owners is kept whole in every process)."""

ID_STRIDE = 32
"""Nodes a cluster may have. A node at index `i` of the file issues FIFO pids and lease ids equal
to `i` modulo this (`engine.ids`' residue classes), so a broker-issued id names its node and a
client routes a FIFO task or a lease to it with no table. Ids step past the clock's microseconds by
at most this per id, so a node issuing more than 1,000,000 / ID_STRIDE ids a second runs its
counter ahead of the clock (harmless: ids only need to grow)."""

_NODE_NAME = re.compile(r"[a-z0-9_-]{1,64}")
_HOST_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9.-]{0,252})")
_IPV6 = re.compile(r"[0-9A-Fa-f:.]{2,45}")
_TOP_LEVEL_KEYS = frozenset({"slots", "tls", "nodes"})


@dataclass(frozen=True, order=True)
class Address:
    """Where a node listens: a host name or IP literal and a TCP port."""

    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    @classmethod
    def parse(cls, text: str) -> Address:
        """The address of `host:port` or `[ipv6]:port`; BadRequest naming what is wrong."""
        if text.startswith("["):
            host, sep, port_text = text[1:].partition("]:")
            if not sep or not _IPV6.fullmatch(host) or ":" not in host:
                raise errors.BadRequest(f"address {text!r}: an IPv6 host is written [host]:port")
        else:
            host, sep, port_text = text.rpartition(":")
            if not sep:
                raise errors.BadRequest(f"address {text!r} has no port: write host:port")
            if not _HOST_NAME.fullmatch(host):
                raise errors.BadRequest(f"address {text!r}: host {host!r} is not a host name or IPv4 address")
        if not port_text.isascii() or not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
            raise errors.BadRequest(f"address {text!r}: port {port_text!r} is not a number from 1 to 65535")
        return cls(host, int(port_text))


@dataclass(frozen=True)
class Node:
    """One node of a cluster: its name and where it listens."""

    name: str
    address: Address


@dataclass(frozen=True)
class ClusterMap:
    """The nodes of a cluster in file order and the slot count; the owner of every slot and the
    epoch are derived from them (the module docstring gives the rule)."""

    nodes: tuple[Node, ...]
    slots: int = DEFAULT_SLOTS
    tls: bool = False
    """Whether the addresses are the nodes' TLS ports (`kws://`) rather than plaintext ones."""
    owners: tuple[str, ...] = field(init=False, repr=False, compare=False)
    """The owner of each slot, by slot number."""
    epoch: str = field(init=False)
    """16 hex digits naming this map; equal maps have equal epochs."""

    def __post_init__(self) -> None:
        _validate(self.nodes, self.slots)
        owners = _assign([node.name for node in self.nodes], self.slots)
        # frozen: the derived fields are set once, here, from the validated inputs
        object.__setattr__(self, "owners", owners)
        object.__setattr__(self, "epoch", _epoch(self.nodes, self.slots, self.tls))

    @classmethod
    def from_toml(cls, text: str) -> ClusterMap:
        """The map a cluster file's text describes; BadRequest saying what is wrong with it."""
        try:
            document = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise errors.BadRequest(f"cluster map is not valid TOML: {exc}") from None
        unknown = sorted(set(document) - _TOP_LEVEL_KEYS)
        if unknown:
            raise errors.BadRequest(f"cluster map: unknown key(s) {', '.join(unknown)} (it has slots, tls and [nodes])")
        slots = document.get("slots", DEFAULT_SLOTS)
        if not isinstance(slots, int) or isinstance(slots, bool):
            raise errors.BadRequest(f"cluster map: slots must be an integer, not {slots!r}")
        tls = document.get("tls", False)
        if not isinstance(tls, bool):
            raise errors.BadRequest(f"cluster map: tls must be true or false, not {tls!r}")
        table = document.get("nodes")
        if not isinstance(table, dict):
            raise errors.BadRequest('cluster map: no [nodes] table (write [nodes] then a = "host:port")')
        nodes = []
        for name, value in table.items():
            if not isinstance(value, str):
                raise errors.BadRequest(f'cluster map: node {name!r} must be a "host:port" string, not {value!r}')
            _check_name(name)
            nodes.append(Node(name, Address.parse(value)))
        return cls(tuple(nodes), slots, tls)

    def to_toml(self) -> str:
        """The cluster file of this map; `from_toml` of it gives an equal map."""
        lines = [f"slots = {self.slots}"] + (["tls = true"] if self.tls else []) + ["", "[nodes]"]
        lines += [f'{node.name} = "{node.address}"' for node in self.nodes]
        return "\n".join(lines) + "\n"

    @property
    def placement(self) -> str:
        """16 hex digits naming where the slots lie: the node names in order and the slot count. Two
        maps of one placement differ only in addresses or `tls`: every key stays on its node."""
        canonical = "\n".join([f"slots={self.slots}"] + list(self.node_names))
        return hashlib.blake2b(canonical.encode("utf-8"), digest_size=8).hexdigest()

    @property
    def node_names(self) -> tuple[str, ...]:
        """The names of the nodes, in file order."""
        return tuple(node.name for node in self.nodes)

    def owner(self, slot: int) -> str:
        """The name of the node that owns `slot`."""
        if not 0 <= slot < self.slots:
            raise errors.BadRequest(f"slot {slot} is outside 0..{self.slots - 1}")
        return self.owners[slot]

    def slots_of(self, node: str) -> tuple[int, ...]:
        """The slots `node` owns, ascending."""
        self.address_of(node)  # refuses an unknown node
        return tuple(slot for slot, owner in enumerate(self.owners) if owner == node)

    def index_of(self, node: str) -> int:
        """The position of `node` in the file: the residue of the ids it issues (`ID_STRIDE`)."""
        for index, candidate in enumerate(self.nodes):
            if candidate.name == node:
                return index
        raise errors.BadRequest(f"no node {node!r} in the cluster map (nodes: {', '.join(self.node_names)})")

    def node_of_id(self, value: int) -> str | None:
        """The node that issued a FIFO pid's number or a lease id (its residue modulo
        `ID_STRIDE`), or None when no node of this map has that residue."""
        index = value % ID_STRIDE
        return self.nodes[index].name if index < len(self.nodes) else None

    def address_of(self, node: str) -> Address:
        """Where `node` listens."""
        for candidate in self.nodes:
            if candidate.name == node:
                return candidate.address
        raise errors.BadRequest(f"no node {node!r} in the cluster map (nodes: {', '.join(self.node_names)})")


def _check_name(name: str) -> None:
    if not _NODE_NAME.fullmatch(name):
        raise errors.BadRequest(f"cluster map: node name {name!r} is not 1 to 64 of a-z, 0-9, _ and -")


def _validate(nodes: tuple[Node, ...], slots: int) -> None:
    if not 1 <= slots <= MAX_SLOTS:
        raise errors.BadRequest(f"cluster map: slots must be from 1 to {MAX_SLOTS}, not {slots}")
    if not nodes:
        raise errors.BadRequest("cluster map: [nodes] names no node")
    if len(nodes) > ID_STRIDE:
        raise errors.BadRequest(f"cluster map: {len(nodes)} nodes, but a cluster has at most {ID_STRIDE}")
    if len(nodes) > slots:
        raise errors.BadRequest(f"cluster map: {len(nodes)} nodes cannot share {slots} slots (each owns one at least)")
    names: set[str] = set()
    addresses: dict[tuple[str, int], str] = {}
    for node in nodes:
        _check_name(node.name)
        if node.name in names:
            raise errors.BadRequest(f"cluster map: node {node.name!r} is named twice")
        names.add(node.name)
        key = (node.address.host.lower(), node.address.port)
        if key in addresses:
            raise errors.BadRequest(
                f"cluster map: nodes {addresses[key]!r} and {node.name!r} have the same address {node.address}")
        addresses[key] = node.name


def _quota(index: int, nodes: int, slots: int) -> int:
    return slots // nodes + (1 if index < slots % nodes else 0)


def _assign(names: list[str], slots: int) -> tuple[str, ...]:
    """The owner of each slot by the module's rule: nodes join in order, each taking from every
    earlier node its highest slots beyond its new quota.

    A join only takes: with q, r = divmod(slots, m) and q', r' = divmod(slots, m - 1), either q < q'
    (a new quota is at most q + 1 <= q' <= the old one) or q == q', and then r' = q + r >= r, so
    `i < r` implies `i < r'`."""
    held: list[list[int]] = [list(range(slots))]
    for count in range(2, len(names) + 1):
        taken: list[int] = []
        for index, slots_held in enumerate(held):
            keep = _quota(index, count, slots)
            taken += slots_held[keep:]
            del slots_held[keep:]
        held.append(sorted(taken))
    owners = [""] * slots
    for name, slots_held in zip(names, held, strict=True):
        for slot in slots_held:
            owners[slot] = name
    return tuple(owners)


def _epoch(nodes: tuple[Node, ...], slots: int, tls: bool) -> str:
    # `tls` joins the text only when set: a map without it keeps the epoch its stores recorded
    canonical = "\n".join([f"slots={slots}"] + ["tls=1"] * tls + [f"{node.name}={node.address}" for node in nodes])
    return hashlib.blake2b(canonical.encode("utf-8"), digest_size=8).hexdigest()

"""The static cluster map: read from TOML, refused with clear errors when wrong, and derived the
same everywhere: every slot owned once, balance within one slot, an appended node moving only
its share, a stable epoch."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kittiwake import errors
from kittiwake.cluster.cluster_map import DEFAULT_SLOTS, Address, ClusterMap, Node

NAMES = st.from_regex(r"[a-z0-9_-]{1,12}", fullmatch=True)


@st.composite
def maps(draw: st.DrawFn, min_nodes: int = 1, max_nodes: int = 12) -> ClusterMap:
    names = draw(st.lists(NAMES, min_size=min_nodes, max_size=max_nodes, unique=True))
    slots = draw(st.integers(min_value=len(names), max_value=2048))
    return ClusterMap(tuple(Node(name, Address("10.0.0.1", 7000 + i)) for i, name in enumerate(names)), slots)


def toml(nodes: str, head: str = "") -> str:
    return f"{head}\n[nodes]\n{nodes}\n"


def test_a_file_gives_its_nodes_addresses_and_default_slots() -> None:
    cluster = ClusterMap.from_toml(toml('a = "10.0.0.1:7000"\nb = "host-b.example:7001"\nc = "[fd00::3]:7002"'))
    assert cluster.node_names == ("a", "b", "c") and cluster.slots == DEFAULT_SLOTS
    assert cluster.address_of("c") == Address("fd00::3", 7002) and str(cluster.address_of("c")) == "[fd00::3]:7002"
    assert str(cluster.address_of("b")) == "host-b.example:7001"
    assert [len(cluster.slots_of(node)) for node in cluster.node_names] == [342, 341, 341]
    assert len(cluster.epoch) == 16 and int(cluster.epoch, 16) >= 0


def test_the_assignment_is_the_documented_rule_on_a_small_map() -> None:
    cluster = ClusterMap.from_toml(toml('a = "h:1"\nb = "h:2"\nc = "h:3"', "slots = 10"))
    # a owns 0-9; b joins taking a's 5-9; c joins taking a's 4 and b's 8, 9
    assert cluster.owners == ("a", "a", "a", "a", "c", "b", "b", "b", "c", "c")
    assert cluster.owner(4) == "c" and cluster.slots_of("b") == (5, 6, 7)


@pytest.mark.parametrize(("text", "says"), [
    ("[nodes\n", "not valid TOML"),
    ("slots = 8\n", "no [nodes] table"),
    ("[nodes]\n", "names no node"),
    ('[nodes]\nA = "h:1"\n', "node name 'A'"),
    ('[nodes]\n"a b" = "h:1"\n', "node name 'a b'"),
    (f'[nodes]\n{"a" * 65} = "h:1"\n', "1 to 64"),
    ('[nodes]\na = 7000\n', 'must be a "host:port" string'),
    ('[nodes]\na = "host"\n', "has no port"),
    ('[nodes]\na = "host:0"\n', "port '0'"),
    ('[nodes]\na = "host:65536"\n', "port '65536'"),
    ('[nodes]\na = "host:http"\n', "port 'http'"),
    ('[nodes]\na = ":7000"\n', "host ''"),
    ('[nodes]\na = "bad host:7000"\n', "host 'bad host'"),
    ('[nodes]\na = "::1:7000"\n', "host '::1'"),
    ('[nodes]\na = "[nothex]:7000"\n', "IPv6 host"),
    ('[nodes]\na = "h:1"\nb = "H:1"\n', "'a' and 'b' have the same address"),
    ('slots = "many"\n[nodes]\na = "h:1"\n', "slots must be an integer"),
    ('slots = true\n[nodes]\na = "h:1"\n', "slots must be an integer"),
    ('slots = 0\n[nodes]\na = "h:1"\n', "slots must be from 1 to 65536"),
    ('slots = 65537\n[nodes]\na = "h:1"\n', "slots must be from 1 to 65536"),
    ('slots = 1\n[nodes]\na = "h:1"\nb = "h:2"\n', "2 nodes cannot share 1 slots"),
    ('slot = 8\n[nodes]\na = "h:1"\n', "unknown key(s) slot"),
    ('nodes = "a"\n', "no [nodes] table"),
    ('tls = "yes"\n[nodes]\na = "h:1"\n', "tls must be true or false"),
])
def test_a_bad_file_is_refused_saying_what_is_wrong(text: str, says: str) -> None:
    with pytest.raises(errors.BadRequest) as raised:
        ClusterMap.from_toml(text)
    assert raised.value.code == "BAD_REQUEST" and says in raised.value.message


def test_a_map_built_in_code_is_validated_like_a_file() -> None:
    with pytest.raises(errors.BadRequest, match="named twice"):
        ClusterMap((Node("a", Address("h", 1)), Node("a", Address("h", 2))))
    with pytest.raises(errors.BadRequest, match="node name"):
        ClusterMap((Node("A", Address("h", 1)),))


def test_unknown_nodes_and_slots_are_refused() -> None:
    cluster = ClusterMap.from_toml(toml('a = "h:1"', "slots = 4"))
    with pytest.raises(errors.BadRequest, match="no node 'z'"):
        cluster.slots_of("z")
    with pytest.raises(errors.BadRequest, match="no node 'z'"):
        cluster.address_of("z")
    for slot in (-1, 4):
        with pytest.raises(errors.BadRequest, match="outside 0..3"):
            cluster.owner(slot)


@settings(max_examples=60, deadline=None)
@given(maps())
def test_every_slot_is_owned_exactly_once_and_balanced_within_one(cluster: ClusterMap) -> None:
    owned = [cluster.slots_of(node) for node in cluster.node_names]
    assert sorted(slot for slots in owned for slot in slots) == list(range(cluster.slots))
    counts = [len(slots) for slots in owned]
    assert max(counts) - min(counts) <= 1 and min(counts) == cluster.slots // len(counts)
    assert all(cluster.owner(slot) == node for node, slots in zip(cluster.node_names, owned) for slot in slots)


@settings(max_examples=60, deadline=None)
@given(maps())
def test_the_same_file_gives_the_same_map_and_epoch(cluster: ClusterMap) -> None:
    again = ClusterMap.from_toml(cluster.to_toml())
    assert again == cluster and again.owners == cluster.owners and again.epoch == cluster.epoch


@settings(max_examples=60, deadline=None)
@given(maps(max_nodes=11), NAMES)
def test_appending_a_node_moves_only_its_share_all_to_it(cluster: ClusterMap, name: str) -> None:
    if name in cluster.node_names or len(cluster.nodes) + 1 > cluster.slots:
        return
    grown = ClusterMap(cluster.nodes + (Node(name, Address("10.0.0.2", 7000)),), cluster.slots)
    moved = [slot for slot in range(cluster.slots) if cluster.owner(slot) != grown.owner(slot)]
    assert len(moved) == cluster.slots // len(grown.nodes)
    assert all(grown.owner(slot) == name for slot in moved)
    assert grown.epoch != cluster.epoch


def test_any_change_a_client_must_learn_gives_another_epoch() -> None:
    base = ClusterMap.from_toml(toml('a = "h:1"\nb = "h:2"'))
    changed = [
        toml('a = "h:1"\nb = "h:3"'),  # an address
        toml('b = "h:2"\na = "h:1"'),  # the order, which is the assignment
        toml('a = "h:1"\nb = "h:2"', "slots = 512"),
        toml('a = "h:1"\nc = "h:2"'),
        toml('a = "h:1"\nb = "h:2"', "tls = true"),  # the addresses are TLS ports
    ]
    epochs = {base.epoch} | {ClusterMap.from_toml(text).epoch for text in changed}
    assert len(epochs) == 1 + len(changed)
    assert ClusterMap.from_toml(toml('a = "h:1"\nb = "h:2"', "slots = 1024")).epoch == base.epoch
    assert ClusterMap.from_toml(toml('a = "h:1"\nb = "h:2"', "tls = false")).epoch == base.epoch


def test_a_map_without_tls_keeps_the_epoch_its_stores_recorded() -> None:
    # epochs are recorded in every node's store: saying `tls` must not change those of older maps
    assert ClusterMap.from_toml(toml('a = "h:1"\nb = "h:2"')).epoch == "f3bb7458326462e0"


def test_a_tls_map_says_so_and_writes_itself_back() -> None:
    cluster = ClusterMap.from_toml(toml('a = "h:1"\nb = "h:2"', "tls = true"))
    assert cluster.tls and not ClusterMap.from_toml(toml('a = "h:1"')).tls
    again = ClusterMap.from_toml(cluster.to_toml())
    assert again == cluster and again.tls and again.epoch == cluster.epoch

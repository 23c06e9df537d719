"""Holdings: flips announced once and net, full snapshots settle them, peers' views replaced or patched,
and holders answered this node first."""

from __future__ import annotations

from kittiwake.cluster.holdings import Holdings


def test_flips_are_net_and_announced_once() -> None:
    holdings = Holdings("a", ["a", "b", "c"])
    holdings.observe({"q": 2, "r": 0, "g#x": 5})
    assert holdings.take_flips() == (["q"], [])
    holdings.observe({"q": 0})
    holdings.observe({"q": 1})  # flipped and back: nothing to say
    assert holdings.take_flips() == ([], [])
    holdings.observe({"q": 0})
    assert holdings.take_flips() == ([], ["q"])
    holdings.observe_all({"s": 1})
    assert holdings.snapshot() == ["s"] and not holdings.has_flips


def test_peers_views_and_the_answer_order() -> None:
    holdings = Holdings("b", ["a", "b", "c"])
    holdings.apply("c", ["q", "r"], [], True)
    holdings.apply("a", ["q"], [], False)
    holdings.observe({"q": 1})
    assert holdings.holders(["q", "r", "z"]) == {"q": ["b", "a", "c"], "r": ["c"], "z": []}
    holdings.apply("c", ["z"], [], True)  # full: replaces
    holdings.apply("a", [], ["q"], False)
    assert holdings.holders(["q", "r", "z"]) == {"q": ["b"], "r": [], "z": ["c"]}

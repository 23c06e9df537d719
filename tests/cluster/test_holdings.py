"""Holdings: flips announced once and net, full snapshots settle them, peers' views replaced or patched
per broker instance, stale instances forgotten, and holders answered this node first."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kittiwake.cluster.holdings import MAX_INSTANCES, Holdings


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
    holdings.apply("c", ["q", "r"], [], True, now=0.0)
    holdings.apply("a", ["q"], [], False, now=0.0)
    holdings.observe({"q": 1})
    assert holdings.holders(["q", "r", "z"], 1.0) == {"q": ["b", "a", "c"], "r": ["c"], "z": []}
    holdings.apply("c", ["z"], [], True, now=1.0)  # full: replaces
    holdings.apply("a", [], ["q"], False, now=1.0)
    assert holdings.holders(["q", "r", "z"], 2.0) == {"q": ["b"], "r": [], "z": ["c"]}


def test_a_broker_just_started_does_not_erase_what_its_sibling_announced() -> None:
    """Two brokers serve node b on one PostgreSQL schema: the one just restarted holds nothing in
    memory and says so in full; b still holds what the other one announced."""
    holdings = Holdings("a", ["a", "b"])
    holdings.apply("b", ["q"], [], True, instance="b1", now=0.0)
    holdings.apply("b", [], [], True, instance="b2", now=1.0)
    assert holdings.holders(["q"], 2.0) == {"q": ["b"]}
    holdings.apply("b", [], ["q"], False, instance="b1", now=3.0)  # b1 ran out
    assert holdings.holders(["q"], 4.0) == {"q": []}


def test_an_instance_not_heard_is_forgotten() -> None:
    """A peer down (or a broker replaced by a new instance) stops being named after `stale_secs`."""
    holdings = Holdings("a", ["a", "b"], stale_secs=15.0)
    holdings.apply("b", ["q"], [], True, instance="old", now=0.0)
    holdings.apply("b", ["r"], [], True, instance="new", now=10.0)
    assert holdings.holders(["q", "r"], 15.0) == {"q": ["b"], "r": ["b"]}
    assert holdings.holders(["q", "r"], 15.5) == {"q": [], "r": ["b"]}
    assert holdings.peer_holdings(26.0) == {"b": set()}


def test_instances_per_peer_are_bounded() -> None:
    holdings = Holdings("a", ["a", "b"])
    for index in range(MAX_INSTANCES + 3):
        holdings.apply("b", [f"q{index}"], [], True, instance=f"i{index}", now=float(index))
    held = holdings.peer_holdings(float(MAX_INSTANCES + 3))["b"]
    assert held == {f"q{index}" for index in range(3, MAX_INSTANCES + 3)}  # the least recently heard went


announcements = st.lists(
    st.tuples(st.sampled_from(["i1", "i2", "i3"]), st.sets(st.sampled_from("qrs")), st.sets(st.sampled_from("qrs")),
              st.booleans(), st.integers(0, 20)),
    max_size=30,
)


@settings(max_examples=300)
@given(announcements, st.integers(0, 20))
def test_holders_match_a_model_of_instances(steps: list[tuple[str, set[str], set[str], bool, int]], later: int) -> None:
    """A peer holds a queue when any instance heard within `stale_secs` last said so."""
    holdings = Holdings("a", ["a", "b"], stale_secs=10.0)
    model: dict[str, tuple[float, set[str]]] = {}
    now = 0.0
    for instance, holding, empty, full, gap in steps:
        now += gap
        if now - model.get(instance, (now, set()))[0] > 10.0:
            model.pop(instance)  # a stale instance is forgotten before it is heard again
        queues = set() if full or instance not in model else set(model[instance][1])
        model[instance] = (now, (queues | holding) - empty)
        holdings.apply("b", sorted(holding), sorted(empty), full, instance=instance, now=now)
    now += later
    expected = {queue for heard_at, queues in model.values() if now - heard_at <= 10.0 for queue in queues}
    assert holdings.peer_holdings(now) == {"b": expected}
    assert holdings.holders(["q", "r", "s"], now) == {queue: ["b"] if queue in expected else [] for queue in "qrs"}

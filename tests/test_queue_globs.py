"""Queue-name globs: what they match, and that no pattern can make matching slow."""

from __future__ import annotations

import fnmatch

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kittiwake.queue_globs import PatternError, QueuePattern, compile_pattern


@pytest.mark.parametrize(
    "pattern, name, expected",
    [
        ("alice.jobs", "alice.jobs", True),
        ("alice.jobs", "alice.jobs.dead", False),
        ("alice.*", "alice.jobs", True),
        ("alice.*", "alice.", True),
        ("alice.*", "alice.jobs.dead", True),
        ("alice.*", "xalice.jobs", False),
        ("alice.*", "alice", False),
        ("*", "anything#at.all", True),
        ("*.dead", "a.b.dead", True),
        ("*.dead", "a.b.deadx", False),
        ("billing#*", "billing#invoices", True),
        ("billing#*", "billing", False),
        ("*#_replies.*", "shop#_replies.abc", True),
        ("q?", "q1", True),
        ("q?", "q", False),
        ("q?", "q12", False),
        ("a*b*c", "aXbYc", True),
        ("a*b*c", "aXcYb", False),
        ("a*?", "a", False),
        ("a*?", "ab", True),
        ("**", "", True),
    ],
)
def test_matches_whole_names(pattern: str, name: str, expected: bool) -> None:
    assert compile_pattern(pattern).matches(name) is expected


@pytest.mark.parametrize("bad", ["", "a b", "a[bc]", "x" * 513, "é*", "a\x00"])
def test_bad_patterns_are_refused(bad: str) -> None:
    with pytest.raises(PatternError):
        QueuePattern(bad)


def test_everything() -> None:
    assert compile_pattern("*").is_everything and compile_pattern("***").is_everything
    assert not compile_pattern("a*").is_everything


ALPHABET = "ab.#"


@settings(max_examples=400, deadline=None)
@given(st.text(ALPHABET + "*?", min_size=1, max_size=12), st.text(ALPHABET, max_size=16))
def test_agrees_with_fnmatch(pattern: str, name: str) -> None:
    # fnmatch has no other special characters in this alphabet
    assert compile_pattern(pattern).matches(name) == fnmatch.fnmatchcase(name, pattern)


@pytest.mark.timeout(60)  # a guard against a hang, not a measurement
def test_a_pattern_that_backtracks_in_a_regex_is_one_pass() -> None:
    # `(.*a){25}b` as a backtracking regex tries ~C(250, 25) splits of this name before
    # failing; the automaton takes one step per character, whatever the pattern.
    pattern = compile_pattern("*a" * 25 + "b")
    name = "a" * 250
    assert not pattern.matches(name)
    assert pattern.matches(name + "b")


@settings(max_examples=400, deadline=None)
@given(st.text(ALPHABET + "*?", min_size=1, max_size=10), st.text(ALPHABET, max_size=8),
       st.lists(st.text(ALPHABET, max_size=6), min_size=1, max_size=5))
def test_a_pattern_said_to_match_every_name_from_a_prefix_matches_each(pattern: str, prefix: str,
                                                                       rests: list[str]) -> None:
    # sound: a yes is never wrong (a caller grants rights on it); a cautious no is allowed
    compiled = compile_pattern(pattern)
    if compiled.matches_every_name_from(prefix):
        assert all(compiled.matches(prefix + rest) for rest in rests)


@pytest.mark.parametrize("pattern, prefix, expected", [
    ("jobs.*", "jobs.fifo/", True), ("jobs.fifo/*", "jobs.fifo/", True), ("*", "x/", True),
    ("jobs.fifo", "jobs.fifo/", False), ("jobs.fifo/g:a*", "jobs.fifo/", False), ("jobs*x", "jobs.fifo/", False),
])
def test_matches_every_name_from(pattern: str, prefix: str, expected: bool) -> None:
    assert compile_pattern(pattern).matches_every_name_from(prefix) is expected


@settings(max_examples=400, deadline=None)
@given(st.text(ALPHABET + "*?", min_size=1, max_size=8), st.text(ALPHABET, max_size=6),
       st.lists(st.text(ALPHABET, max_size=8), min_size=1, max_size=20))
def test_first_name_from_never_jumps_over_a_match(pattern: str, start: str, names: list[str]) -> None:
    # sound: a search over sorted names jumps to the bound, so no match at or after `start` lies before it
    compiled = compile_pattern(pattern)
    bound = compiled.first_name_from(start)
    for name in names + [start]:
        if name >= start and compiled.matches(name):
            assert bound is not None and start <= bound <= name, (pattern, start, bound, name)


@pytest.mark.parametrize("pattern, start, bound", [
    ("alice.*", "", "alice."),  # before the lead: jump to it
    ("alice.*", "aaron.jobs", "alice."),
    ("alice.*", "alice.jobs", "alice.jobs"),  # within: no jump
    ("alice.*", "bob.jobs", None),  # past every name that starts with the lead
    ("q.*.alice", "q.000.bob", "q.000.bob"),
    ("billing#invoices", "a", "billing#invoices"),
    ("billing#invoices", "billing#invoices", "billing#invoices"),
    ("billing#invoices", "billing#invoices.dead", None),  # a literal matches only itself
    ("*.dead", "x", "x"),
    ("a?c", "a", "a"),
])
def test_first_name_from(pattern: str, start: str, bound: str | None) -> None:
    assert compile_pattern(pattern).first_name_from(start) == bound

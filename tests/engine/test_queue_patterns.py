"""Queue-name patterns: Python `re` syntax that needs no backtracking, matched in linear time."""

from __future__ import annotations

import pytest

from kittiwake import errors
from kittiwake.app.locality import remote_queue_pattern
from kittiwake.engine.queue_patterns import MAX_PATTERN_CHARS, name_matcher


@pytest.mark.parametrize(
    "pattern, name, matches",
    [
        ("fetch", "crawl#fetch.dead", True),
        (r"^crawl#\w+$", "crawl#fetch", True),
        (r"\.dead$", "crawl#fetch", False),
        ("(?i)^CRAWL", "crawl#fetch", True),
        (r"^(?P<group>[a-z]+)#", "crawl#fetch", True),
        (r"\#\-\@", "a#-@b", True),  # re.escape's escapes of punctuation
        ("", "any", True),
        (remote_queue_pattern("jobs"), "jobs@node-1", True),
        (remote_queue_pattern("jobs"), "jobs", False),
    ],
)
def test_the_pattern_is_searched_in_the_name(pattern, name, matches):
    assert name_matcher(pattern)(name) is matches


def test_a_catastrophic_pattern_for_a_backtracking_matcher_is_linear_here():
    # with Python's re this call takes about 2^40 steps
    assert not name_matcher("(a+)+$")("x#" + "a" * 40 + "-")


@pytest.mark.parametrize(
    "pattern, words",
    [
        (r"(a)\1", "backreferences"),
        (r"(?P<n>a)(?P=n)", "backreferences"),
        ("a(?=b)", "lookaround"),
        ("(?<!x)a", "lookaround"),
        ("(?>a)", "atomic"),
        (r"a\Z", r"\z"),
        ("(", "missing )"),
        (r"\pL{1000}", "MiB"),
    ],
)
def test_patterns_that_need_backtracking_or_too_much_memory_are_refused_with_a_reason(pattern, words):
    with pytest.raises(errors.BadRequest, match="bad pattern") as caught:
        name_matcher(pattern)
    assert words in caught.value.message and len(caught.value.message) < 300


@pytest.mark.parametrize("pattern", ["a" * (MAX_PATTERN_CHARS + 1), 42, None, b"^a"])
def test_a_pattern_must_be_a_short_string(pattern):
    with pytest.raises(errors.BadRequest, match="at most 1024 characters"):
        name_matcher(pattern)


def test_a_pattern_of_the_maximum_length_is_accepted():
    assert name_matcher("a" * MAX_PATTERN_CHARS)("a" * MAX_PATTERN_CHARS)

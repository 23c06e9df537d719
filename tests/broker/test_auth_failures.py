"""Failed authentications: one line at the first, a summary per window, a budget of checks per
source and one for all sources together."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kittiwake.broker.auth_failures import AuthFailures, Limit


def test_the_first_failure_is_logged_the_rest_summarised() -> None:
    book = AuthFailures(window_secs=60, max_checks=10)
    lines = book.record("10.0.0.1", "root", "wrong token", now=0.0)
    assert len(lines) == 1 and "10.0.0.1" in lines[0] and "'root'" in lines[0]
    for n in range(1, 1000):
        assert book.record("10.0.0.1", "root", "wrong token", now=n * 0.01, refused=n >= 10) == []
    assert book.summaries(now=59.0) == []
    [summary] = book.summaries(now=60.0)
    assert summary == "999 more failed authentications from 10.0.0.1 in 60 s, 990 of them refused unchecked"
    assert len(book) == 0 and book.total == 1000


def test_a_source_is_limited_after_its_budget_until_the_window_closes() -> None:
    book = AuthFailures(window_secs=60, max_checks=3)
    for n in range(3):
        assert not book.limited("a", now=float(n))
        book.record("a", "u", "wrong token", now=float(n))
    assert book.limited("a", now=10.0) and not book.limited("b", now=10.0)
    assert not book.limited("a", now=60.0)
    lines = book.record("a", "u", "wrong token", now=61.0)  # a new window: logged again, with the old summary
    assert len(lines) == 2 and lines[0].startswith("2 more failed") and "authentication failed from a" in lines[1]


def test_memory_is_bounded_by_closing_the_oldest_window() -> None:
    book = AuthFailures(window_secs=60, max_checks=10, max_sources=100)
    for n in range(1000):
        book.record(f"10.0.{n // 256}.{n % 256}", "u", "unknown user", now=1.0)
    assert len(book) == 100


# ------------------------------------------------------- the budget of all sources


def test_past_the_budget_of_all_sources_every_source_is_limited_until_that_window_closes() -> None:
    book = AuthFailures(window_secs=60, max_checks=10, max_checks_all=5)
    for n in range(5):
        assert book.limited(f"10.0.0.{n}", now=float(n)) is None
        book.record(f"10.0.0.{n}", "root", "wrong token", now=float(n), checked=True)
    assert book.limited("10.0.0.99", now=10.0) is Limit.ALL  # never failed, refused all the same
    assert book.limited("10.0.0.99", now=59.9) is Limit.ALL
    assert book.limited("10.0.0.99", now=60.0) is None  # the window opened at the first failure, t=0
    lines = book.summaries(now=60.0)
    assert any("5 failed authentications from all addresses in 60 s" in line for line in lines), lines


def test_failures_that_cost_no_key_derivation_do_not_count_against_all_sources() -> None:
    """An unknown user or a malformed token costs a dictionary lookup: a flood of those must not
    lock everybody else out."""
    book = AuthFailures(window_secs=60, max_checks=10, max_checks_all=5)
    for n in range(1000):
        book.record(f"10.0.{n // 256}.{n % 256}", "nobody", "unknown user", now=1.0)
    assert book.limited("10.9.9.9", now=2.0) is None


def test_the_budget_of_a_source_comes_first() -> None:
    book = AuthFailures(window_secs=60, max_checks=2, max_checks_all=3)
    book.record("a", "u", "wrong token", now=0.0, checked=True)
    book.record("a", "u", "wrong token", now=0.0, checked=True)
    assert book.limited("a", now=1.0) is Limit.SOURCE and book.limited("b", now=1.0) is None
    book.record("b", "u", "wrong token", now=1.0, checked=True)
    assert book.limited("a", now=2.0) is Limit.SOURCE and book.limited("b", now=2.0) is Limit.ALL


Try = tuple[float, int, bool]  # (seconds since the previous try, source, whether the token is a known user's)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 20), st.integers(0, 40), st.booleans()), max_size=400))
def test_key_derivations_stay_within_both_budgets_whatever_the_tries(tries: list[Try]) -> None:
    """The Authenticator's rule, as a pure loop: a try that the book does not limit costs a key
    derivation (a failure, here), one it limits is refused unchecked. Fixed windows: any span of
    the window's length holds at most two windows' worth."""
    window, per_source, everyone = 60.0, 4, 10
    book = AuthFailures(window_secs=window, max_checks=per_source, max_checks_all=everyone, max_sources=64)
    now = 0.0
    checks: list[tuple[float, int]] = []
    for gap, source, known_user in tries:
        now += gap
        address = f"10.0.0.{source}"
        if not known_user:
            book.record(address, "nobody", "unknown user", now)  # free: counted per source only
        elif book.limited(address, now) is not None:
            book.record(address, "root", "over budget", now, refused=True)
        else:
            checks.append((now, source))
            book.record(address, "root", "wrong token", now, checked=True)
        assert len(book) <= 64
    for start, _ in checks:
        span = [source for at, source in checks if start <= at < start + window]
        assert len(span) <= 2 * everyone
        for source in set(span):
            assert span.count(source) <= 2 * per_source

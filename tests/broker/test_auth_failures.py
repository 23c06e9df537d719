"""Failed authentications per source: one line at the first, a summary per window, a budget of checks."""

from __future__ import annotations

from kittiwake.broker.auth_failures import AuthFailures


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

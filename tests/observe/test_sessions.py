"""Dashboard sessions (pure): ids, idle and absolute expiry, the bound, the cookie."""

from __future__ import annotations

from kittiwake.broker.users import TokenHash
from kittiwake.observe import sessions
from kittiwake.observe.sessions import IDLE_SECS, MAX_AGE_SECS, Sessions

HASH = TokenHash(2, 1, 1, b"salt", b"digest")


def test_a_session_is_found_until_idle_or_too_old() -> None:
    table = Sessions()
    one = table.open("alice", HASH, 0.0)
    assert len(one) >= 40 and table.open("alice", HASH, 0.0) != one
    assert table.find(one, IDLE_SECS - 1).user == "alice"
    assert table.find(one, 2 * IDLE_SECS - 2) is not None  # each use restarts the idle clock
    assert table.find(one, 4 * IDLE_SECS) is None
    old = table.open("bob", HASH, 0.0)
    now = 0.0
    while now <= MAX_AGE_SECS:
        now += IDLE_SECS / 2
        found = table.find(old, now)
    assert found is None  # used all along, still ended at its maximum age
    assert table.find("no-such-id", 0.0) is None


def test_the_least_recently_used_session_goes_first_and_logout_ends_one() -> None:
    table = Sessions(max_sessions=2)
    first, second = table.open("a", HASH, 0.0), table.open("b", HASH, 1.0)
    assert table.find(first, 2.0) is not None  # first is now the most recently used
    third = table.open("c", HASH, 3.0)
    assert table.find(second, 3.0) is None and table.find(first, 3.0) is not None and len(table) == 2
    table.close(third)
    assert table.find(third, 3.0) is None


def test_the_cookie_header() -> None:
    assert sessions.cookie_of(None) is None and sessions.cookie_of("") is None
    assert sessions.cookie_of("a=1; kw_session=abc; b=2") == "abc"
    assert sessions.cookie_of("kw_session=old; kw_session=new") == "new"
    assert sessions.cookie_of("kw_session=") is None
    assert sessions.set_cookie("abc").startswith("kw_session=abc; HttpOnly; SameSite=Strict; Path=/")
    assert "Max-Age=0" in sessions.clear_cookie()

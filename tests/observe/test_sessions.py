"""Dashboard sessions (pure): ids, idle and absolute expiry, the bound, the cookie."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

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


def test_a_user_logging_in_again_and_again_ends_only_its_own_sessions() -> None:
    # one user's 10,000 logins used to push every other user's session out of the table
    table = Sessions(max_sessions=100, max_per_user=3)
    alice = table.open("alice", HASH, 0.0)
    mallory = [table.open("mallory", HASH, float(at)) for at in range(1, 1000)]
    assert table.find(alice, 1000.0) is not None and len(table) == 4
    assert [table.find(one, 1000.0) is not None for one in mallory[-4:]] == [False, True, True, True]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["open", "find", "close"]), st.sampled_from("abc"), st.integers(0, 9)),
                max_size=60))
def test_the_table_keeps_its_bounds_and_its_sessions_against_a_model(steps: list[tuple[str, str, int]]) -> None:
    table = Sessions(max_sessions=5, max_per_user=2)
    opened: list[tuple[str, str]] = []  # (id, user), oldest first
    for at, (action, user, pick) in enumerate(steps):
        if action == "open":
            opened.append((table.open(user, HASH, float(at)), user))
        elif opened:
            session_id, owner = opened[pick % len(opened)]
            if action == "find":
                found = table.find(session_id, float(at))
                assert found is None or found.user == owner
            else:
                table.close(session_id)
        live = [(one, owner) for one, owner in opened if one in table._sessions]
        assert len(live) == len(table) <= 5
        assert all(sum(owner == name for _, owner in live) <= 2 for name in "abc")
        assert {name: set(ids) for name, ids in table._of_user.items()} == {
            name: {one for one, owner in live if owner == name} for name in {owner for _, owner in live}}


def test_the_cookie_header() -> None:
    assert sessions.cookie_of(None) is None and sessions.cookie_of("") is None
    assert sessions.cookie_of("a=1; kw_session=abc; b=2") == "abc"
    assert sessions.cookie_of("kw_session=old; kw_session=new") == "new"
    assert sessions.cookie_of("kw_session=") is None
    assert sessions.set_cookie("abc").startswith("kw_session=abc; HttpOnly; SameSite=Strict; Path=/")
    assert "Max-Age=0" in sessions.clear_cookie()

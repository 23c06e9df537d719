"""Dashboard sessions: who logged in on the HTTP port, behind a random cookie.

A browser cannot send a token with each request of a page (nor with an
`EventSource`), so logging in (`POST /api/session` with user and token,
checked by the broker's `Authenticator` like any connection's credentials)
makes a session: 32 random bytes, URL-safe, sent back as the `kw_session`
cookie (HttpOnly, SameSite=Strict, Path=/). The broker keeps, per session,
the user and the hash its token had at login, never the token: a session
ends when the user is removed or its token changes (`Authenticator.current`),
after `IDLE_SECS` without a request, `MAX_AGE_SECS` after login, or on logout.

Sessions live in memory: a broker restart logs everybody out. A user keeps at
most `MAX_SESSIONS_PER_USER` (a new one beyond that ends that user's least
recently used), so one user logging in again and again ends only its own
sessions; at most `MAX_SESSIONS` are kept in all, a new one beyond that ending
the least recently used of anyone's.
The cookie carries no `Secure` flag because the port is plain HTTP; behind a
TLS proxy, the proxy's own settings apply.

Pure: the clock is passed in.
"""

from __future__ import annotations

import secrets
from collections import OrderedDict
from dataclasses import dataclass

from kittiwake.broker.users import TokenHash

COOKIE = "kw_session"
IDLE_SECS = 12 * 3600.0
MAX_AGE_SECS = 7 * 24 * 3600.0
MAX_SESSIONS = 10_000
MAX_SESSIONS_PER_USER = 32
ID_BYTES = 32


@dataclass(slots=True)
class Session:
    user: str
    token_hash: TokenHash
    created_at: float
    used_at: float


class Sessions:
    """The live sessions of one broker, least recently used first."""

    def __init__(self, max_sessions: int = MAX_SESSIONS, max_per_user: int = MAX_SESSIONS_PER_USER) -> None:
        if max_sessions < 1 or max_per_user < 1:
            raise ValueError("max_sessions and max_per_user must be at least 1")
        self.max_sessions = max_sessions
        self.max_per_user = max_per_user
        self._sessions: OrderedDict[str, Session] = OrderedDict()
        self._of_user: dict[str, OrderedDict[str, None]] = {}  # user -> its session ids, least recently used first

    def __len__(self) -> int:
        return len(self._sessions)

    def open(self, user: str, token_hash: TokenHash, now: float) -> str:
        """A new session of `user`; returns its id (the cookie's value)."""
        own = self._of_user.setdefault(user, OrderedDict())
        while len(own) >= self.max_per_user:
            self.close(next(iter(own)))
        while len(self._sessions) >= self.max_sessions:
            self.close(next(iter(self._sessions)))
        session_id = secrets.token_urlsafe(ID_BYTES)
        self._sessions[session_id] = Session(user, token_hash, now, now)
        self._of_user.setdefault(user, OrderedDict())[session_id] = None
        return session_id

    def find(self, session_id: str, now: float) -> Session | None:
        """The live session with this id (its idle clock restarts), or None."""
        session = self._sessions.get(session_id)
        if session is None:
            return None
        if now - session.used_at > IDLE_SECS or now - session.created_at > MAX_AGE_SECS:
            self.close(session_id)
            return None
        session.used_at = now
        self._sessions.move_to_end(session_id)
        self._of_user[session.user].move_to_end(session_id)
        return session

    def close(self, session_id: str) -> None:
        session = self._sessions.pop(session_id, None)
        if session is None:
            return
        own = self._of_user[session.user]
        del own[session_id]
        if not own:
            del self._of_user[session.user]


def cookie_of(header: str | None) -> str | None:
    """The session id in a Cookie header, if any (the last one when repeated)."""
    if not header:
        return None
    found = None
    for part in header.split(";"):
        name, _, value = part.strip().partition("=")
        if name == COOKIE and value:
            found = value
    return found


def set_cookie(session_id: str) -> str:
    return f"{COOKIE}={session_id}; HttpOnly; SameSite=Strict; Path=/; Max-Age={int(MAX_AGE_SECS)}"


def clear_cookie() -> str:
    return f"{COOKIE}=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0"

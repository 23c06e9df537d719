"""Dashboard sessions: who logged in on the HTTP port, behind a random cookie.

A browser cannot send a token with each request of a page (nor with an
`EventSource`), so logging in (`POST /api/session` with user and token,
checked by the broker's `Authenticator` like any connection's credentials)
makes a session: 32 random bytes, URL-safe, sent back as the `kw_session`
cookie (HttpOnly, SameSite=Strict, Path=/). The broker keeps, per session,
the user and the hash its token had at login, never the token: a session
ends when the user is removed or its token changes (`Authenticator.current`),
after `IDLE_SECS` without a request, `MAX_AGE_SECS` after login, or on logout.

Sessions live in memory: a broker restart logs everybody out. At most
`MAX_SESSIONS` are kept; a new one beyond that ends the least recently used.
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
ID_BYTES = 32


@dataclass(slots=True)
class Session:
    user: str
    token_hash: TokenHash
    created_at: float
    used_at: float


class Sessions:
    """The live sessions of one broker, least recently used first."""

    def __init__(self, max_sessions: int = MAX_SESSIONS) -> None:
        if max_sessions < 1:
            raise ValueError("max_sessions must be at least 1")
        self.max_sessions = max_sessions
        self._sessions: OrderedDict[str, Session] = OrderedDict()

    def __len__(self) -> int:
        return len(self._sessions)

    def open(self, user: str, token_hash: TokenHash, now: float) -> str:
        """A new session of `user`; returns its id (the cookie's value)."""
        while len(self._sessions) >= self.max_sessions:
            self._sessions.popitem(last=False)
        session_id = secrets.token_urlsafe(ID_BYTES)
        self._sessions[session_id] = Session(user, token_hash, now, now)
        return session_id

    def find(self, session_id: str, now: float) -> Session | None:
        """The live session with this id (its idle clock restarts), or None."""
        session = self._sessions.get(session_id)
        if session is None:
            return None
        if now - session.used_at > IDLE_SECS or now - session.created_at > MAX_AGE_SECS:
            del self._sessions[session_id]
            return None
        session.used_at = now
        self._sessions.move_to_end(session_id)
        return session

    def close(self, session_id: str) -> None:
        self._sessions.pop(session_id, None)


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

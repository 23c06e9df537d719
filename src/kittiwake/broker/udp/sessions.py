"""The UDP listener's auth sessions: (producer id, source address) → principal, bounded so that no
one user and no one source address can push out the sessions of others.

A session is made by an `auth` datagram with valid credentials, so any user
may make as many as it sends: with one global least-recently-used table, a
user varying its producer id evicted every other user's session, and each
evicted producer's next request got UNAUTHORIZED. So sessions are bounded
three ways:

| bound | when a new session would pass it |
| --- | --- |
| `max_per_user` sessions of one user | that user's least recently used session goes |
| `max_per_host` sessions from one source address (any port, any user) | the oldest there goes if idle past `idle_secs`, else the authenticating user's own oldest there, else the `auth` is refused (`TOO_MANY_CONNECTIONS`) |
| `max_sessions` in all | the least recently used session of the user holding the most goes |

So a user only ever pushes out its own sessions (or, when the table is full,
those of whoever holds the most, never a user below its share), and an
address — a source is only claimed — only its own or idle ones there.
Sessions idle past `idle_secs` count until they are pushed out or looked up.

The listener's bounds (`listener.MAX_SESSIONS`, `MAX_SESSIONS_PER_USER`,
`MAX_SESSIONS_PER_HOST`, `SESSION_IDLE_SECS`): 10,000 in all, 2,500 of one
user (as many as a user's TCP connections, `--max-connections-per-user`),
256 from one address (as many as unauthenticated TCP connections from one,
`--max-unauthenticated-per-address`), idle after 600 s.

Pure: the clock is passed in.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Generic, TypeVar

DEFAULT_MAX_SESSIONS = 10_000
DEFAULT_MAX_PER_USER = 2_500
DEFAULT_MAX_PER_HOST = 256
DEFAULT_IDLE_SECS = 600.0

P = TypeVar("P")
SessionKey = tuple[int, Any]  # (producer id, source address as asyncio gives it)


class SessionsFull(Exception):
    """The source address holds `max_per_host` sessions, none idle and none of this user."""


class Sessions(Generic[P]):
    """Principals by (producer id, source address), bounded per user, per host and in all."""

    def __init__(
        self,
        max_sessions: int = DEFAULT_MAX_SESSIONS,
        max_per_user: int = DEFAULT_MAX_PER_USER,
        max_per_host: int = DEFAULT_MAX_PER_HOST,
        idle_secs: float = DEFAULT_IDLE_SECS,
    ) -> None:
        self.max_sessions = max_sessions
        self.max_per_user = max_per_user
        self.max_per_host = max_per_host
        self.idle_secs = idle_secs
        self._all: dict[SessionKey, tuple[P, str, float]] = {}  # principal, user, last used
        self._by_user: dict[str, OrderedDict[SessionKey, None]] = {}  # least recently used first
        self._by_host: dict[str, OrderedDict[SessionKey, None]] = {}
        self.evicted = 0

    def __len__(self) -> int:
        return len(self._all)

    def has(self, key: SessionKey, now: float) -> bool:
        """Whether the key has a session not idled out (nothing is touched)."""
        entry = self._all.get(key)
        return entry is not None and now - entry[2] <= self.idle_secs

    def get(self, key: SessionKey, now: float) -> P | None:
        """The session's principal, touched; None (and forgotten) when there is none or it idled out."""
        entry = self._all.get(key)
        if entry is None:
            return None
        principal, user, used = entry
        if now - used > self.idle_secs:
            self._remove(key)
            return None
        self._all[key] = (principal, user, now)
        self._by_user[user].move_to_end(key)
        self._by_host[_host(key)].move_to_end(key)
        return principal

    def add(self, key: SessionKey, principal: P, user: str, now: float) -> None:
        """A session for the key (replacing one there), within the bounds; `SessionsFull` when the
        address has no room this user may take."""
        if key in self._all:
            self._remove(key)
        host = _host(key)
        at_host = self._by_host.get(host)
        if at_host is not None and len(at_host) >= self.max_per_host:
            oldest = next(iter(at_host))
            if now - self._all[oldest][2] > self.idle_secs:
                self._evict(oldest)
            else:
                own = next((k for k in at_host if self._all[k][1] == user), None)
                if own is None:
                    raise SessionsFull(host)
                self._evict(own)
        mine = self._by_user.get(user)
        if mine is not None and len(mine) >= self.max_per_user:
            self._evict(next(iter(mine)))
        if len(self._all) >= self.max_sessions:
            heaviest = max(self._by_user.values(), key=len)
            self._evict(next(iter(heaviest)))
        self._all[key] = (principal, user, now)
        self._by_user.setdefault(user, OrderedDict())[key] = None
        self._by_host.setdefault(host, OrderedDict())[key] = None

    def users(self) -> dict[str, int]:
        """Sessions per user (for tests and logs)."""
        return {user: len(keys) for user, keys in self._by_user.items()}

    def _evict(self, key: SessionKey) -> None:
        self.evicted += 1
        self._remove(key)

    def _remove(self, key: SessionKey) -> None:
        _, user, _ = self._all.pop(key)
        for index, name in ((self._by_user, user), (self._by_host, _host(key))):
            keys = index[name]
            del keys[key]
            if not keys:
                del index[name]


def _host(key: SessionKey) -> str:
    return str(key[1][0])

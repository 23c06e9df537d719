"""Checking credentials: the broker's users, their tokens, and what a check may cost.

`Authenticator.authenticate(user, token, source, done)` calls `done` with the
user's `Principal` (`kittiwake.broker.access`) or the error to answer with —
at once when the answer is cheap, later when the token must be hashed.
`claimed=True` says the source address is only claimed (a UDP datagram's):
its failures go to a book of their own (`auth_failures`), so a forged
datagram never spends the budget of a TCP address, nor the TCP budget of all
addresses, and its checks hold at most half of the waiting places.

What each try costs, cheapest first, and why a brute force costs nothing
noticeable:

1. malformed credentials (too long, wrong characters) and unknown users are
   refused at once, with no key derivation (user names are not secret; the
   reply does not say which of the two was wrong);
2. a token already verified since the broker started is accepted from a
   cache keyed by (user, keyed SHA-256 of the token), so reconnects,
   restarts of workers and pools of connections stay cheap; the cache holds
   the stored hash it was checked against, so a changed token invalidates it;
3. a source address over its failure budget (`auth_failures`) is refused
   without a check until its window closes (`UNAUTHORIZED`); so is any
   source while the budget of all addresses is spent, with `UNAVAILABLE`
   (it is not that client's doing: clients try again later);
4. anything else runs scrypt (~50 ms) in a pool of `KDF_THREADS` threads,
   never on the event loop. At most `MAX_PENDING_CHECKS` checks wait (of
   them at most `MAX_PENDING_CLAIMED` for claimed sources), and at most
   `MAX_PENDING_PER_SOURCE` from one address; beyond that a try gets
   `UNAVAILABLE` (clients retry with backoff). Identical credentials arriving
   while their check runs wait for that check instead of starting another,
   so a hundred workers starting at once with a new token cost one check;
   a failure is counted against each waiter's own source.

Failures are logged once per source address, then summarised (see
`auth_failures`, which also says the budgets' numbers). Every comparison of hashes is constant-time
(`hmac.compare_digest`). The file is re-read when it changes (looked at
most once a second, on the next try): new users and tokens work at once;
connections already open keep the rights they had.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import os
import secrets
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

from kittiwake import errors
from kittiwake.broker.access import Principal
from kittiwake.broker.auth_failures import WINDOW_SECS, AuthFailures, Limit
from kittiwake.broker.users import (
    MAX_TOKEN_CHARS,
    MAX_USER_CHARS,
    TokenHash,
    UserFileError,
    UserRecord,
    load_users,
)

log = logging.getLogger("kittiwake.broker.auth")

KDF_THREADS = 2
MAX_PENDING_CHECKS = 16
MAX_PENDING_PER_SOURCE = 2
MAX_PENDING_CLAIMED = MAX_PENDING_CHECKS // 2  # forged UDP sources cannot keep TCP logins waiting
CACHE_ENTRIES = 10_000
RELOAD_CHECK_SECS = 1.0

Outcome = Principal | errors.KittiwakeError
Done = Callable[[Outcome], None]
CacheKey = tuple[str, bytes]
SourceKey = tuple[bool, str]  # (claimed, address): a claimed address is not the TCP client of that address

WRONG = "wrong user or token"


class Authenticator:
    """The users of one auth file and the machinery to check their tokens on one event loop."""

    def __init__(self, path: str, loop: asyncio.AbstractEventLoop, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.path = path
        self.loop = loop
        self.clock = clock
        self.failures = AuthFailures()  # sources a TCP handshake proved
        self.claimed_failures = AuthFailures(kind="UDP")  # sources a datagram only claims
        self.checks = 0  # key derivations run, for tests and logs
        self._users: dict[str, UserRecord] = {}
        self._principals: dict[str, Principal] = {}
        self._file_stamp: tuple[int, int, int] | None = None
        self._checked_file_at = clock()
        self._cache: dict[CacheKey, TokenHash] = {}
        self._cache_secret = secrets.token_bytes(32)  # the cache never holds a plain hash of a token
        self._pending: dict[CacheKey, list[tuple[Done, str, bool]]] = {}  # waiters: (done, source, claimed)
        self._pending_by_source: dict[SourceKey, int] = {}
        self._pending_claimed = 0
        self._executor: ThreadPoolExecutor | None = None
        self._summary_timer: asyncio.TimerHandle | None = None
        self._load()  # raises UserFileError: a broker with a bad auth file does not start

    @property
    def user_count(self) -> int:
        return len(self._users)

    # ---------------------------------------------------------------- file

    def _stamp(self) -> tuple[int, int, int] | None:
        # the inode too: `kittiwake auth` replaces the file whole, so a new token of the same length
        # written within the file system's clock tick is still a change
        try:
            status = os.stat(self.path)
        except OSError:
            return None
        return (status.st_ino, status.st_mtime_ns, status.st_size)

    def _load(self) -> None:
        stamp = self._stamp()
        users = load_users(self.path)
        self._users = users
        self._principals = {name: Principal(name, record.grants) for name, record in users.items()}
        self._cache.clear()
        self._file_stamp = stamp

    def _maybe_reload(self, now: float) -> None:
        if now - self._checked_file_at < RELOAD_CHECK_SECS:
            return
        self._checked_file_at = now
        stamp = self._stamp()
        if stamp == self._file_stamp:
            return
        try:
            self._load()
        except UserFileError as exc:
            self._file_stamp = stamp  # say it once per change of the file
            log.error("the auth file changed but cannot be used, keeping the users loaded before: %s", exc)
            return
        log.info("auth file %s reloaded: %d users", self.path, len(self._users))

    # --------------------------------------------------------------- check

    def sqs_credentials(self, access_key: str) -> tuple[str, Principal] | None:
        """(SQS secret, principal) of the user named by an SQS access key id, if it has a secret."""
        self._maybe_reload(self.clock())
        record = self._users.get(access_key)
        if record is None or not record.sqs_secret:
            return None
        return record.sqs_secret, self._principals[access_key]

    def current(self, user: str, token_hash: TokenHash) -> Principal | None:
        """The principal of `user` if its token is still the one hashed as `token_hash` (the file
        is re-read when it changed): sessions made from a check end when the user or token goes."""
        self._maybe_reload(self.clock())
        record = self._users.get(user)
        if record is None or record.token_hash.encode() != token_hash.encode():
            return None
        return self._principals[user]

    def principal_of(self, user: str) -> Principal | None:
        """The principal of `user` as the file stands now (re-read when it changed); None if no such user."""
        self._maybe_reload(self.clock())
        return self._principals.get(user)

    def principals(self) -> list[Principal]:
        """Every user's principal as the file stands now (re-read when it changed)."""
        self._maybe_reload(self.clock())
        return list(self._principals.values())

    def token_hash_of(self, user: str) -> TokenHash | None:
        record = self._users.get(user)
        return record.token_hash if record is not None else None

    def authenticate(self, user: object, token: object, source: str, done: Done, *, claimed: bool = False) -> None:
        """Check credentials; `done(principal or error)` runs now or later on the event loop.
        `claimed`: the source address is only claimed (UDP), its failures are booked apart."""
        now = self.clock()
        self._maybe_reload(now)
        if not (isinstance(user, str) and isinstance(token, str)) or len(user) > MAX_USER_CHARS or len(token) > MAX_TOKEN_CHARS:
            self._fail(source, claimed, str(user)[:MAX_USER_CHARS], "malformed credentials", done,
                       errors.Unauthorized(f"credentials too long or not strings (user ≤ {MAX_USER_CHARS}, "
                                           f"token ≤ {MAX_TOKEN_CHARS} characters)"))
            return
        record = self._users.get(user)
        if record is None:
            self._fail(source, claimed, user, "unknown user", done)
            return
        key = (user, hmac.digest(self._cache_secret, token.encode("utf-8", "surrogatepass"), hashlib.sha256))
        if self._cache.get(key) is record.token_hash:
            done(self._principals[user])
            return
        limit = self._book(claimed).limited(source, now)
        if limit is Limit.SOURCE:
            self._fail(source, claimed, user, "source over its failure budget", done, errors.Unauthorized(
                f"too many failed authentications from this address; try again in up to {WINDOW_SECS:.0f} s"
            ), refused=True)
            return
        if limit is Limit.ALL:
            self._fail(source, claimed, user, "all sources over their failure budget", done, errors.Unavailable(
                "too many failed authentications at this broker lately: credentials it has not verified before "
                f"are refused unchecked for up to {WINDOW_SECS:.0f} s; try again later"
            ), refused=True)
            return
        waiting = self._pending.get(key)
        if waiting is not None:
            waiting.append((done, source, claimed))  # the same credentials are being checked: share that check
            return
        source_key = (claimed, source)
        if (
            len(self._pending) >= MAX_PENDING_CHECKS
            or (claimed and self._pending_claimed >= MAX_PENDING_CLAIMED)
            or self._pending_by_source.get(source_key, 0) >= MAX_PENDING_PER_SOURCE
        ):
            done(errors.Unavailable("the broker is busy checking other credentials; try again"))
            return
        self._pending[key] = [(done, source, claimed)]
        self._pending_by_source[source_key] = self._pending_by_source.get(source_key, 0) + 1
        self._pending_claimed += claimed
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=KDF_THREADS, thread_name_prefix="kittiwake-auth")
        self.checks += 1
        check = self.loop.run_in_executor(self._executor, record.token_hash.verify, token)
        check.add_done_callback(lambda future: self._checked(key, record, source_key, future))

    def _book(self, claimed: bool) -> AuthFailures:
        return self.claimed_failures if claimed else self.failures

    def _checked(self, key: CacheKey, record: UserRecord, source_key: SourceKey, future: asyncio.Future[bool]) -> None:
        waiting = self._pending.pop(key, [])
        left = self._pending_by_source.get(source_key, 1) - 1
        if left > 0:
            self._pending_by_source[source_key] = left
        else:
            self._pending_by_source.pop(source_key, None)
        self._pending_claimed -= source_key[0]
        try:
            ok = future.result()
        except Exception:
            log.exception("checking a token of user %r failed", record.name)
            ok = False
        current = self._users.get(record.name)
        if ok and current is not None and current.token_hash is record.token_hash:
            if len(self._cache) >= CACHE_ENTRIES:
                self._cache.pop(next(iter(self._cache)))  # the oldest: a bound, not an LRU
            self._cache[key] = record.token_hash
            principal = self._principals[record.name]
            for done, _, _ in waiting:
                done(principal)
            return
        for index, (done, source, claimed) in enumerate(waiting):
            # each waiter against its own source (a claimed one never books against the address it
            # names); the key derivation ran once, for the first
            self._fail(source, claimed, record.name, "wrong token", done, checked=index == 0)

    def _fail(self, source: str, claimed: bool, user: str, reason: str, done: Done,
              error: errors.KittiwakeError | None = None, *, refused: bool = False, checked: bool = False) -> None:
        book = self._book(claimed)
        for line in book.record(source, user, reason, self.clock(), refused=refused, checked=checked):
            log.warning("%s", line)
        if self._summary_timer is None:
            self._summary_timer = self.loop.call_later(WINDOW_SECS, self._summarise)
        done(error or errors.Unauthorized(WRONG))

    def _summarise(self) -> None:
        self._summary_timer = None
        now = self.clock()
        for book in (self.failures, self.claimed_failures):
            for line in book.summaries(now):
                log.warning("%s", line)
        if self.failures.open or self.claimed_failures.open:
            self._summary_timer = self.loop.call_later(WINDOW_SECS / 4, self._summarise)

    def close(self) -> None:
        if self._summary_timer is not None:
            self._summary_timer.cancel()
            self._summary_timer = None
        for book in (self.failures, self.claimed_failures):
            for line in book.summaries(float("inf")):
                log.warning("%s", line)
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None

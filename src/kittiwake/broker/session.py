"""One connection's authentication and authorisation, between decoding a request and running it.

Only a broker with an auth file gives its connections a `Session`; without
one, requests go straight to the group commit as before.

Theory of operation. The connection hands every decoded item (a request, or
the error reply of one that did not decode) to `screen`, which returns what
to submit, or None when the session kept it or closed the connection:

| state | item | what happens | next state |
| --- | --- | --- | --- |
| AWAITING | `auth` | the credentials go to the `Authenticator`; reading pauses | CHECKING |
| AWAITING | anything else (garbage included) | one `UNAUTHORIZED` error frame (id 0), then close | CLOSED |
| CHECKING | anything | held, in order, until the check ends | CHECKING |
| CHECKING → | check passed, the user over its connection cap | `TOO_MANY_CONNECTIONS` with the auth's id, then close | CLOSED |
| CHECKING → | check passed | `{"user"}` reply to the `auth`, held items screened as OPEN, reading resumes | OPEN |
| CHECKING → | check failed | `UNAUTHORIZED` (or `UNAVAILABLE`: busy, try again) with the auth's id, then close | CLOSED |
| OPEN | `auth` | `BAD_REQUEST` (already authenticated); the connection stays | OPEN |
| OPEN | a request | authorised (`access.authorise`): run, or a `FORBIDDEN` reply in its place | OPEN |
| OPEN | a decode error | passed on as it is | OPEN |

The `auth` reply is written straight to the socket: nothing else of the
connection has been submitted yet, so it cannot overtake another reply. A
connection that has not authenticated within `deadline_secs` of connecting
(`--auth-timeout-secs`, 10 s) is closed with `UNAUTHORIZED`:
unauthenticated connections hold slots of `--max-connections`, so they must
not linger.
"""

from __future__ import annotations

import asyncio
import enum
from typing import Protocol

from kittiwake import errors
from kittiwake.broker import access
from kittiwake.broker.access import Principal
from kittiwake.broker.auth import Authenticator
from kittiwake.protocol import encode_error, encode_frame, encode_ok
from kittiwake.protocol import messages as m
from kittiwake.protocol.replies import AuthResult

Item = m.Request | bytes


class SessionState(enum.Enum):
    """Where a connection stands with respect to its credentials."""

    AWAITING = "awaiting"  # connected; only `auth` is accepted
    CHECKING = "checking"  # credentials under check: reading paused, later items held
    OPEN = "open"  # authenticated: every request is authorised before it runs
    CLOSED = "closed"  # refused: the connection is closing


class SessionConnection(Protocol):
    """What a session needs of its connection."""

    closed: bool

    @property
    def source(self) -> str: ...

    def accept(self, item: Item) -> None:
        """Submit an item as if it had just been decoded."""

    def send_now(self, frame: bytes) -> None:
        """Write a frame to the socket at once."""

    def hold_reading(self, hold: bool) -> None:
        """Stop (True) or restart (False) reading from the socket."""

    def admit_user(self, user: str) -> str | None:
        """Count the connection as `user`'s: None, else why the user may hold no more connections."""

    def fail(self, error: errors.KittiwakeError, request_id: int = 0) -> None:
        """Send one error frame and close."""


class Session:
    """The credentials state of one connection."""

    __slots__ = ("authenticator", "connection", "state", "principal", "_held", "_deadline")

    def __init__(self, authenticator: Authenticator, connection: SessionConnection, deadline_secs: float) -> None:
        self.authenticator = authenticator
        self.connection = connection
        self.state = SessionState.AWAITING
        self.principal: Principal | None = None
        self._held: list[Item] = []
        self._deadline: asyncio.TimerHandle | None = authenticator.loop.call_later(
            deadline_secs, self._too_late, deadline_secs
        )

    @property
    def user(self) -> str | None:
        return self.principal.user if self.principal is not None else None

    def screen(self, item: Item) -> Item | None:
        """What to submit for a decoded item, or None (kept, or the connection is closing)."""
        state = self.state
        if state is SessionState.OPEN:
            return self._authorise(item)
        if state is SessionState.CHECKING:
            self._held.append(item)
            return None
        if state is SessionState.AWAITING and type(item) is m.Auth:
            self.state = SessionState.CHECKING
            self.connection.hold_reading(True)
            request_id = item.id
            self.authenticator.authenticate(
                item.user, item.token, self.connection.source, lambda outcome: self._checked(request_id, outcome)
            )
            return None
        if state is SessionState.AWAITING:
            self._refuse(errors.Unauthorized(
                "this broker needs credentials (kw://USER:TOKEN@HOST:PORT): the first request must be auth"
            ), 0)
        return None

    def _authorise(self, item: Item) -> Item:
        if isinstance(item, bytes):
            return item
        if type(item) is m.Auth:
            return _error_frame(item.id, errors.BadRequest(f"this connection is already authenticated as {self.user!r}"))
        assert self.principal is not None
        try:
            return access.authorise(self.principal, item)
        except errors.Forbidden as exc:
            return _error_frame(item.id, exc)

    def _checked(self, request_id: int, outcome: Principal | errors.KittiwakeError) -> None:
        connection = self.connection
        if self.state is not SessionState.CHECKING or connection.closed:
            self._held.clear()
            return
        if isinstance(outcome, errors.KittiwakeError):
            self._refuse(outcome, request_id)
            return
        refusal = connection.admit_user(outcome.user)
        if refusal is not None:
            self._refuse(errors.TooManyConnections(f"the broker is at its connection limit: {refusal}"), request_id)
            return
        self.principal = outcome
        self.state = SessionState.OPEN
        self._cancel_deadline()
        connection.send_now(encode_frame(encode_ok(request_id, AuthResult(outcome.user))))
        held, self._held = self._held, []
        for item in held:
            connection.accept(self._authorise(item))
        connection.hold_reading(False)

    def _refuse(self, error: errors.KittiwakeError, request_id: int) -> None:
        self.state = SessionState.CLOSED
        self._held.clear()
        self._cancel_deadline()
        self.connection.fail(error, request_id)

    def _too_late(self, deadline_secs: float) -> None:
        self._deadline = None
        if self.state in (SessionState.AWAITING, SessionState.CHECKING) and not self.connection.closed:
            self._refuse(errors.Unauthorized(f"no credentials within {deadline_secs:g} s of connecting"), 0)

    def _cancel_deadline(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def close(self) -> None:
        """The connection is gone."""
        self._cancel_deadline()
        self._held.clear()
        if self.state is not SessionState.OPEN:
            self.state = SessionState.CLOSED


def _error_frame(request_id: int, error: errors.KittiwakeError) -> bytes:
    return encode_frame(encode_error(request_id, error))

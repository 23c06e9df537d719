"""What a client does on a new connection before its first request: TLS, then credentials.

Shared by both connection classes, so they cannot disagree. Sans-IO except
for reading the CA file when a TLS context is made:

* `tls_context(address)`: for `kws://`, a client `ssl.SSLContext` (TLS 1.2
  at least, the broker's certificate verified against the address's CA file
  or the system's CAs, the host name checked); None for `kw://`. Contexts are
  cached per CA file: loading one costs milliseconds, reconnects should not.
* `auth_frame(address)`: the framed `auth` request (id `AUTH_REQUEST_ID`)
  for an address with credentials; None without.
* `auth_outcome(reply)`: nothing when the broker accepted the credentials;
  otherwise the error to raise. `UNAUTHORIZED` is final (a wrong token stays
  wrong: no retry); `UNAVAILABLE` (the broker was busy checking other
  credentials) and `TOO_MANY_CONNECTIONS` (a cap: the broker's, the
  address's or the user's) are retried like a connection that failed to
  open, within the connect budget, so a fleet reconnecting at once spreads
  itself out instead of failing.

Every reconnect runs this again, so a connection that the broker dropped
comes back authenticated or not at all.
"""

from __future__ import annotations

import ssl
import threading
from typing import Any

from kittiwake import errors
from kittiwake.client import calls
from kittiwake.client.url import BrokerAddress
from kittiwake.client.wire import ReplyEnvelope, encode_call, error_of

AUTH_REQUEST_ID = 0  # the first request on its connection; an id-0 error before its reply is about it too


class HandshakeRetry(ConnectionError):
    """The broker could not take the credentials now (busy, or the connection broke): try a new connection.
    `error`: what the broker answered, when it answered."""

    def __init__(self, message: str, error: errors.KittiwakeError | None = None) -> None:
        super().__init__(message)
        self.error = error


def connect_failure(address: BrokerAddress, attempts: int, secs: float, failure: BaseException | None
                    ) -> errors.KittiwakeError:
    """What a connect budget spent without a connection raises: TOO_MANY_CONNECTIONS when the broker
    kept answering that a cap was reached (it is there, and full), else BROKER_UNREACHABLE."""
    if isinstance(failure, HandshakeRetry) and isinstance(failure.error, errors.TooManyConnections):
        return errors.TooManyConnections(
            f"{address} refused the connection at a cap, {attempts} attempts in {secs:.1f}s: {failure.error.message}")
    return errors.BrokerUnreachable(f"no broker at {address} after {attempts} attempts in {secs:.1f}s: {failure}")


_contexts: dict[str | None, ssl.SSLContext] = {}
_contexts_lock = threading.Lock()


def tls_context(address: BrokerAddress) -> ssl.SSLContext | None:
    """The client TLS context for `address`, or None for plaintext."""
    if not address.tls:
        return None
    with _contexts_lock:
        context = _contexts.get(address.ca_file)
        if context is None:
            try:
                context = ssl.create_default_context(cafile=address.ca_file)
            except (OSError, ssl.SSLError) as exc:
                raise errors.BadRequest(f"cannot load the CA file {address.ca_file!r}: {exc}") from None
            context.minimum_version = ssl.TLSVersion.TLSv1_2
            _contexts[address.ca_file] = context
        return context


def tls_failure(address: BrokerAddress, exc: ssl.SSLError) -> errors.KittiwakeError:
    """A TLS handshake that failed for a reason retrying cannot fix (a bad certificate, not TLS at all)."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        return errors.BrokerUnreachable(
            f"TLS handshake with {address} failed: certificate verify failed: {exc.verify_message} "
            f"(the CA: {address.ca_file or 'the system store'}; ?ca=PATH or $KITTIWAKE_CA names another)"
        )
    hint = ""
    if "WRONG_VERSION_NUMBER" in str(exc) or "wrong version number" in str(exc):
        hint = " (is this the broker's plaintext port? kws:// needs its TLS port)"
    return errors.BrokerUnreachable(f"TLS handshake with {address} failed: {exc.reason or exc}{hint}")


def auth_frame(address: BrokerAddress) -> bytes | None:
    if address.user is None or address.token is None:
        return None
    return encode_call(calls.auth(address.user, address.token), AUTH_REQUEST_ID)


def auth_outcome(address: BrokerAddress, reply: ReplyEnvelope[Any]) -> None:
    """Raise what a refused `auth` means; return when it was accepted."""
    if reply.ok:
        return
    error = error_of(reply)
    if isinstance(error, (errors.Unavailable, errors.TooManyConnections)):
        raise HandshakeRetry(f"{address}: {error.code}: {error.message}", error)
    if isinstance(error, errors.Unauthorized):
        raise errors.Unauthorized(f"{address} refused the credentials of user {address.user!r}: {error.message}")
    raise error

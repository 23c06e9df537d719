"""The broker's UDP listener (`--udp-port`, `kwu://`): datagrams in, the same passes, datagrams back.

CMQ (001) sends batched messages over UDP. Here a datagram
(`protocol.datagrams`) carries one request of the ordinary protocol; the
listener decodes it exactly as a TCP connection does and hands it to the same
group commit (`group_commit`), so it runs through the same dispatch, the same
access rules and the same commit, and its reply is sent only after the pass
that ran it is durable. What UDP adds:

* every request is its own caller (`UdpRequest`): a pass groups replies by
  caller, and this one has a single reply, sent to the address the request
  came from;
* writes go through the retransmit window (`retransmit_window`), keyed by
  the sender — (user, source address and port, producer id); the user is
  None without an auth file — and the request id: a retransmitted request
  still in flight is dropped, one already answered gets the same reply again
  without running a second time. Reads (`dispatch.READ_ONLY_REQUESTS`) run
  again: they change nothing. Another user, or another address, that sends a
  producer id it learnt is another sender: it can neither read a reply cached
  for the first nor make one of its request ids "already answered". With an
  auth file, a write from a producer whose session is gone (pushed out, idle)
  is first looked up by its place — source address and port, producer id —
  and request id (`RetransmitWindow.lookup_at`): a retransmission already
  answered gets its cached reply, within the bound below and only to that
  address, the one it was cached for; one still running is dropped. Else it
  would be refused UNAUTHORIZED, and the client, authenticating again, would
  send it once more under a new id: it would run twice. A forger of that
  address gets nothing back; the reply goes where it went before;
* no reply is more than three times the datagram it answers
  (`datagrams.reply_limit_bytes`, QUIC's bound for an unverified address),
  whoever sent it: a reply over it becomes a short error — FRAME_TOO_LARGE,
  "use kw:// (TCP), ask for less, or pad the request" — with its message cut
  to fit, and is not sent when not even the error's code fits. A write that
  ran keeps its place in the window and its error says it was applied. The
  kwu:// client pads leases and reads to `PADDED_REQUEST_BYTES`, enough for
  a full datagram back, and enqueues to a third of an upper bound of their
  reply;
* a lease is answered with as many tasks as fit in its reply: the listener
  sets `max_reply_bytes` on it (a datagram's body, or less when the request
  was small), and the engine stops before the task that would not fit in
  what is left, and passes over a task that alone would not fit — not
  leased, no attempt counted, still available to a lease over TCP — saying
  how many it passed over in the reply's `too_large`;
* with an auth file, a producer authenticates once with an `auth` datagram;
  the principal is kept per (producer id, source address) — at most
  `MAX_SESSIONS` in all, `MAX_SESSIONS_PER_USER` of one user and
  `MAX_SESSIONS_PER_HOST` from one source address (`sessions`: a user over
  its cap loses its own oldest session, an address over its cap its idle or
  the same user's, else the `auth` gets TOO_MANY_CONNECTIONS; so no user,
  however many producer ids it makes up, pushes out the sessions of others),
  idle ones forgotten after `SESSION_IDLE_SECS` — and every later request is
  authorised with `access.authorise` as on TCP. A request from a producer
  with no session (and no reply in the window, above) is answered
  UNAUTHORIZED; the client then authenticates again (after a broker restart,
  say) and sends again what cannot have run (see `client.udp_channel`). Failed
  `auth` datagrams count in the authenticator's book of claimed sources
  (`auth_failures`): they spend no TCP address's budget.

* a long-poll (a lease with `wait_secs`) waits in the broker for a UDP
  sender as for a TCP one, but a datagram costs nothing to send and holds no
  connection, so their number is bounded here: at most `MAX_WAITS` at once
  in all and `MAX_WAITS_PER_HOST` per source address; beyond, a lease is
  served at once (`wait_secs` 0: the tasks available now, or none), and the
  client polls again.

Bad input (docs: bad input): bytes without the header, or of another
version, are dropped unanswered; a datagram over `MAX_DATAGRAM_BYTES` gets
FRAME_TOO_LARGE, a body that does not decode gets the decoder's error reply,
with the request id when it was readable (each within the bound above). An
unknown producer id is just a new producer. A request can reach another
sender's window entries only by forging that sender's address and port as
well as its producer id (and, with an auth file, only while that sender has
a session); its reply then goes to that address, not to the forger, and it
cannot make a request run twice. Nothing a datagram holds survives beyond
its own handling except window entries, sessions and long-polls, all bounded.

Exposure: UDP has no handshake, so the source address of a datagram is only
claimed, and so is an `auth` datagram's: a session proves the credentials,
not the address. Anyone who can reach the port can make the broker send to a
forged address at most three times what they send it — an error of a few
dozen bytes, or, without an auth file (or with stolen credentials), a full
reply to a request padded to a third of its size. Without an auth file,
anyone who reaches the port may do anything a client may; so the UDP port
listens on `--host` like the TCP port (loopback by default), and belongs on
a trusted network.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from typing import TYPE_CHECKING, Any

import msgspec

from kittiwake import errors
from kittiwake.broker import access, dispatch
from kittiwake.broker.access import Principal
from kittiwake.broker.auth import Authenticator
from kittiwake.broker.connection import format_peer
from kittiwake.broker.pass_replies import OUTCOME_UNKNOWN
from kittiwake.broker.udp.retransmit_window import Key, RetransmitWindow, Seen
from kittiwake.broker.udp.sessions import Sessions, SessionsFull
from kittiwake.protocol import RequestError, decode_request, encode_ok
from kittiwake.protocol import messages as m
from kittiwake.protocol.datagrams import (
    HEADER_BYTES,
    MAX_DATAGRAM_BYTES,
    PADDED_REQUEST_BYTES,
    NotADatagram,
    decode_datagram,
    encode_datagram,
    error_datagram,
    reply_limit_bytes,
)
from kittiwake.protocol.frames import HEADER_BYTES as FRAME_HEADER_BYTES
from kittiwake.protocol.replies import AuthResult, decode_envelope, error_of

if TYPE_CHECKING:
    from kittiwake.broker.faces import Host

log = logging.getLogger("kittiwake.broker")

MAX_SESSIONS = 10_000
MAX_SESSIONS_PER_USER = 2_500  # so that no one user can push out the sessions of others
MAX_SESSIONS_PER_HOST = 256  # of any users, from one source address
SESSION_IDLE_SECS = 600.0
MAX_WAITS = 1_000  # long-polls parked for UDP senders at once
MAX_WAITS_PER_HOST = 8  # of them, from one source address
RECEIVE_BUFFER_BYTES = 4 * 1024 * 1024  # a burst of datagrams waits here while a commit runs

Address = Any  # what asyncio gives as a datagram's source: (host, port[, flow, scope])


class UdpRequest:
    """One request that came in a datagram: the `Caller` of a pass, answered by one datagram."""

    __slots__ = ("listener", "address", "peer", "producer_id", "key", "request_bytes", "waiting")

    closed = False  # a datagram can always be sent
    ended = False
    write_paused = False
    deferred: tuple[()] = ()

    def __init__(
        self, listener: UdpListener, address: Address, producer_id: int, key: Key | None, request_bytes: int
    ) -> None:
        self.listener = listener
        self.address = address
        self.peer = format_peer(address)
        self.producer_id = producer_id
        self.key = key  # in the retransmit window; None for reads, which are not remembered
        self.request_bytes = request_bytes  # the datagram's size, padding included: what bounds the reply
        self.waiting = False  # a long-poll counted in the listener's bound until its reply

    def deliver(self, frames: list[bytes]) -> None:
        if self.waiting:
            self.waiting = False
            self.listener.wait_ended(self.address)
        for frame in frames:
            self.listener.reply(self, frame[FRAME_HEADER_BYTES:])

    def defer(self, item: object) -> None:  # never asked: `write_paused` is always False
        raise AssertionError("a UDP request is never deferred")


class UdpListener(asyncio.DatagramProtocol):
    """The UDP port of one broker."""

    def __init__(
        self, host: Host, authenticator: Authenticator | None, window: RetransmitWindow | None = None
    ) -> None:
        self.host = host
        self.authenticator = authenticator  # None: no auth file, every producer is let in
        self.window = window if window is not None else RetransmitWindow()
        self.transport: asyncio.DatagramTransport | None = None
        self.sessions: Sessions[Principal] = Sessions(
            MAX_SESSIONS, MAX_SESSIONS_PER_USER, MAX_SESSIONS_PER_HOST, SESSION_IDLE_SECS
        )
        self.waits: dict[str, int] = {}  # source host -> its long-polls parked now
        self.waits_total = 0
        self.stopping = False
        # counts, for tests and logs
        self.received = 0
        self.dropped = 0  # not ours: no header, another version
        self.refused = 0  # answered with an error before running
        self.resent = 0  # answered from the window
        self.duplicates_dropped = 0  # copies of a request in flight
        self.withheld = 0  # replies not sent: not even an error fitted three times the request

    # ------------------------------------------------------------- asyncio

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RECEIVE_BUFFER_BYTES)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, RECEIVE_BUFFER_BYTES)
            except OSError:
                pass  # the kernel's cap applies; a smaller buffer only drops more under bursts

    def error_received(self, exc: Exception) -> None:
        # ICMP port unreachable of a client that went away, and the like: nothing to do
        log.debug("UDP error: %r", exc)

    def datagram_received(self, data: bytes, address: Address) -> None:
        try:
            self._received(data, address)
        except Exception:  # one datagram must never take the listener down
            log.exception("UDP datagram of %d bytes from %s could not be handled", len(data), address)

    def _received(self, data: bytes, address: Address) -> None:
        self.received += 1
        if self.stopping:
            return
        try:
            datagram = decode_datagram(data)
        except NotADatagram:
            self.dropped += 1
            return
        producer_id = datagram.producer_id
        size = len(data)
        try:
            request = decode_request(datagram.body)
        except RequestError as exc:
            self._refuse(address, producer_id, exc.request_id, exc.error, size)
            return
        if size > MAX_DATAGRAM_BYTES:
            self._refuse(address, producer_id, request.id, errors.FrameTooLarge(
                f"datagram of {size} bytes is over the UDP limit of {MAX_DATAGRAM_BYTES}; send fewer tasks"
            ), size)
            return
        user: str | None = None
        if self.authenticator is not None:
            screened = self._screen(request, address, producer_id, size)
            if screened is None:
                return
            request, user = screened
        if type(request) is m.Lease:
            request = _fit_lease(request, size)
        if type(request) in dispatch.READ_ONLY_REQUESTS:
            self.host.submit(UdpRequest(self, address, producer_id, None, size), request)
            return
        key = ((user, address, producer_id), request.id)  # one sender's request, never another's
        seen = self.window.lookup(key, time.monotonic())
        if seen is Seen.NEW:
            self.window.begin(key, (address, producer_id))
            caller = UdpRequest(self, address, producer_id, key, size)
            if type(request) is m.Lease and request.wait_secs > 0:
                request = self._bound_wait(caller, request)
            self.host.submit(caller, request)
        elif seen is Seen.TOO_LATE:
            self._refuse(address, producer_id, request.id, errors.Unavailable(
                f"this retransmission is older than the broker's retransmit window; {OUTCOME_UNKNOWN}"
            ), size)
        else:
            self._answer_copy(seen, address, producer_id, request.id, size)

    def _answer_copy(self, seen: Seen | bytes, address: Address, producer_id: int, request_id: int, size: int) -> None:
        """A copy of a request the window knows: dropped while it runs, else its reply again."""
        if seen is Seen.IN_FLIGHT:
            self.duplicates_dropped += 1
        elif not isinstance(seen, bytes):
            raise AssertionError(seen)
        elif len(seen) > reply_limit_bytes(size):
            # a copy smaller than the request that was answered (a client retransmits the same
            # bytes): only what this datagram's size allows
            self._refuse(address, producer_id, request_id, errors.FrameTooLarge(
                f"retransmit the request as it was first sent: its reply of {len(seen)} bytes is over "
                f"three times this copy's {size}"
            ), size)
        else:
            self.resent += 1
            self._send(seen, address)

    # ---------------------------------------------------------------- auth

    def _screen(
        self, request: m.Request, address: Address, producer_id: int, size: int
    ) -> tuple[m.Request, str] | None:
        """The request to run for the producer's principal and that principal's user, or None when
        it was answered here."""
        key = (producer_id, address)
        if type(request) is m.Auth:
            self._authenticate(request, address, producer_id, size)
            return None
        now = time.monotonic()
        principal = self.sessions.get(key, now)
        if principal is None:
            if type(request) not in dispatch.READ_ONLY_REQUESTS:
                # the producer's session is gone (evicted, idled out): a retransmission of a write
                # it sent with one still gets its cached reply — sent, within the bound below, only
                # to the address it was cached for, which is this one — or, still running, dropped
                seen = self.window.lookup_at((address, producer_id), request.id, now)
                if seen is not Seen.NEW and seen is not Seen.TOO_LATE:
                    self._answer_copy(seen, address, producer_id, request.id, size)
                    return None
            self._refuse(address, producer_id, request.id, errors.Unauthorized(
                "this broker needs credentials (kwu://USER:TOKEN@HOST:PORT): send auth first"
            ), size)
            return None
        try:
            return access.authorise(principal, request), principal.user
        except errors.Forbidden as exc:
            self._refuse(address, producer_id, request.id, exc, size)
            return None

    def _authenticate(self, request: m.Auth, address: Address, producer_id: int, size: int) -> None:
        authenticator = self.authenticator
        assert authenticator is not None

        def checked(outcome: Principal | errors.KittiwakeError) -> None:
            if isinstance(outcome, errors.KittiwakeError):
                self._refuse(address, producer_id, request.id, outcome, size)
                return
            try:
                self.sessions.add((producer_id, address), outcome, outcome.user, time.monotonic())
            except SessionsFull:
                self._refuse(address, producer_id, request.id, errors.TooManyConnections(
                    f"{MAX_SESSIONS_PER_HOST} producers from this address hold UDP sessions already; "
                    "retry later or use kw:// (TCP)"
                ), size)
                return
            reply = encode_datagram(producer_id, encode_ok(request.id, AuthResult(outcome.user)))
            self._send_within(reply, address, producer_id, request.id, size)

        # the address is only claimed: its failures must not spend the budget of a TCP client there
        authenticator.authenticate(request.user, request.token, str(address[0]), checked, claimed=True)

    # -------------------------------------------------------------- replies

    def _bound_wait(self, caller: UdpRequest, request: m.Lease) -> m.Lease:
        """The long-poll as it may wait: counted against `MAX_WAITS` and `MAX_WAITS_PER_HOST`, or,
        beyond either, served at once (module docstring)."""
        host = _host_of(caller.address)
        held = self.waits.get(host, 0)
        if self.waits_total >= MAX_WAITS or held >= MAX_WAITS_PER_HOST:
            return msgspec.structs.replace(request, wait_secs=0.0)
        self.waits[host] = held + 1
        self.waits_total += 1
        caller.waiting = True
        return request

    def wait_ended(self, address: Address) -> None:
        """A long-poll `_bound_wait` counted was answered."""
        host = _host_of(address)
        held = self.waits.get(host, 0) - 1
        if held > 0:
            self.waits[host] = held
        else:
            self.waits.pop(host, None)
        self.waits_total -= 1

    def reply(self, request: UdpRequest, body: bytes) -> None:
        """The reply of a pass to one request, within its bound: into the window, then out."""
        datagram: bytes | None = encode_datagram(request.producer_id, body)
        limit = reply_limit_bytes(request.request_bytes)
        if len(body) + HEADER_BYTES > limit:
            datagram = _over_limit(request, body, len(body) + HEADER_BYTES, limit)
            if datagram is None:
                self.withheld += 1
        if request.key is not None:
            # a write ran: its retransmissions get the same answer, or, when none could be
            # sent, the same silence (an empty entry) rather than a second run
            self.window.finish(request.key, datagram or b"", time.monotonic())
        if datagram is not None:
            self._send(datagram, request.address)

    def _refuse(
        self, address: Address, producer_id: int, request_id: int, error: errors.KittiwakeError, request_bytes: int
    ) -> None:
        """Answer with an error, cut to fit the bound of a request of `request_bytes`."""
        self.refused += 1
        datagram = error_datagram(producer_id, request_id, error, reply_limit_bytes(request_bytes))
        if datagram is None:
            self.withheld += 1
            return
        self._send(datagram, address)

    def _send_within(
        self, datagram: bytes, address: Address, producer_id: int, request_id: int, request_bytes: int
    ) -> None:
        """Send an ok reply made here, or FRAME_TOO_LARGE in its place when it is over the bound."""
        if len(datagram) <= reply_limit_bytes(request_bytes):
            self._send(datagram, address)
            return
        self._refuse(address, producer_id, request_id, errors.FrameTooLarge(
            f"pad the request to {PADDED_REQUEST_BYTES} bytes: the reply is over three times its size"
        ), request_bytes)

    def _send(self, datagram: bytes, address: Address) -> None:
        transport = self.transport
        if datagram and transport is not None and not transport.is_closing():
            transport.sendto(datagram, address)

    def close(self) -> None:
        self.stopping = True
        if self.transport is not None:
            self.transport.close()


def _over_limit(request: UdpRequest, body: bytes, reply_bytes: int, limit: int) -> bytes | None:
    """What goes out in place of a reply over its bound: an error reply keeps its code with its
    message cut short; an ok one becomes FRAME_TOO_LARGE, saying so first for a write that ran."""
    try:
        envelope = decode_envelope(body)
    except msgspec.DecodeError:  # never: the pass encoded it
        return None
    if not envelope.ok:
        return error_datagram(request.producer_id, envelope.id, error_of(envelope), limit)
    over = (
        f"the reply of {reply_bytes} bytes is over the {limit} a {request.request_bytes}-byte request may get "
        "(three times its size, one datagram at most)"
    )
    if request.key is not None:  # the most important words first: the message may be cut short
        message = f"applied; {over}: pad requests to {PADDED_REQUEST_BYTES} bytes, send fewer items or use kw:// (TCP)"
    else:
        message = f"use kw:// (TCP), ask for less, or pad the request to {PADDED_REQUEST_BYTES} bytes: {over}"
    return error_datagram(request.producer_id, envelope.id, errors.FrameTooLarge(message), limit)


def _host_of(address: Address) -> str:
    return str(address[0])


def _fit_lease(request: m.Lease, request_bytes: int) -> m.Lease:
    """The lease with its reply bounded to what a datagram of `request_bytes` may get back."""
    room = reply_limit_bytes(request_bytes) - HEADER_BYTES
    if request.max_reply_bytes is not None and request.max_reply_bytes <= room:
        return request
    return msgspec.structs.replace(request, max_reply_bytes=room)

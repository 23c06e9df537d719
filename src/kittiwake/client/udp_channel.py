"""The blocking client's UDP transport (`kwu://`): datagrams with request ids, retransmitted until answered.

CMQ (001) carries small batches over UDP and retransmits what is not
acknowledged, so that loss costs one round trip of one batch rather than a
stalled stream. `Client("kwu://host:port")` uses this channel in place of its
pool of TCP connections; every method that fits in a datagram works the same.

Theory of operation. The channel has one UDP socket, connected to the broker
(datagrams from anywhere else are discarded by the kernel), a random 64-bit
producer id, and numbers its requests 1, 2, 3, … A call sends its datagram
and waits for the reply with its id; with none within the retransmission
timeout it sends the same datagram again (same id) and doubles the timeout,
until the call's deadline (the call's timeout, else the client's, else
`DEFAULT_DEADLINE_SECS`), then raises `RequestTimeout` (outcome unknown). The
timeout adapts to the round trips measured on requests answered at the first
try (RFC 6298's estimator, within `MIN_RTO_SECS`..`MAX_RTO_SECS`). A
long-poll (`wait_secs`) is sent again every `LONG_POLL_RESEND_SECS` while
the broker may hold it: the broker drops a copy while the poll waits and
answers one after from its window, so a lost reply costs seconds, well
inside the window's 30 s, not the wait (after which the cached reply may be
gone and the leased tasks wait out their lease). A
background thread reads replies and hands each to the call waiting on its id;
a reply for an id nobody waits on (late, or a duplicate) is dropped.

Retransmissions are safe: the broker keeps the reply of every write by
sender (the user, this socket's address and port, the producer id) and
request id for a while (`broker.udp.retransmit_window`) and answers a copy from
there, so a lost reply never enqueues a task twice. A retransmission is the
same datagram, byte for byte, so its reply fits the same bound. A broker
restart forgets that window, and so does a change of this socket's address
(a NAT rebinding): see its docstring for what a retransmission then does.

Sizes: a request must fit in one datagram (`protocol.datagrams`), and so
must its reply, which the broker bounds to three times the request's size
(its defence against reflection). So the channel pads every request but an
enqueue to `PADDED_REQUEST_BYTES` (467), enough for a full datagram back,
and an enqueue to a third of an upper bound of its reply (each outcome names
its queue and pid, the broker's 17-digit FIFO pid when the task had none).
An `enqueue_many` whose request or reply is too large for one datagram is
split into several requests, sent one after another, each once; if one of
them fails its error is raised, saying how many tasks the earlier parts
enqueued (they stay enqueued). Any other oversize
request raises FRAME_TOO_LARGE before anything is sent. A lease returns as many tasks as fit in one reply datagram,
possibly fewer than `max_tasks`; a task that alone would not fit one is not
leased (it stays available, no attempt counted) and the broker says how many
it passed over: the channel counts them (`too_large_reported`) and logs a
warning (at most one a minute) to lease them over `kw://` (TCP).

With credentials in the URL, the channel sends `auth` before its first
request, and again when the broker answers UNAUTHORIZED (it restarted, or
pushed the session out). Then it sends again — under a new id, as a new
request — only what cannot have run: a request whose single datagram got
UNAUTHORIZED (the broker ran nothing), a read, or an enqueue whose tasks all
have pids (a copy that ran makes the second collapse). Any other write sent
more than once may have run from an earlier copy before the broker lost the
session (a restart loses the window too): it fails CONNECTION_LOST, outcome
unknown, rather than risk running twice. (A broker that still has the reply answers
a copy from its window whatever became of the session.) Only the part of a
split `enqueue_many` that got UNAUTHORIZED is concerned: the parts before
it are never sent again.

`close()` ends at once the calls still retransmitting (a broker gone away
would otherwise hold each until its deadline), with `ConnectionLost`: their
datagrams left, so the outcome is unknown. It is the `Channel` of `kwu://`.
"""

from __future__ import annotations

import itertools
import logging
import random
import socket
import threading
import time
from typing import Any, TypeVar, cast

import msgspec

from kittiwake import errors
from kittiwake.client import calls
from kittiwake.client.calls import Call
from kittiwake.client.url import BrokerAddress
from kittiwake.client.wire import result_of
from kittiwake.constants import FIFO_PID_DIGITS
from kittiwake.model import EnqueueOutcome
from kittiwake.protocol import messages as m
from kittiwake.protocol.datagrams import (
    AMPLIFICATION_FACTOR,
    HEADER_BYTES,
    MAX_BODY_BYTES,
    PADDED_REQUEST_BYTES,
    PRODUCER_ID_MAX,
    RECEIVE_BYTES,
    NotADatagram,
    decode_datagram,
    encode_datagram,
)
from kittiwake.protocol.replies import ReplyEnvelope, decode_envelope, encode_ok, result_decoder

T = TypeVar("T")

log = logging.getLogger("kittiwake.client")

DEFAULT_DEADLINE_SECS = 10.0  # well inside the broker's 30 s retransmit window
FIRST_RTO_SECS = 0.2
MIN_RTO_SECS = 0.02
MAX_RTO_SECS = 1.0
RECEIVE_POLL_SECS = 0.2  # how soon the reader thread notices `close`
LONG_POLL_RESEND_SECS = 2.0  # a parked long-poll's copy, so a lost reply is fetched from the broker's 30 s window
REAUTHENTICATIONS = 3  # times a request refused UNAUTHORIZED is sent again after a new `auth`
# requests that change nothing: sent again under a new id even when a copy may have reached the broker
RESENDABLE: frozenset[type[m.Request]] = frozenset(
    {m.Ping, m.Peek, m.Get, m.FindBySender, m.QueuesForReceiver, m.ListQueues, m.Stats, m.ListJoins}
)
TOO_LARGE_WARNING_SECS = 60.0  # a consumer polling a queue with a huge task warns once a minute, not per lease

_decode_enqueued = result_decoder("enqueue")


def _resendable(request: m.Request) -> bool:
    """Whether a request whose earlier copy may have run can be sent again as new: a read, or an
    enqueue whose tasks all have pids (a copy that ran collapses the second), as the docs promise."""
    if type(request) in RESENDABLE:
        return True
    return isinstance(request, m.Enqueue) and all(task.pid for task in request.tasks)
_encode = msgspec.msgpack.Encoder().encode
FIFO_PID_STAND_IN = "9" * FIFO_PID_DIGITS  # as long as any pid the broker gives a task that named none
# an enqueue reply's envelope around its outcomes: the largest id, and the list's header at its largest
ENQUEUE_ENVELOPE_BYTES = len(encode_ok(PRODUCER_ID_MAX, [])) + 4


def enqueue_reply_bytes(tasks: list[m.TaskIn]) -> int:
    """An upper bound of the body of the ok reply to an enqueue of `tasks`."""
    return ENQUEUE_ENVELOPE_BYTES + sum(
        len(_encode(EnqueueOutcome(task.queue, task.pid if task.pid is not None else FIFO_PID_STAND_IN, False)))
        for task in tasks
    )


def padded_size(request: m.Request) -> int:
    """The size to pad a request's datagram to, so the broker's bound lets its reply through."""
    if type(request) is m.Enqueue:
        reply_bytes = HEADER_BYTES + enqueue_reply_bytes(request.tasks)
        return -(-reply_bytes // AMPLIFICATION_FACTOR)
    return PADDED_REQUEST_BYTES  # a lease, a read, an item batch: a reply of up to a datagram


class _Waiting:
    """One call waiting for its reply."""

    __slots__ = ("event", "reply")

    def __init__(self) -> None:
        self.event = threading.Event()
        self.reply: ReplyEnvelope[msgspec.Raw] | None = None


class RoundTripTimer:
    """RFC 6298's retransmission timeout from measured round trips (Karn: only first tries count)."""

    def __init__(self) -> None:
        self.smoothed_secs: float | None = None
        self.variation_secs = 0.0
        self.rto_secs = FIRST_RTO_SECS

    def measured(self, sample_secs: float) -> None:
        if self.smoothed_secs is None:
            self.smoothed_secs = sample_secs
            self.variation_secs = sample_secs / 2
        else:
            self.variation_secs = 0.75 * self.variation_secs + 0.25 * abs(self.smoothed_secs - sample_secs)
            self.smoothed_secs = 0.875 * self.smoothed_secs + 0.125 * sample_secs
        rto = self.smoothed_secs + 4 * self.variation_secs
        self.rto_secs = min(MAX_RTO_SECS, max(MIN_RTO_SECS, rto))


class UdpChannel:
    """Requests to one broker over UDP; shared by threads (each call waits on its own id)."""

    def __init__(self, address: BrokerAddress, *, producer_id: int | None = None) -> None:
        self.address = address
        self.producer_id = producer_id if producer_id is not None else random.SystemRandom().randint(1, PRODUCER_ID_MAX)
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._waiting: dict[int, _Waiting] = {}
        self._timer = RoundTripTimer()
        self._auth_lock = threading.Lock()
        self._authenticated = address.user is None
        self._closed = False
        # counts, for benchmarks and tests
        self.sent = 0
        self.retransmits = 0
        self.ignored_replies = 0  # late or duplicate
        self.too_large_reported = 0  # tasks leases passed over as too large for a datagram
        self._too_large_warned_at: float | None = None
        try:
            family, kind, proto, _, target = socket.getaddrinfo(address.host, address.port, type=socket.SOCK_DGRAM)[0]
            self._sock = socket.socket(family, kind, proto)
            self._sock.connect(target)
        except OSError as exc:
            raise errors.BrokerUnreachable(f"cannot reach {address.url}: {exc}") from None
        self._sock.settimeout(RECEIVE_POLL_SECS)
        self._reader = threading.Thread(target=self._read_replies, name="kittiwake-udp-reader", daemon=True)
        self._reader.start()

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Stop: calls waiting for a reply end now with ConnectionLost, later calls raise BrokerUnreachable."""
        if self._closed:
            return
        self._closed = True
        with self._lock:
            waiting = list(self._waiting.values())
        for call in waiting:
            call.event.set()  # its reply stays None: the call sees the channel closed
        self._reader.join(timeout=2 * RECEIVE_POLL_SECS + 1)
        self._sock.close()

    # ------------------------------------------------------------- calls

    def request(self, call: Call[T], timeout_secs: float | None) -> T:
        """Send the call and return its result; raises its error, or RequestTimeout at the deadline."""
        if self._closed:
            raise errors.BrokerUnreachable("the client is closed")
        deadline_secs = DEFAULT_DEADLINE_SECS if timeout_secs is None else timeout_secs
        deadline = time.monotonic() + deadline_secs
        if not self._authenticated:
            self._authenticate(deadline)
        return self._request(call, deadline)

    def _authenticate(self, deadline: float) -> None:
        with self._auth_lock:
            if self._authenticated:
                return
            assert self.address.user is not None and self.address.token is not None
            self._request(calls.auth(self.address.user, self.address.token), deadline)
            self._authenticated = True

    def _request(self, call: Call[T], deadline: float) -> T:
        request = call.request
        if type(request) is m.Enqueue and len(request.tasks) > 1 and not self._fits(request):
            return cast(T, self._enqueue_split(request.tasks, deadline))  # enqueue_many: a list
        reply = self._round_trip(request, call.wait_secs, deadline)
        if reply.too_large:
            self._too_large(reply.too_large)
        return result_of(call, reply)

    def _too_large(self, count: int) -> None:
        """A lease passed over tasks no datagram can carry: say so, once in a while."""
        self.too_large_reported += count
        now = time.monotonic()
        if self._too_large_warned_at is not None and now - self._too_large_warned_at < TOO_LARGE_WARNING_SECS:
            return
        self._too_large_warned_at = now
        log.warning(
            "%d task%s too large for a UDP datagram left available by a lease from %s (no attempt counted; "
            "%d so far): lease %s over kw:// (TCP)",
            count, "" if count == 1 else "s", self.address.url, self.too_large_reported,
            "it" if count == 1 else "them",
        )

    def _enqueue_split(self, tasks: list[m.TaskIn], deadline: float) -> list[Any]:
        """Enqueue tasks in as few datagrams as halving finds, in order, each part once: a part that
        fails raises its error, saying how many tasks the parts before it enqueued."""
        outcomes: list[Any] = []
        parts = self._parts(tasks)
        for number, part in enumerate(parts, 1):
            request = m.Enqueue(id=0, op="enqueue", tasks=part)
            try:
                reply = self._round_trip(request, 0.0, deadline)
                if not reply.ok:
                    result_of(Call(request, _decode_enqueued), reply)  # raises its error
            except errors.KittiwakeError as exc:
                if outcomes:
                    exc.message = (f"{exc.message} (part {number} of {len(parts)} of an enqueue_many; the "
                                   f"{len(outcomes)} tasks of the parts before it are enqueued)")
                    exc.args = (exc.message,)
                raise
            outcomes.extend(_decode_enqueued(reply.result))
        return outcomes

    def _parts(self, tasks: list[m.TaskIn]) -> list[list[m.TaskIn]]:
        """The tasks cut into as few datagrams as halving finds, in order."""
        if len(tasks) == 1 or self._fits(m.Enqueue(id=0, op="enqueue", tasks=tasks)):
            return [tasks]
        middle = len(tasks) // 2
        return self._parts(tasks[:middle]) + self._parts(tasks[middle:])

    def _fits(self, request: m.Enqueue) -> bool:
        """Whether an enqueue and its reply each fit in one datagram."""
        # id 0 here: leave room for the id it will be sent with
        return len(m.encode(request)) <= MAX_BODY_BYTES - 8 and enqueue_reply_bytes(request.tasks) <= MAX_BODY_BYTES

    def _round_trip(self, request: m.Request, wait_secs: float, deadline: float) -> ReplyEnvelope[msgspec.Raw]:
        """The request's reply; sent again under a new id, after authenticating again, only when
        the broker said UNAUTHORIZED to a request that cannot have run (see the module docstring)."""
        for attempt in range(REAUTHENTICATIONS + 1):
            reply, tries = self._exchange(request, wait_secs, deadline)
            if reply.ok or self.address.user is None or type(request) is m.Auth or _code(reply) != "UNAUTHORIZED":
                return reply
            if attempt == REAUTHENTICATIONS:
                break
            if tries > 1 and not _resendable(request):
                # a copy of it may have run before the broker lost our session (a restart), and its
                # reply with the session: sent again under a new id it might run twice
                raise errors.ConnectionLost(
                    f"the broker forgot this client's session while it retransmitted {request.op} to "
                    f"{self.address.url} (it restarted, or pushed the session out); "
                    "it may or may not have been applied"
                )
            self._authenticated = False  # it was never run: authenticate again, then send it as new
            self._authenticate(deadline)
        return reply

    def _exchange(
        self, request: m.Request, wait_secs: float, deadline: float
    ) -> tuple[ReplyEnvelope[msgspec.Raw], int]:
        """Send the request under a new id until its reply comes: the reply and the datagrams sent."""
        with self._lock:
            request_id = next(self._ids)
            waiting = _Waiting()
            self._waiting[request_id] = waiting
        try:
            request = msgspec.structs.replace(request, id=request_id)
            body = m.encode(request)
            if len(body) > MAX_BODY_BYTES:
                raise errors.FrameTooLarge(
                    f"the {request.op} request is {len(body)} bytes, over the UDP limit of {MAX_BODY_BYTES}; "
                    "send less or use kw:// (TCP)"
                )
            datagram = encode_datagram(self.producer_id, body, padded_to=padded_size(request))
            started = time.monotonic()
            rto = self._timer.rto_secs
            parked_until = started + wait_secs + rto  # a long-poll: the broker may hold the reply `wait_secs`
            tries = 0
            while True:
                self._send(datagram)
                tries += 1
                now = time.monotonic()
                remaining = deadline - now
                if remaining <= 0 or self._closed:
                    break
                if wait_secs > 0 and now < parked_until:
                    # while the broker may hold it, a copy is dropped; once answered, a copy gets the
                    # reply from the retransmit window, so a lost reply costs seconds, not the wait
                    pause = min(parked_until - now, LONG_POLL_RESEND_SECS)
                else:
                    pause = rto
                    rto = min(MAX_RTO_SECS, rto * 2)
                if waiting.event.wait(min(pause, remaining)):
                    break
                if time.monotonic() >= deadline:
                    break
                self.retransmits += 1
            reply = waiting.reply
            if reply is None and self._closed:
                raise errors.ConnectionLost(
                    f"the client was closed before the reply to {request.op} from {self.address.url}; "
                    "it may or may not have been applied"
                )
            if reply is None:
                raise errors.RequestTimeout(
                    f"no reply to {request.op} from {self.address.url} within {deadline - started:.1f} s "
                    f"({tries} datagrams sent); it may or may not have been applied"
                )
            if tries == 1 and wait_secs == 0:
                self._timer.measured(time.monotonic() - started)
            return reply, tries
        finally:
            with self._lock:
                self._waiting.pop(request_id, None)

    def _send(self, datagram: bytes) -> None:
        self.sent += 1
        try:
            self._sock.send(datagram)
        except OSError:
            pass  # ICMP unreachable from an earlier datagram, a full buffer: as if lost; the timer retries

    # ------------------------------------------------------------ replies

    def _read_replies(self) -> None:
        sock = self._sock
        while not self._closed:
            try:
                data = sock.recv(RECEIVE_BYTES)
            except (socket.timeout, ConnectionRefusedError, InterruptedError):
                continue  # refused: the broker's port is closed for now; the callers' timers retry
            except OSError:
                return
            try:
                datagram = decode_datagram(data)
                if datagram.producer_id != self.producer_id:
                    raise NotADatagram("another producer's reply")
                reply = decode_envelope(datagram.body)
            except (NotADatagram, msgspec.DecodeError):
                self.ignored_replies += 1
                continue
            with self._lock:
                waiting = self._waiting.get(reply.id)
            if waiting is None or waiting.reply is not None:
                self.ignored_replies += 1  # late (its call gave up) or a duplicate
                continue
            waiting.reply = reply
            waiting.event.set()


def _code(reply: ReplyEnvelope[Any]) -> str:
    return reply.error.get("code", "") if reply.error else ""

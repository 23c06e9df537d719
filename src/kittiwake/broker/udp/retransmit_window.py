"""The retransmit window of the UDP listener: (sender, request id) → the reply already sent.

A UDP client retransmits a request whose reply it has not seen; the reply may
have been lost after the request ran. Running it again would enqueue the task
twice (a broker-assigned FIFO pid is new every time) or lease more tasks, so
the broker remembers, per (sender, request id), that a request is in flight
or which reply it got, and answers a retransmission from here without
running it again (CMQ (001) keeps per-sender sequence numbers for the same
reason; SQS FIFO's five-minute deduplication window is the same idea).

The sender is whatever the listener says names one client — for the UDP
listener, (user, source address, producer id): a producer id alone is only
a number in a datagram, and another user, or another address, that sends it
must never read the reply cached for it nor make one of its request ids
"already answered". The window never looks inside a sender.

Theory of operation:

| lookup finds | meaning | the listener |
| --- | --- | --- |
| `NEW` | never seen, or seen so long ago that it fell out | runs it (`begin`, then `finish` with its reply) |
| `IN_FLIGHT` | running now (in a pass, or a parked long-poll) | drops the copy: the reply will come |
| a reply | ran and was answered | sends the same reply again |
| `TOO_LATE` | the producer's entries up to this id were evicted | answers UNAVAILABLE, outcome unknown |

A request may also be looked up by its *place* and id (`lookup_at`): the
place is the part of the sender a datagram cannot claim without the reply
going there (for the listener, the source address and port and the producer
id; `begin` is told it). The listener does so before it knows the sender's
user — when the producer's session is gone — so that a retransmission whose
reply is cached is answered from here, to the address the reply was cached
for, rather than refused UNAUTHORIZED and sent again as a new request.

Bounds: finished entries are kept at most `max_age_secs` and at most
`max_entries` of them (the oldest go first); a reply is at most one datagram,
so memory is bounded by `max_entries × MAX_DATAGRAM_BYTES`. Entries in flight
are not counted: the broker's own pending and parked requests bound them. The
client gives up on a request well inside the age (its deadline, 10 s by
default, against 30 s here), so only the count can evict an entry a client
may still retransmit, under heavy load; for that case the window keeps, per
sender (at most `max_senders` of them), the highest request id it evicted,
and a request at or below it that it no longer knows is refused as
`TOO_LATE` instead of being run a second time. A refused request may or may not have run: the client reports
that outcome as unknown, as after a lost TCP connection.

The window lives in memory only. If the broker restarts while a client is
still retransmitting — or the client's address changes under it (a NAT
rebinding), which makes it another sender — the retransmission finds
nothing and runs again: an
enqueue without a pid then creates a second task (its FIFO pid is new), an
enqueue with a pid collapses into the task it already made (the pid is the
durable dedupe key, for as long as the task exists), a dequeue, renew or
release of a lease already finished answers TASK_NOT_LEASED for that item,
and a lease leases other tasks while the first ones wait out their lease. A
producer that needs exactly-once across restarts names its pids.

Pure: the clock is passed in.
"""

from __future__ import annotations

import enum
from collections import OrderedDict
from collections.abc import Hashable

DEFAULT_MAX_ENTRIES = 65_536
DEFAULT_MAX_AGE_SECS = 30.0
DEFAULT_MAX_SENDERS = 65_536

Key = tuple[Hashable, int]  # (sender, request id)


class Seen(enum.Enum):
    """What the window knows of a request that has no reply to resend."""

    NEW = "new"  # run it
    IN_FLIGHT = "in_flight"  # a copy is running: drop this one
    TOO_LATE = "too_late"  # it may have run and its reply is forgotten: outcome unknown


class RetransmitWindow:
    """Replies of recent requests by (sender, request id), bounded by count and age."""

    def __init__(
        self,
        max_entries: int = DEFAULT_MAX_ENTRIES,
        max_age_secs: float = DEFAULT_MAX_AGE_SECS,
        max_senders: int = DEFAULT_MAX_SENDERS,
    ) -> None:
        self.max_entries = max_entries
        self.max_age_secs = max_age_secs
        self.max_senders = max_senders
        self._done: OrderedDict[Key, tuple[float, bytes]] = OrderedDict()  # oldest first
        self._in_flight: set[Key] = set()
        self._places: dict[tuple[Hashable, int], Key] = {}  # (place, request id) → the key begun there last
        self._place_of: dict[Key, Hashable] = {}
        self._evicted_through: OrderedDict[Hashable, int] = OrderedDict()  # sender → highest evicted id
        self.hits = 0  # retransmissions answered from the window
        self.evicted = 0

    def __len__(self) -> int:
        return len(self._done)

    def lookup(self, key: Key, now: float) -> Seen | bytes:
        """The reply to resend, or what to do with the request."""
        self.expire(now)
        if key in self._in_flight:
            return Seen.IN_FLIGHT
        entry = self._done.get(key)
        if entry is not None:
            self.hits += 1
            return entry[1]
        evicted = self._evicted_through.get(key[0])
        if evicted is not None and key[1] <= evicted:
            return Seen.TOO_LATE
        return Seen.NEW

    def lookup_at(self, place: Hashable, request_id: int, now: float) -> Seen | bytes:
        """What `lookup` says of the request of that id last begun at the place, whichever sender
        began it; NEW when none is known there."""
        self.expire(now)
        key = self._places.get((place, request_id))
        if key is None:
            return Seen.NEW
        return self.lookup(key, now)

    def begin(self, key: Key, place: Hashable | None = None) -> None:
        """The request is about to run; `place`, when given, finds it with `lookup_at` too."""
        self._in_flight.add(key)
        if place is not None:
            self._forget_place(key)
            self._places[(place, key[1])] = key
            self._place_of[key] = place

    def _forget_place(self, key: Key) -> None:
        place = self._place_of.pop(key, None)
        if place is not None and self._places.get((place, key[1])) == key:
            del self._places[(place, key[1])]

    def finish(self, key: Key, reply: bytes, now: float) -> None:
        """The request was answered with `reply`: remember it for retransmissions."""
        self._in_flight.discard(key)
        self._done[key] = (now, reply)
        self._done.move_to_end(key)
        while len(self._done) > self.max_entries:
            self._evict()

    def abandon(self, key: Key) -> None:
        """The request will get no reply (the broker is stopping): forget it was in flight."""
        self._in_flight.discard(key)
        self._forget_place(key)

    def expire(self, now: float) -> None:
        """Drop finished entries older than the age bound."""
        done = self._done
        horizon = now - self.max_age_secs
        while done:
            first = next(iter(done.values()))
            if first[0] > horizon:
                break
            self._evict()

    def _evict(self) -> None:
        (sender, request_id), _ = self._done.popitem(last=False)
        self._forget_place((sender, request_id))
        self.evicted += 1
        marks = self._evicted_through
        if request_id > marks.get(sender, -1):
            marks[sender] = request_id
        marks.move_to_end(sender)
        while len(marks) > self.max_senders:
            marks.popitem(last=False)

"""Long-polls in the group-commit passes: which empty lease waits, when it is tried again, how it ends.

A lease with `wait_secs > 0` that comes back empty is parked by its pass
(`passes`) in the `WaiterBook` instead of answered. Every later pass retries
the long-polls on the queues the engine reports as ready (`Engine.take_ready`),
oldest first, so the worker that has waited longest is served first; a try
that could take any task (no receiver, `max_pid` or reply bound) and finds
the queues empty marks them drained for the rest of the pass, so a thousand
idle workers cost one look, not a thousand. After the engine was
rebuilt it knows nothing of which queues gained tasks, so every long-poll
looks once. A long-poll ends with tasks, with an empty list at its deadline
(the monotonic clock, so a step of the wall clock does not time out every
poll at once), when its client withdraws it (`cancel_wait`) or half-closes,
or at shutdown; it is forgotten with its connection.

Bounds, so that no client can stall a pass or pin the broker's memory with
long-polls: the waiters of one connection hold at most
`MAX_PARKED_NAMES_PER_CONNECTION` queue names in all (a lease beyond is
answered at once with what it found, nothing: `may_park`), and one pass
retries long-polls naming at most `RETRY_BUDGET_NAMES` queue names; the
rest look in the next pass (their queues stay ready, `more` asks for that
pass), starting where this one stopped, so every waiter's turn comes.

A long-poll of a connection whose output is full (its transport paused
writing, or items deferred) is not retried, nor more of a connection's than
`max_held_bytes` of replies in one pass: a client that stops reading would
otherwise have every retry's tasks written into its buffer, without bound.
When its output drains, the connection asks for its long-polls to look again
(`wake_connection`).

Like the rest of a pass, the changes one try makes wait in its `Attempt`
(long-polls to park or withdrawn, replies with the waiter they serve) until
the try is over, and served waiters leave the book only once the commit is
done: a pass that fails leaves them parked.
"""

from __future__ import annotations

from typing import Any, Callable, cast

from kittiwake import errors
from kittiwake.broker.pass_replies import Attempt, Caller, HeldReply, ReplyKind, error_frame, internal_error, ok_frame
from kittiwake.broker.waiters import WaiterBook
from kittiwake.engine import Engine
from kittiwake.model import LeaseRequest

Guard = Callable[[tuple[Any, ...], str, Callable[[], Any]], Any]  # runs a call, a bug becoming EngineBug(key)

MAX_PARKED_NAMES_PER_CONNECTION = 10_000
"""Queue names the parked long-polls of one connection may hold in all (a lease names up to 1,000)."""

RETRY_BUDGET_NAMES = 100_000
"""Queue names of the long-polls one pass retries at most (tens of milliseconds of leases)."""


class LongPolls:
    """The parked long-polls of one broker."""

    def __init__(self, max_frame: int, max_held_bytes: int) -> None:
        self.waiters = WaiterBook()
        self.max_frame = max_frame
        self.max_held_bytes = max_held_bytes  # of one connection's retried replies in a pass
        self.retry_everyone = False  # the engine was rebuilt: every long-poll looks once
        self.more = False  # the last pass left long-polls to retry over its budget
        self._resume_after = 0  # the seq of the last waiter a pass over budget retried

    def queues_of(self, connection: Caller) -> set[str]:
        """The queues `connection`'s parked long-polls wait on (to look again once its output drains)."""
        return {queue for waiter in self.waiters.of_connection(connection) for queue in waiter.queues}

    def __len__(self) -> int:
        return len(self.waiters)

    def withdraw(self, connection: Caller, request_id: int, attempt: Attempt) -> bool:
        """Answer this connection's long-poll `request_id` with nothing; False if there is none.

        Like all of an attempt's effects, taking the waiter out of the book waits
        for `apply`; until then `attempt.cancelled` keeps retries off it."""
        for waiter in self.waiters.of_connection(connection):
            if waiter.request_id == request_id and waiter not in attempt.cancelled:
                attempt.cancelled.append(waiter)
                break
        else:
            for park in attempt.park:  # parked earlier in this same pass
                if park.connection is connection and park.request_id == request_id:
                    attempt.park.remove(park)
                    break
            else:
                return False
        attempt.held.append(HeldReply(connection, request_id, ok_frame(request_id, [], self.max_frame), ReplyKind.FIXED))
        return True

    def may_park(self, connection: Caller, queues: int, attempt: Attempt) -> bool:
        """Whether a lease naming `queues` queues may wait on `connection` (`MAX_PARKED_NAMES_PER_CONNECTION`)."""
        parking = attempt.parked_names.get(connection, 0) + queues
        if self.waiters.names_of(connection) + parking > MAX_PARKED_NAMES_PER_CONNECTION:
            return False
        attempt.parked_names[connection] = parking
        return True

    def retry(self, engine: Engine, attempt: Attempt, poisoned: set[tuple[Any, ...]], now: float, guard: Guard) -> None:
        """Retry parked long-polls on queues that gained tasks, oldest first (from where the last
        pass over budget stopped), then this pass's own."""
        ready = engine.take_ready()
        if self.retry_everyone:
            candidates = self.waiters.everyone()
        elif ready and len(self.waiters):
            candidates = self.waiters.on_queues(ready)
        else:
            candidates = []
        self.more = False
        if self._resume_after:
            start = next((index for index, waiter in enumerate(candidates) if waiter.seq > self._resume_after), 0)
            candidates = candidates[start:] + candidates[:start]
            self._resume_after = 0
        drained: set[str] = set()  # queues an unrestricted lease found empty in this pass
        held: dict[Caller, int] = {}  # bytes of retried replies per connection in this pass
        spent = 0
        for index, waiter in enumerate(candidates):
            if spent >= RETRY_BUDGET_NAMES:
                # the rest look in the next pass, this one's turn first
                engine.state.ready.update(queue for rest in candidates[index:] for queue in rest.queues)
                self._resume_after = candidates[index - 1].seq
                self.more = True
                break
            spent += len(waiter.queues)
            connection = cast(Caller, waiter.connection)
            if connection.closed or waiter in attempt.cancelled:
                continue  # dropped from the book when the connection went
            if self._output_full(connection, held):
                continue  # looks again when the output drains (`queues_of`)
            if ("waiter", waiter.seq) in poisoned:
                frame = error_frame(waiter.request_id, internal_error())
                attempt.held.append(HeldReply(connection, waiter.request_id, frame, ReplyKind.FIXED, waiter))
                continue
            lease, queues, request_id = waiter.lease, waiter.queues, waiter.request_id
            retried = guard(
                ("waiter", waiter.seq), f"the long-poll {request_id}",
                lambda: self._retry(engine, lease, queues, drained, request_id, now),
            )
            if retried is not None:
                held[connection] = held.get(connection, 0) + len(retried)
                attempt.held.append(HeldReply(connection, request_id, retried, ReplyKind.WAITER, waiter))
        if ready or self.retry_everyone:
            for park in list(attempt.park):
                if ready.isdisjoint(park.lease.queues) and not self.retry_everyone:
                    continue
                if self._output_full(park.connection, held):
                    continue
                lease, queues, request_id = park.lease, tuple(dict.fromkeys(park.lease.queues)), park.request_id
                retried = guard(
                    ("request", park.index), f"the long-poll {request_id}",
                    lambda: self._retry(engine, lease, queues, drained, request_id, now),
                )
                if retried is not None:
                    held[park.connection] = held.get(park.connection, 0) + len(retried)
                    attempt.park.remove(park)
                    attempt.held.append(HeldReply(park.connection, request_id, retried, ReplyKind.REQUEST))

    def _output_full(self, connection: Caller, held: dict[Caller, int]) -> bool:
        return bool(connection.write_paused or connection.deferred or held.get(connection, 0) >= self.max_held_bytes)

    def _retry(
        self, engine: Engine, lease: LeaseRequest, queues: tuple[str, ...], drained: set[str], request_id: int, now: float
    ) -> bytes | None:
        """One more try of a long-poll; its reply, or None to keep waiting."""
        # only a lease that could take any task proves a queue empty: one bounded by its reply's
        # size (UDP) may have left, or passed over, tasks another waiter can take
        unrestricted = lease.receiver is None and lease.max_pid is None and lease.max_reply_bytes is None
        if unrestricted and drained.issuperset(queues):
            return None  # an earlier try in this pass found these queues empty
        try:
            tasks = engine.lease(lease, now)
        except errors.StorageFailure:
            raise
        except errors.KittiwakeError as exc:
            return error_frame(request_id, exc)
        if unrestricted and len(tasks) < lease.max_tasks:
            drained.update(queues)
        return ok_frame(request_id, tasks, self.max_frame) if tasks else None

    def apply(self, attempt: Attempt, paused: bool) -> None:
        """A try of a pass finished: park its long-polls, take out those it withdrew."""
        if not paused:  # a paused attempt retried no long-poll
            self.retry_everyone = False
        for waiter in attempt.cancelled:
            self.waiters.remove(waiter)
        for park in attempt.park:
            self.waiters.park(park.connection, park.request_id, park.lease, park.deadline)

    def served(self, held: list[HeldReply]) -> None:
        """The pass committed: the long-polls it answered leave the book."""
        for reply in held:
            if reply.waiter is not None:
                self.waiters.remove(reply.waiter)

    def expired(self, monotonic_now: float) -> list[HeldReply]:
        """Empty replies to the long-polls past their deadline, taken out of the book."""
        if not len(self.waiters):
            return []
        return [self._empty(waiter) for waiter in self.waiters.expired(monotonic_now)]

    def end(self, connection: Caller) -> list[bytes]:
        """The replies to a half-closed connection's long-polls: each an empty list."""
        mine = self.waiters.of_connection(connection)
        for waiter in mine:
            self.waiters.remove(waiter)
        return [self._empty(waiter).frame for waiter in mine]

    def end_all(self) -> list[HeldReply]:
        """Shutdown: an empty reply to every long-poll."""
        everyone = self.waiters.everyone()
        for waiter in everyone:
            self.waiters.remove(waiter)
        return [self._empty(waiter) for waiter in everyone]

    def drop(self, connection: Caller) -> None:
        self.waiters.drop_connection(connection)

    def _empty(self, waiter: Any) -> HeldReply:
        return HeldReply(cast(Caller, waiter.connection), waiter.request_id,
                         ok_frame(waiter.request_id, [], self.max_frame), ReplyKind.FIXED)

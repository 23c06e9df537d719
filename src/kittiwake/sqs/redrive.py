"""Dead-letter redrive of the SQS API: who may send a queue's messages into which dead-letter queue.

A RedrivePolicy makes the broker write into another queue: a message received
more than maxReceiveCount times is moved (dequeue + enqueue in one update) into
the policy's `deadLetterTargetArn` (`MessageActions._redrive`, `dead_letter_update`).
The engine's own dead-lettering into `<queue>.dead` plays no part: SQS messages
carry an attempt limit out of reach (`queue_registry.MAX_ATTEMPTS`).

The rule, with an auth file: a message is only ever redriven into a queue
that the user who set the policy may produce into, as the rights stand at
the moment of the move. So no user can make the broker write into a queue it
has no produce right on — not by a policy, not by one set while it still had
the right, not by one stored before targets were checked:

* when a policy is set (CreateQueue, SetQueueAttributes) the caller needs
  produce on the target's SQS name and, for a FIFO target, on all its group
  queues (`rights`), beyond admin on the queue itself
  (`check_policy`; AccessDenied, 403, naming the target, whether or not the
  target exists, so the answer tells nothing of other users' queues); the
  registry records who set it (`SqsQueue.redrive_by`);
* when a message is to be moved, `allows` asks the auth file again: the
  recorded setter must still be a user with produce on the target. A policy
  with no recorded setter (stored before this rule, or set on the broker
  while it ran without an auth file) could have been set by anyone holding
  admin on the queue: every such user must have produce on the target, and
  there must be at least one. A move that is not allowed does not happen:
  the message is delivered as if the queue had no policy, and the broker
  logs why (once per queue, target and setter).

The receiver only triggers a move and needs nothing beyond consume on the
queue it receives from — as SQS moves messages with the queue owner's
authority, not the consumer's. It chooses neither the target nor what is
written, so a consumer-only worker keeps its dead-letter queue working.

Without an auth file no user is checked: anyone may use every queue anyway.

The dead-letter queue's own RedriveAllowPolicy holds with or without an auth
file: ``denyAll`` lets no queue move messages into it, ``byQueue`` only the
queues its sourceQueueArns name, ``allowAll`` (or none) any. It is checked
when a source's RedrivePolicy is set (InvalidParameterValue naming the
target) and again at each move, as the rights are: a policy changed since
stops the moves at once.
"""

from __future__ import annotations

import json
import logging
from typing import Any, Iterable, Protocol

from kittiwake.broker.access import Permission, Principal
from kittiwake.protocol import messages as m
from kittiwake.protocol.replies import LeasedTask
from kittiwake.sqs import naming, sqs_errors
from kittiwake.broker.local_calls import request_id
from kittiwake.sqs.queue_registry import MAX_ATTEMPTS, SqsQueue
from kittiwake.sqs.rights import may_redrive_into, may_use

log = logging.getLogger("kittiwake.sqs")

MAX_WARNED = 1000  # refused (queue, target, setter) remembered so each is logged once; a bound, not an LRU


class UserDirectory(Protocol):
    """The users of the auth file as they stand now (`kittiwake.broker.auth.Authenticator`)."""

    def principal_of(self, user: str) -> Principal | None: ...

    def principals(self) -> Iterable[Principal]: ...


def target_of_policy(value: Any) -> str | None:
    """The SQS name a RedrivePolicy value as a client sent it points at; None if it names none
    (malformed policies are refused by the registry's own checks)."""
    if isinstance(value, str):
        try:
            value = json.loads(value) if value else None
        except ValueError:
            return None
    if not isinstance(value, dict):
        return None
    return naming.name_of_arn(str(value.get("deadLetterTargetArn", "")))


class RedriveRights:
    """Whether a redrive into a target may be set, and may happen now; `users` None: no auth file."""

    def __init__(self, users: UserDirectory | None) -> None:
        self.users = users
        self._warned: set[tuple[str, str, str | None]] = set()

    def check_policy(self, principal: Principal | None, given: dict[str, Any]) -> None:
        """AccessDenied unless `principal` may produce into the target of the RedrivePolicy in `given`."""
        if principal is None or "RedrivePolicy" not in given:
            return
        target = target_of_policy(given["RedrivePolicy"])
        if target is None or may_redrive_into(principal, target):
            return
        raise sqs_errors.access_denied(
            f"user {principal.user!r} has no produce permission on queue {target[:80]!r}, the RedrivePolicy's "
            "deadLetterTargetArn: a redrive writes into it"
        )

    def refusal(self, queue: SqsQueue, target: str, target_queue: SqsQueue | None = None) -> str | None:
        """Why messages of `queue` may not be moved into `target` (`target_queue`, when it exists) now;
        None if they may."""
        if target_queue is not None and not target_queue.redrive_allowed_from(queue.name):
            return "its RedriveAllowPolicy does not allow this queue"
        if self.users is None:
            return None
        if queue.redrive_by is not None:
            setter = self.users.principal_of(queue.redrive_by)
            if setter is None:
                return f"user {queue.redrive_by!r}, who set the RedrivePolicy, is no longer in the auth file"
            if not may_redrive_into(setter, target):
                return f"user {setter.user!r}, who set the RedrivePolicy, has no produce permission on it now"
            return None
        # no recorded setter: whoever set it held admin on the queue, so each of them must pass
        admins = [user for user in self.users.principals() if may_use(user, Permission.ADMIN, queue.name)]
        if not admins:
            return "the RedrivePolicy has no recorded setter and no user administers the queue"
        for admin in admins:
            if not may_redrive_into(admin, target):
                return (f"the RedrivePolicy has no recorded setter, and user {admin.user!r}, who administers the "
                        "queue, has no produce permission on it")
        return None

    def allows(self, queue: SqsQueue, target: str, target_queue: SqsQueue | None = None) -> bool:
        """Whether messages of `queue` may be moved into `target` now; logs a refusal once."""
        reason = self.refusal(queue, target, target_queue)
        if reason is None:
            return True
        key = (queue.name, target, queue.redrive_by)
        if key not in self._warned:
            if len(self._warned) >= MAX_WARNED:
                self._warned.clear()
            self._warned.add(key)
            log.warning("messages of SQS queue %r are not moved into its dead-letter queue %r: %s (set the "
                        "RedrivePolicy again as a user who may produce into it, or change the target's "
                        "RedriveAllowPolicy)", queue.name, target, reason)
        return False


def dead_letter_update(moving: list[LeasedTask], target_name: str, target: SqsQueue | None) -> m.Update:
    """The one update that moves `moving` (leased) into the dead-letter queue `target_name`, keeping each
    message's id, sent time and group."""
    enqueue: list[m.TaskIn] = []
    for task in moving:
        headers = dict(task.headers or {})
        headers[naming.ID_HEADER] = naming.message_id(task.queue, task.pid, task.headers)
        headers.setdefault(naming.SENT_HEADER, str(int(task.enqueued_at * 1000)))
        group = headers.get(naming.GROUP_HEADER)
        if target is not None and target.fifo and group is not None:
            destination = naming.group_queue(target_name, group)
        else:
            destination = target_name
        enqueue.append(m.TaskIn(queue=destination, data=task.data, sender=task.sender, headers=headers,
                                max_attempts=MAX_ATTEMPTS))
    return m.Update(id=request_id(), op="update", dequeue=[task.lease_ref() for task in moving], enqueue=enqueue)

"""What a right on an SQS queue must cover: the SQS queue's name and every Kittiwake queue behind it.

An SQS queue is several Kittiwake queues (`naming`): a standard queue `orders` is `orders` and
`orders.delayed`; a FIFO queue `jobs.fifo` is its group queues `jobs.fifo/<group>`. The SQS face
runs its actions on those queues without checking them again, so a permission on the SQS queue is
granted only when the user holds it on all of them: else a user with a right on `shared` alone would
reach, through SQS, the tasks another user keeps in `shared.delayed` or `shared/…`, which the
binary port refuses it (a right on `jobs` does not cover `jobs.dead` either). A grant such as
`orders*` or `orders,orders.delayed` covers a standard queue, `jobs.fifo*` or `jobs.fifo/*` with
`jobs.fifo` a FIFO queue. Group queues are checked as a prefix (`Principal.may_every`), so a grant
on a few groups only does not cover the FIFO queue.
"""

from __future__ import annotations

from kittiwake.broker.access import Permission, Principal
from kittiwake.sqs import naming


def may_use(principal: Principal, permission: Permission, name: str) -> bool:
    """Whether `principal` holds `permission` on the SQS queue `name` and every queue behind it."""
    if not principal.may(permission, name):
        return False
    if naming.is_fifo(name):
        return principal.may_every(permission, name + "/")
    return principal.may(permission, naming.delayed_queue(name))


def may_redrive_into(principal: Principal, target: str) -> bool:
    """Whether `principal` may produce into the queues a redrive moves messages into: the target
    itself (a standard queue: never its `.delayed`), or every group queue of a FIFO target."""
    if not principal.may(Permission.PRODUCE, target):
        return False
    return not naming.is_fifo(target) or principal.may_every(Permission.PRODUCE, target + "/")


def behind(name: str) -> str:
    """The Kittiwake queues behind the SQS queue `name`, as a message says them."""
    return f"{name}/…" if naming.is_fifo(name) else f"{name} and {naming.delayed_queue(name)}"

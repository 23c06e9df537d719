"""Data locality (Albatross §5.2.3): tasks named for a node wait in that node's local queue.

``f.submit(..., node="n1")`` enqueues into ``<queue>@n1`` (same consistency
group as ``<queue>``). A worker run with ``--node n1`` leases from its local
queues and the shared ones; after ``--steal-after`` seconds without work it
steals one task at a time from other nodes' local queues (found with
``list_queues``), so an idle node helps a loaded one without drawing most of
its tasks away.
"""

from __future__ import annotations

import re

from kittiwake.constants import NODE_SEPARATOR
_NODE = re.compile(r"^[A-Za-z0-9_.:/-]+$")


def validate_node(node: str) -> str:
    if not isinstance(node, str) or not _NODE.fullmatch(node):
        raise ValueError(f"node {node!r} must be made of [A-Za-z0-9_.:/-]")
    return node


def local_queue_of(queue: str, node: str) -> str:
    """The queue of `queue`'s tasks whose data is on `node`."""
    return f"{queue}{NODE_SEPARATOR}{validate_node(node)}"


def base_queue_of(queue: str) -> str:
    """`<queue>@<node>` → `<queue>`; other names unchanged."""
    return queue.rpartition(NODE_SEPARATOR)[0] if NODE_SEPARATOR in queue else queue


def remote_queue_pattern(queue: str) -> str:
    """A `list_queues` pattern for every node's local queue of `queue`."""
    return "^" + re.escape(queue + NODE_SEPARATOR) + r"[A-Za-z0-9_.:/-]+$"

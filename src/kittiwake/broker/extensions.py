"""Request extensions: what a layer above the broker adds to every request path, plugged in from above.

A face (`faces`) is another way *into* the broker; an extension changes what the
broker *answers*, whichever way a request came in. The broker core names no
extension: the composition root (`cli/broker_command.py`, or a test) builds them
and hands them to `Broker(config, faces=..., extensions=[...])`. The cluster
node (`kittiwake.cluster.node_extension`) is one.

An extension is `RequestExtension`:

* `ops()`: extra ops it answers, by request type, as handlers of the same shape
  as `dispatch.HANDLERS` (they override the broker's own answer for that op:
  a broker that is no node answers `cluster_map` with no nodes). They run in
  the group-commit pass like any op and count as read-only (served while a
  storage outage pauses writes; they write nothing to the store);
* `check(request)`: run in the pass on every request before it is dispatched,
  so every face (binary, TLS, UDP, SQS, HTTP: they all go through
  `Host.submit`) is guarded alike; raising a `KittiwakeError` refuses the whole
  request with that error, nothing of it run. Cheap: it runs per request;
* `id_class`: the residue class (residue, modulus) of the ids the broker
  issues (`engine.ids`), (0, 1) for any;
* `claim_store(marks, holds_tasks, where)`: once the store is open and the
  engine recovered, before anything listens: the counters to write so the
  store records who serves it, or a `KittiwakeError` that stops the start
  (`engine.identity`). With no extension claiming the store, the broker
  refuses a store recorded as a cluster node's;
* `labels`: constant labels every metric series of the broker carries (the
  cluster node's `node`), read by the faces through `Host.labels`;
* `start(host)` / `stop()`: its own I/O (the node's announcements to peers),
  started once the broker listens and stopped before the store closes;
* `description`: a few words for the start-up log line.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

from kittiwake.broker.dispatch import Handler
from kittiwake.engine.mutations import Mutation
from kittiwake.protocol import messages as m

if TYPE_CHECKING:
    from kittiwake.broker.faces import Host

__all__ = ["RequestExtension", "handlers_of", "id_class_of", "labels_of"]


class RequestExtension(Protocol):
    """What a layer above the broker adds to every request (see the module docstring)."""

    @property
    def description(self) -> str: ...  # for the start-up log line

    @property
    def id_class(self) -> tuple[int, int]: ...  # (residue, modulus) of the ids issued

    @property
    def labels(self) -> Mapping[str, str]: ...  # constant labels of every metric series

    def ops(self) -> Mapping[type[m.Request], Handler]:
        """Ops this extension answers, by request type."""

    def check(self, request: m.Request) -> None:
        """Raise a `KittiwakeError` to refuse `request` whole before it runs."""

    def claim_store(self, marks: Mapping[str, int], holds_tasks: bool, where: str) -> list[Mutation]:
        """What to write so the store records its server, given its unused counters and whether it
        holds tasks; raise a `KittiwakeError` to refuse to start on it."""

    async def start(self, host: Host) -> None:
        """Start its own I/O; the broker listens already."""

    async def stop(self) -> None:
        """Stop its I/O; the store is still open."""


def handlers_of(extensions: Sequence[RequestExtension]) -> dict[type[m.Request], Handler]:
    """The ops the extensions answer; two answering the same op is refused."""
    handlers: dict[type[m.Request], Handler] = {}
    for extension in extensions:
        for kind, handler in extension.ops().items():
            if kind in handlers:
                raise ValueError(f"two extensions answer op {kind.__name__}")
            handlers[kind] = handler
    return handlers


def id_class_of(extensions: Sequence[RequestExtension]) -> tuple[int, int]:
    """The residue class of the broker's ids: at most one extension may ask for one."""
    classes = [extension.id_class for extension in extensions if extension.id_class != (0, 1)]
    if len(classes) > 1:
        raise ValueError("two extensions ask for the broker's id space")
    return classes[0] if classes else (0, 1)


def labels_of(extensions: Sequence[RequestExtension]) -> dict[str, str]:
    labels: dict[str, str] = {}
    for extension in extensions:
        labels.update(extension.labels)
    return labels

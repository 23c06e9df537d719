"""A join's declaration: its name, job queue and ports, checked once for every layer.

A *join* (BalticLSC's multi-queue) starts one job when tokens with the same
key stand in all its required ports. The broker keeps the declaration
durably (`engine.joins`); clients send it (`protocol.messages.DeclareJoin`);
both check it with `JoinSpec.validate`.

* a *port* is a queue of the job queue's consistency group, so taking the
  tokens and enqueueing the job is one atomic change;
* `required`: a token whose pid is the key; `optional`: such a token, taken
  along when it is there as the required ports complete; `sequence`: the
  tokens `<key>/<index>` of a whole sequence, complete when every index up to
  the one flagged `SEQ_FINAL_HEADER` arrived (a merge);
* at least one port is required or a sequence; a queue is a port of one join
  at most (the broker checks that against the joins it holds).
"""

from __future__ import annotations

import re

import msgspec

from kittiwake.constants import DEAD_SUFFIX, JOINS_QUEUE, SEQ_SEPARATOR
from kittiwake.errors import BadRequest
from kittiwake.model import Limits, group_of, validate_count, validate_queue

REQUIRED, OPTIONAL, SEQUENCE = "required", "optional", "sequence"
MODES = (REQUIRED, OPTIONAL, SEQUENCE)
MAX_PORTS = 32
_PORT_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_INDEX = re.compile(r"[0-9]{1,18}")


class JoinPort(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    name: str
    queue: str
    mode: str = REQUIRED


class JoinSpec(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    name: str
    job_queue: str
    ports: list[JoinPort]
    max_attempts: int | None = None

    def validate(self, limits: Limits) -> JoinSpec:
        validate_queue(self.name, limits, "join")
        validate_queue(self.job_queue, limits, "job_queue")
        if not isinstance(self.ports, list) or not 1 <= len(self.ports) <= MAX_PORTS:
            raise BadRequest(f"a join has 1 to {MAX_PORTS} ports")
        group = group_of(self.job_queue)
        names: set[str] = set()
        queues: set[str] = {self.job_queue}
        for port in self.ports:
            if not _PORT_NAME.fullmatch(port.name):
                raise BadRequest(f"port name {port.name[:64]!r} is not 1-64 of [A-Za-z0-9_.-]")
            if port.name in names:
                raise BadRequest(f"port {port.name!r} appears twice")
            names.add(port.name)
            validate_queue(port.queue, limits, f"port {port.name!r} queue")
            if port.queue in queues:
                raise BadRequest(f"queue {port.queue!r} is named twice in join {self.name!r}")
            queues.add(port.queue)
            if group_of(port.queue) != group:
                raise BadRequest(
                    f"port {port.name!r} queue {port.queue!r} is not in the job queue's group {group!r}"
                )
            if port.mode not in MODES:
                raise BadRequest(f"port {port.name!r} mode must be one of {', '.join(MODES)}")
        for queue in queues:
            if queue.endswith(DEAD_SUFFIX) or is_joins_queue(queue):
                raise BadRequest(f"queue {queue!r} cannot take part in a join")
        if all(port.mode == OPTIONAL for port in self.ports):
            raise BadRequest("a join needs at least one required or sequence port")
        if self.max_attempts is not None:
            validate_count(self.max_attempts, "max_attempts", 1, limits.max_attempts_ceiling)
        return self

    def port_of(self, queue: str) -> JoinPort:
        for port in self.ports:
            if port.queue == queue:
                return port
        raise KeyError(queue)


def is_joins_queue(queue: str) -> bool:
    return queue == JOINS_QUEUE


def sequence_key(pid: str) -> tuple[str, int] | None:
    """(key, index) of a sequence port's token pid `<key>/<index>`, or None when malformed."""
    key, sep, index = pid.rpartition(SEQ_SEPARATOR)
    if not sep or not key or not _INDEX.fullmatch(index):
        return None
    return key, int(index)


def key_matches(pid_key: str, prefix: str) -> bool:
    """True when a token key is `prefix` or lies below it (`prefix/...`)."""
    return pid_key == prefix or pid_key.startswith(prefix + SEQ_SEPARATOR)
